"""The estimate before any call (issue 32.1), in process against the strict stand-in.

The estimate's calls per task equal the run's first-attempt calls exactly, its prompt tokens are
within 10% of the stand-in's usage (counted with tiktoken's o200k_base, as OpenAI counts
gpt-4o-mini), a warm cache makes what it holds free, another caller's entries are not free (no
oracle), and the embedded judge estimates no call.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bonusjudge_client.wire.grading import GradeRequest, GradeResult
from core.errors import InputError
from judge.cache import JudgeCache
from judge.calls import TENANT
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.estimate import estimate, prices_for
from judge.io import read_items
from standins.openai_server import OpenAIStandIn

EXAMPLES = Path(__file__).resolve().parents[2] / "judge" / "data" / "examples_chartom.jsonl"
MODEL = "openai/gpt-4o-mini"  # litellm prices it and counts it with o200k_base


def examples(*, drop_points: int = 0, blank: int = 0) -> list[tuple[str, GradeRequest]]:
    """The bundled examples; the first ``drop_points`` without bonus points (extracted), the
    last ``blank`` with an empty answer (no call for them)."""
    entries = [e for e in read_items(EXAMPLES, context_window=None) if isinstance(e, tuple)]
    out = []
    for n, (item_id, request) in enumerate(entries):
        if n < drop_points:
            request = request.model_copy(update={"bonus_points": None})
        if n >= len(entries) - blank:
            request = request.model_copy(update={"response": ""})
        out.append((item_id, request))
    return out


def first_attempts(results: list[GradeResult]) -> Counter[str]:
    """The run's first-attempt calls per task, from the results' provenance."""
    return Counter(
        call.task for r in results for call in r.provenance.calls if not call.cached
    )


async def grade_all(config: JudgeConfig, cache: JudgeCache, entries: Any) -> list[GradeResult]:
    grader = Grader(config, cache=cache)
    try:
        return [r async for r in grader.grade_many(entries, config=config)]
    finally:
        await grader.aclose()


@pytest.fixture(scope="module")
def judge_server():
    with OpenAIStandIn(tokenizer="o200k_base") as server:
        yield server


def config_for(server: OpenAIStandIn, **options: Any) -> JudgeConfig:
    return JudgeConfig(model=MODEL, api_base=server.base_url, metrics=("coverage", "defects"),
                       **options)


@pytest.mark.process
@pytest.mark.parametrize(
    "options", [{}, {"mode": "json_schema"}, {"mode": "md_json"}, {"rubric": "chartom-paper"}],
    ids=["tools", "json_schema", "md_json", "paper-text"],
)
def test_the_estimate_is_the_runs_first_attempts_and_the_providers_tokens(
    judge_server: OpenAIStandIn, tmp_path: Path, options: dict[str, Any]
) -> None:
    config = config_for(judge_server, **options)
    entries = examples(drop_points=3, blank=1)
    cache = JudgeCache(tmp_path / "cache")
    answer = asyncio.run(estimate(entries, config, cache=cache))
    assert len(cache) == 0  # nothing written

    judge_server.reset_stats()
    results = asyncio.run(grade_all(config, cache, entries))
    sent = judge_server.stats()
    made = first_attempts(results)
    assert sent.requests == sum(made.values())  # no re-ask or retry: the run's calls are these
    by_task = {t.task: t for t in answer.tasks}
    assert [t.task for t in answer.tasks] == ["extract_points", "coverage", "defects"]
    assert {task: t.calls for task, t in by_task.items()} == dict(made)
    assert answer.total.calls == sent.requests
    assert answer.total.cached == 0 and answer.items == len(entries)
    # Items 1-3 have no points here (one extraction call each); item 10 has an empty answer
    # (no call at all): 10 - 1 coverage and defects calls.
    assert (made["extract_points"], made["coverage"], made["defects"]) == (3, 9, 9)
    ratio = answer.total.prompt_tokens / sent.prompt_tokens
    assert 0.9 <= ratio <= 1.1, (answer.total.prompt_tokens, sent.prompt_tokens)
    assert answer.tokenizer is not None and "o200k_base" in answer.tokenizer
    assert answer.price_source == "litellm" and answer.total.cost_usd


@pytest.mark.process
def test_a_warm_cache_makes_what_it_holds_free(judge_server: OpenAIStandIn, tmp_path: Path) -> None:
    config = config_for(judge_server)
    entries = examples()
    cache = JudgeCache(tmp_path / "cache")
    cold = asyncio.run(estimate(entries, config, cache=cache))
    asyncio.run(grade_all(config, cache, entries[:4]))  # the first four are graded: cached
    warm = asyncio.run(estimate(entries, config, cache=cache))
    assert warm.total.cached == 8 and warm.total.calls == cold.total.calls - 8
    asyncio.run(grade_all(config, cache, entries))
    done = asyncio.run(estimate(entries, config, cache=cache))
    assert done.total.calls == 0 and done.total.prompt_tokens == 0
    assert done.total.cached == cold.total.calls
    assert done.total.cost_usd == 0.0


@pytest.mark.process
def test_another_callers_entries_are_not_free_in_a_shared_cache(
    judge_server: OpenAIStandIn, tmp_path: Path
) -> None:
    config = config_for(judge_server)
    entries = examples()[:3]
    cache = JudgeCache(tmp_path / "cache")

    async def as_caller(tenant: str, work: Any) -> Any:
        TENANT.set(tenant)
        return await work

    async def run(scope: Any) -> tuple[Any, Any]:
        grader = Grader(config, cache=cache, cache_scope=scope)
        try:
            await as_caller("a", _drain(grader.grade_many(entries, config=config)))
        finally:
            await grader.aclose()
        own = await as_caller("a", estimate(entries, config, cache=cache, cache_scope=scope))
        other = await as_caller("b", estimate(entries, config, cache=cache, cache_scope=scope))
        return own, other

    for scope in ("shared", "per_key"):
        own, other = asyncio.run(run(scope))
        assert own.total.calls == 0 and own.total.cached == 6, scope
        # Key b would be told "fresh call" for a's entries by the run (shared) or pay for them
        # (per_key): the estimate says the same.
        assert other.total.calls == 6 and other.total.cached == 0, scope


async def _drain(results: Any) -> None:
    async for _ in results:
        pass


def test_the_embedded_judge_estimates_no_call(tmp_path: Path) -> None:
    answer = asyncio.run(estimate(examples(), JudgeConfig(), cache=JudgeCache(tmp_path)))
    assert answer.total.calls == 0 and answer.tasks == [] and answer.items == 10
    assert answer.tokenizer is None and answer.total.cost_usd is None
    assert answer.notes == ["the judge is embedded-matcher (offline): it makes no judge call"]


def test_prices_are_litellms_or_given_and_never_half_given() -> None:
    given = prices_for("openai/standin", 1.0, 2.0)
    assert given is not None and given.source == "given"
    assert given.cost(1_000_000, 500_000) == pytest.approx(2.0)
    assert prices_for("openai/standin", None, None) is None
    litellm_price = prices_for(MODEL, None, None)
    assert litellm_price is not None and litellm_price.source == "litellm"
    assert litellm_price.prompt > 0 and litellm_price.completion > litellm_price.prompt
    with pytest.raises(InputError, match="price_out"):
        prices_for(MODEL, 1.0, None)


@pytest.mark.process
def test_an_unpriced_model_says_so(judge_server: OpenAIStandIn, tmp_path: Path) -> None:
    config = JudgeConfig(model="openai/standin", api_base=judge_server.base_url,
                         metrics=("coverage",))
    answer = asyncio.run(estimate(examples()[:2], config, cache=JudgeCache(tmp_path)))
    assert answer.total.calls == 2 and answer.total.cost_usd is None
    assert any("no price for openai/standin" in note for note in answer.notes)
    priced = asyncio.run(estimate(examples()[:2], config, cache=JudgeCache(tmp_path),
                                  price_in=1.0, price_out=4.0))
    expected = (priced.total.prompt_tokens + 4 * priced.total.completion_tokens) / 1e6
    assert priced.total.cost_usd == pytest.approx(expected, abs=1e-6)
    assert json.loads(priced.model_dump_json())["price_source"] == "given"
