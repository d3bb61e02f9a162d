"""Cancelled judge calls are counted as the provider saw them (issue 41.2).

A call cancelled while its request waited for one of the provider's connections was counted
as sent (in the usage and, under a cap, never settled: its reservation stayed held, so the cap
refused requests it had room for); one cancelled in flight must count, as the provider may bill
it. In process against the stand-in: the counters and the cap equal what it received.
"""

from __future__ import annotations

import asyncio

from bonusjudge_client.wire.grading import GradeRequest
from judge.budget import BUDGET, Budget, Cap
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.estimate import Prices, request_cost
from standins import OpenAIStandIn

PRICES = Prices(prompt=1.0, completion=4.0, source="given")


def request(n: int) -> GradeRequest:
    return GradeRequest(
        id=f"c{n}", question="How does Levin feel?", reference="He feels humiliated.",
        bonus_points=["Levin feels humiliated"], response=f"He is ashamed ({n}).",
    )


async def test_a_call_cancelled_before_it_was_sent_is_not_counted_nor_held() -> None:
    async with OpenAIStandIn(latency=0.5, record_requests=0) as judge:
        # One connection: of four items in flight, one request is sent, three wait for it.
        config = JudgeConfig(
            model="openai/standin", api_base=judge.base_url, metrics=("coverage",),
            concurrency=4, max_connections=1, cache=False,
        )
        cap = Cap("max_cost", max_cost=10.0)
        BUDGET.set(Budget([cap], request_cost(PRICES), PRICES))
        grader = Grader(config)
        try:
            tasks = [asyncio.ensure_future(grader.grade(request(n), config=config))
                     for n in range(4)]
            while judge.stats().in_flight < 1:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            for task in tasks:  # the run is cancelled: one request in flight, three waiting
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0.7)  # the one in flight reaches the stand-in's books
        finally:
            BUDGET.set(None)
            await grader.aclose()
        received = judge.stats().requests
    assert received == 1
    assert grader.stats.provider_requests == received  # the in-flight one counts, no other
    assert grader.stats.usage_of(None).provider_requests == received
    # The cancelled one settled at its estimate; the three never sent hold nothing.
    assert (cap.spent_calls, cap.held_calls) == (received, 0) and abs(cap.held_cost) < 1e-12, cap
    assert cap.spent_cost > 0
