"""A cap during a run (issue 32.2): every provider request reserves against the budget first.

In process against the strict stand-in under faults (5xx retried, malformed answers re-asked):
a request that would pass the cap is never sent, its call ends ``budget_exhausted`` (never a
score), and what the caps settled equals what the provider saw. The reservation arithmetic is
checked on its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bonusjudge_client.wire.grading import GradeRequest
from judge.budget import BUDGET, Budget, BudgetExhausted, Cap
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.estimate import Prices, request_cost
from standins import OpenAIStandIn
from standins.openai_server import FaultPlan
from tests.helpers.faults import load_workload

EXAMPLES = Path(__file__).resolve().parents[2] / "judge" / "data" / "examples_chartom.jsonl"
PRICES = Prices(prompt=1.0, completion=4.0, source="given")


def test_a_reservation_that_would_pass_the_cap_is_refused_and_the_cap_stays_shut() -> None:
    cap = Cap("--max-cost", max_cost=1.0, max_calls=3)
    budget = Budget([cap])
    first = budget.reserve(0.6)
    with pytest.raises(BudgetExhausted, match=r"--max-cost \$1: \$0.000000 spent"):
        budget.reserve(0.5)  # 0.6 held + 0.5 > 1.0
    assert cap.exhausted and budget.exhausted
    with pytest.raises(BudgetExhausted):
        budget.reserve(0.0)  # stays shut: the run stops sending
    # The held request settles to what it cost; nothing else is held.
    assert budget.settle(first, 2, cost_usd=0.7) == 0.7
    assert (cap.spent_cost, cap.spent_calls, cap.held_cost, cap.held_calls) == (0.7, 2, 0.0, 0)


def test_settling_prices_reported_tokens_and_bills_a_failure_only_what_it_reports() -> None:
    spends: list[tuple[float, int]] = []
    cap = Cap("max_cost", max_cost=10.0, on_spend=lambda cost, calls: spends.append((cost, calls)))
    budget = Budget([cap], prices=PRICES)
    # Given prices price the reported tokens, over litellm's figure.
    assert budget.settle(budget.reserve(0.5), 1, prompt_tokens=1_000_000,
                         completion_tokens=250_000, cost_usd=0.01) == pytest.approx(2.0)
    # An answer without usage costs its estimate; a 5xx that reported nothing costs nothing.
    assert budget.settle(budget.reserve(0.5), 1) == 0.5
    assert budget.settle(budget.reserve(0.5), 1, answered=False) == 0.0
    assert cap.spent_calls == 3 and cap.spent_cost == pytest.approx(2.5)
    assert spends == [(pytest.approx(2.0), 1), (0.5, 1), (0.0, 1)]
    calls_only = Cap("--max-calls", max_calls=1)
    counted = Budget([calls_only])
    counted.reserve(0.0)
    with pytest.raises(BudgetExhausted, match="1 request"):
        counted.reserve(0.0)


def work(copies: int) -> list[tuple[str, GradeRequest]]:
    """The bundled examples, ``copies`` times over under distinct ids (no cache hits)."""
    base = load_workload(EXAMPLES)
    return [
        (f"{n}-{key}", request.model_copy(update={"id": f"{n}-{request.id}",
                                                   "response": f"{request.response} ({n})"}))
        for n in range(copies) for key, request in base
    ]


async def test_a_capped_grade_sends_nothing_past_the_cap_and_settles_what_the_provider_saw(
) -> None:
    async def no_wait(seconds: float) -> None:
        return None

    faults = FaultPlan(probabilities={"server_error": 0.15, "malformed_json": 0.15}, seed=32)
    async with OpenAIStandIn(faults=faults, tokenizer="o200k_base", latency=0.05,
                             record_requests=0) as judge:
        config = JudgeConfig(
            model="openai/standin", api_base=judge.base_url, metrics=("coverage", "defects"),
            concurrency=4, cache=False,
        )
        cost_of = request_cost(PRICES)
        cap = Cap("--max-cost", max_cost=0.025)
        budget = Budget([cap], cost_of, PRICES)
        grader = Grader(config, sleep=no_wait)
        BUDGET.set(budget)
        try:
            results = [r async for r in grader.grade_many(work(3))]
        finally:
            BUDGET.set(None)
            await grader.aclose()
        seen = judge.stats()
    assert cap.exhausted and 0 < seen.requests < 60, cap
    # What the cap settled is what the provider billed: its tokens at the given prices.
    billed = PRICES.cost(seen.prompt_tokens, seen.completion_tokens)
    assert cap.spent_cost == pytest.approx(billed) and cap.spent_calls == seen.requests
    assert grader.stats.provider_calls == seen.requests  # nothing counted that was not sent
    # Past the cap by at most what was in flight when it was reached (4 calls, with re-asks).
    # (An upper bound of one request on this workload: a 2,000-token prompt, a 600-token answer;
    # each in-flight call may re-ask twice.)
    assert billed <= 0.025 + 4 * 3 * PRICES.cost(2_000, 600), billed
    capped = [r for r in results if any(x.endswith(": budget_exhausted")
                                        for x in r.unscored_reasons)]
    assert capped and all(r.status == "unscored" for r in capped)
    for result in capped:
        coverage = result.coverage
        assert coverage is not None
        if coverage.reason == "budget_exhausted":
            assert coverage.covered is None and coverage.coverage is None  # never 0
            assert "not sent: the cap is reached (--max-cost $0.025" in (coverage.detail or "")

