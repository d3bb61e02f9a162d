"""Every request a provider receives is counted, with its tokens (issue 31.3, third bullet).

The stand-in judge keeps its own books (requests received, tokens it reported in ``usage``).
Under faults (5xx, malformed answers that get re-asked, invalid answers, refusals, cut-off
answers) the engine's counters (what ``/metrics`` exports) and the results' provenance must add
up to those books, on both transports. Before, failed and unusable calls counted no tokens and
re-asks were missing from the request count.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bonusjudge_client.wire.grading import GradeRequest
from judge.aggregate import ProvenanceCalls
from judge.config import JudgeConfig
from judge.engine import Grader
from standins import OpenAIStandIn
from standins.openai_server import FaultPlan
from tests.helpers.faults import load_workload

EXAMPLES = Path(__file__).resolve().parents[2] / "judge" / "data" / "examples_chartom.jsonl"

FAULTS = FaultPlan(
    probabilities={
        "server_error": 0.1, "malformed_json": 0.15, "invalid": 0.1, "refusal": 0.1,
        "truncated": 0.05, "empty": 0.05,
    },
    seed=31,
)


def work() -> list[tuple[str, GradeRequest]]:
    """The bundled examples, three times over under distinct ids (no cache hits)."""
    base = load_workload(EXAMPLES)
    return [
        (f"{n}-{key}", request.model_copy(update={"id": f"{n}-{request.id}",
                                                   "response": f"{request.response} ({n})"}))
        for n in range(3) for key, request in base
    ]


@pytest.mark.parametrize("transport", ["direct", "litellm"])
async def test_counters_and_provenance_add_up_to_what_the_provider_saw(transport: str) -> None:
    async def no_wait(seconds: float) -> None:
        return None

    # A priced model, and a stand-in that caches prompt prefixes (from 256 units: the bundled
    # prompts are shorter than OpenAI's 1,024), so cached tokens and their price are billed too.
    async with OpenAIStandIn(faults=FAULTS, record_requests=0, prompt_cache=(256, 64)) as judge:
        config = JudgeConfig(
            model="openai/gpt-4o-mini", api_base=judge.base_url,
            metrics=("coverage", "defects"), transport=transport, concurrency=4, cache=False,
        )
        grader = Grader(config, sleep=no_wait)
        try:
            results = [r async for r in grader.grade_many(work())]
        finally:
            await grader.aclose()
        seen = judge.stats()
    stats = grader.stats
    provenance = ProvenanceCalls()
    for result in results:
        provenance.add(result)
    faults = {kind for kind, count in seen.outcomes.items() if count and kind != "ok"}
    assert {"server_error", "malformed_json", "refusal", "truncated"} <= faults, seen.outcomes
    assert stats.reasks > 0 and stats.retries > 0
    # Requests: the provider's count = the engine's = the results' (no probe was sent here).
    assert seen.requests == stats.provider_calls == provenance.judge_calls
    # Tokens: every answered request's usage, unusable answers included.
    assert seen.prompt_tokens == stats.prompt_tokens == provenance.prompt_tokens > 0
    assert seen.completion_tokens == stats.completion_tokens == provenance.completion_tokens
    assert seen.cached_tokens == stats.cached_tokens == provenance.cached_tokens > 0
    # Cost: the stand-in's counts at the model's prices, cached tokens at the cache-read price.
    bill = seen.cost("gpt-4o-mini")
    assert stats.cost_usd == pytest.approx(bill, rel=1e-9)
    assert provenance.cost_usd == pytest.approx(bill, rel=1e-9)
    # The same, for the one caller they were made for.
    usage = stats.usage_of(None)
    assert (usage.provider_requests, usage.prompt_tokens, usage.cached_tokens, usage.items) == (
        seen.requests, seen.prompt_tokens, seen.cached_tokens, len(results))


@pytest.mark.parametrize("transport", ["direct", "litellm"])
async def test_a_refusal_is_one_request_not_re_asked(transport: str) -> None:
    """A judge that declines the prompt declines a re-ask too: one billed request per task.

    Before, a refusal was re-asked like an invalid answer, ``reasks`` times (3 requests a task
    with the default 2), on both transports.
    """
    refusing = FaultPlan(probabilities={"refusal": 1.0}, seed=1)
    async with OpenAIStandIn(faults=refusing, record_requests=0) as judge:
        config = JudgeConfig(
            model="openai/standin", api_base=judge.base_url, metrics=("coverage", "defects"),
            transport=transport, concurrency=2, cache=False, reasks=2,
        )
        grader = Grader(config)
        try:
            results = [r async for r in grader.grade_many(work()[:3])]
        finally:
            await grader.aclose()
        seen = judge.stats()
    reasons = [r.unscored_reasons for r in results]
    assert reasons == [["coverage: refusal", "defects: refusal"]] * len(results), reasons
    # Two tasks per item (coverage, defects), one request each.
    assert seen.requests == grader.stats.provider_calls == 2 * len(results)
    assert grader.stats.reasks == 0
