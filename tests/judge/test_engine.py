"""Engine behaviour with the shipped FakeProvider: verdicts, re-asks, unscored reasons, extraction,
and the order of the judge calls in the provenance.

Retries, the budget and the breaker are in ``test_retries.py``; the cache in ``test_cache.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from bonusjudge_client.wire.grading import ExtractRequest
from core.errors import JudgeOutputError, ProviderError, RubricNotFound
from judge.cache import JudgeCache
from judge.config import JudgeConfig, JudgeOverrides
from judge.providers.base import Completion
from judge.providers.fake import FakeCall, FakeProvider, FakeProviderExhausted, covering, defects
from tests.helpers.engine import ENGINE_CONFIG as CFG
from tests.helpers.engine import by_task
from tests.helpers.engine import levin_request as request
from tests.helpers.engine import quiet_grader as grader


async def test_structured_verdicts_make_coverage_and_penalty():
    fake = FakeProvider(handler=by_task([covering(2, n=2)], [defects("Kitty did not refuse")]))
    result = await grader(fake).grade(request())
    assert result.status == "scored"
    assert result.coverage is not None and result.defects is not None
    assert [v.covered for v in result.coverage.verdicts] == [False, True]
    assert result.coverage.covered == 1 and result.coverage.coverage == 0.5
    assert result.defects.penalized is True
    assert result.defects.defects[0].description == "Kitty did not refuse"
    assert {c.task for c in result.provenance.calls} == {"coverage", "defects"}
    assert result.provenance.rubrics["coverage"].id == "chartom-coverage"


async def test_out_of_range_and_duplicate_indices_are_reasked_then_accepted():
    bad_range = {"points": [{"index": 1, "covered": True}, {"index": 3, "covered": True}]}
    duplicate = {"points": [{"index": 1, "covered": True}, {"index": 1, "covered": False}]}
    fake = FakeProvider(handler=by_task([bad_range, duplicate, covering(1, n=2)], [defects()]))
    result = await grader(fake).grade(request())
    assert result.coverage.status == "scored"
    assert result.coverage.covered == 1
    coverage_calls = [
        c
        for c in fake.calls
        if c.response_model is not None and c.response_model.__name__ == "CoverageJudgement"
    ]
    assert len(coverage_calls) == 3  # two re-asks
    assert result.provenance.calls[0].attempts >= 1


async def test_invalid_after_all_reasks_is_unscored_not_zero():
    bad = {"points": [{"index": 1, "covered": True}, {"index": 1, "covered": True}]}
    fake = FakeProvider(handler=by_task([bad] * 3, [defects()]))
    result = await grader(fake).grade(request())
    assert result.status == "unscored"
    assert result.coverage.status == "unscored"
    assert result.coverage.reason == "validation_failure"
    assert result.coverage.covered is None and result.coverage.coverage is None
    assert all(v.covered is None for v in result.coverage.verdicts)
    assert result.defects.status == "scored" and result.defects.penalized is False
    assert result.unscored_reasons == ["coverage: validation_failure"]


async def test_judge_output_errors_keep_their_reason():
    for reason in ("refusal", "truncated_output", "empty_output"):
        exc = JudgeOutputError("bad", reason=reason)
        fake = FakeProvider(handler=by_task([exc], [defects()]))
        result = await grader(fake).grade(request())
        assert result.coverage.reason == reason


async def test_bonus_points_extracted_when_absent_and_cached(tmp_path):
    def handler(call: FakeCall):
        name = call.response_model.__name__
        if name == "BonusPointsExtraction":
            return {"points": ["Levin feels humiliated", "He wants to go home"]}
        if name == "CoverageJudgement":
            return covering(1, n=2)
        return defects()

    fake = FakeProvider(handler=handler)
    g = grader(fake, cache=JudgeCache(tmp_path / "c"))
    result = await g.grade(request(bonus_points=None))
    assert result.coverage.points_source == "extracted"
    assert [v.text for v in result.coverage.verdicts] == [
        "Levin feels humiliated",
        "He wants to go home",
    ]
    calls = len(fake.calls)
    await g.grade(request(bonus_points=None))
    assert len(fake.calls) == calls


async def test_extraction_failure_leaves_coverage_unscored():
    def handler(call: FakeCall):
        if call.response_model.__name__ == "BonusPointsExtraction":
            return ProviderError("x", reason="provider_error", retryable=False)
        return defects()

    result = await grader(FakeProvider(handler=handler)).grade(request(bonus_points=None))
    assert result.coverage.status == "unscored"
    assert result.coverage.reason == "provider_error"
    assert "extraction" in (result.coverage.detail or "")


async def test_extract_points_api():
    fake = FakeProvider(outputs=[{"points": ["A point"]}])
    out = await grader(fake).extract_points(ExtractRequest(question="Q?", reference="A point."))
    assert out.status == "scored" and out.bonus_points == ["A point"]


async def test_fake_provider_running_out_is_raised_not_scored():
    fake = FakeProvider(outputs=[covering(1, n=2)])
    with pytest.raises(FakeProviderExhausted):
        await grader(fake).grade(request())


async def test_grade_many_bounded_concurrency_and_every_item_once():
    fake = FakeProvider(handler=by_task([covering(1, n=2)] * 50, [defects()] * 50), latency=0.01)
    cfg = CFG.model_copy(update={"concurrency": 4})
    g = grader(fake, cfg)
    ids = [f"q{i}" for i in range(50)]
    results = [r async for r in g.grade_many([request(id=i) for i in ids], config=cfg)]
    assert sorted(r.id for r in results) == sorted(ids)


async def test_unknown_rubric_and_bad_override():
    g = grader(FakeProvider(outputs=[]))
    with pytest.raises(RubricNotFound):
        g.resolve(JudgeOverrides(rubric="nope"))
    with pytest.raises(ValidationError, match="metrics"):
        JudgeOverrides(metrics=("bogus",))  # type: ignore[arg-type]
    with pytest.raises(RubricNotFound, match="missing"):
        grader(FakeProvider(outputs=[]), CFG.model_copy(update={"rubric": "missing"}))


async def test_length_control_truncates_before_judging():
    fake = FakeProvider(handler=by_task([covering(n=2)], [defects()]))
    long = "word " * 200
    cfg = CFG.model_copy(update={"length_control": True})
    result = await grader(fake, cfg).grade(request(response=long), config=cfg)
    assert result.provenance.response_truncated is True
    sent = fake.calls[0].user
    assert sent.count("word") < 40  # reference has 10 words: cap max(15, 15)


async def test_chinese_items_use_the_chinese_rubric():
    fake = FakeProvider(handler=by_task([covering(1, n=1)], [defects()]))
    result = await grader(fake).grade(
        request(
            question="黛玉葬花时是什么心情？",
            reference="她感到悲伤和孤独。",
            bonus_points=["黛玉感到悲伤孤独"],
            response="她很伤心，觉得孤单。",
        )
    )
    assert result.language == "zh"
    assert result.provenance.rubrics["coverage"].language == "zh"
    assert "[得分点]" in fake.calls[0].user or "[得分点]" in fake.calls[1].user


async def test_metrics_take_the_best_of_several_references():
    cfg = JudgeConfig(model="fake/judge", metrics=("rouge_l",))
    g = grader(FakeProvider(outputs=[]), cfg)
    one = await g.grade(request(response="in the trunk of her car", reference="under the bed"))
    several = await g.grade(request(response="in the trunk of her car", reference="under the bed",
                                    references=["in her car trunk", "the car"]))
    assert one.rouge_l.f1 < 0.3
    assert several.rouge_l.f1 > 0.5  # "in her car trunk" matches best


ANSWERS: dict[str, Any] = {
    "BonusPointsExtraction": {"points": ["Levin feels humiliated", "He wants to go home"]},
    "CoverageJudgement": covering(1, n=2),
    "DefectJudgement": defects(),
}


class DelayedProvider:
    """Answers every task at once, after a delay set per response model (to reorder the calls)."""

    def __init__(self, delays: dict[str, float]) -> None:
        self.delays = delays
        self.finished: list[str] = []

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        assert response_model is not None
        name = response_model.__name__
        await asyncio.sleep(self.delays.get(name, 0.0))
        self.finished.append(name)
        output = response_model.model_validate(ANSWERS[name], context=validation_context)
        return Completion(output=output, raw_text="{}")


@pytest.mark.parametrize(
    "delays",
    [
        {"BonusPointsExtraction": 0.0, "CoverageJudgement": 0.0, "DefectJudgement": 0.05},
        {"BonusPointsExtraction": 0.03, "CoverageJudgement": 0.03, "DefectJudgement": 0.0},
        {"BonusPointsExtraction": 0.0, "CoverageJudgement": 0.05, "DefectJudgement": 0.01},
    ],
)
async def test_provenance_lists_the_calls_in_a_fixed_order(delays):
    """Extraction, coverage, defects: whichever call finished first (they run concurrently)."""
    provider = DelayedProvider(delays)
    result = await grader(provider).grade(request(bonus_points=None))
    assert result.status == "scored"
    assert [c.task for c in result.provenance.calls] == ["extract_points", "coverage", "defects"]
    assert list(result.provenance.rubrics) == ["extract_points", "coverage", "defects"]
    given = await grader(DelayedProvider(delays)).grade(request())
    assert [c.task for c in given.provenance.calls] == ["coverage", "defects"]
    assert list(given.provenance.rubrics) == ["coverage", "defects"]


async def test_the_order_holds_when_defects_finish_first():
    provider = DelayedProvider({"CoverageJudgement": 0.05})
    result = await grader(provider).grade(request())
    assert provider.finished == ["DefectJudgement", "CoverageJudgement"]  # defects came back first
    assert [c.task for c in result.provenance.calls] == ["coverage", "defects"]


async def test_a_grade_cancelled_as_its_metrics_start_leaves_no_coroutine_unawaited() -> None:
    """A job cancelled mid-chunk cancels grades whose metric tasks had not started yet.

    Each metric's coroutine was wrapped in another before ``gather`` made it a task, so one
    cancelled before it ran was never awaited (two ``RuntimeWarning``s in the test run, from
    ``tests/api/jobs/test_chunks.py``'s cancel). Cancelled at every step of its start, a grade
    leaves none.
    """
    judge = grader(FakeProvider(handler=by_task([covering(0, n=2)] * 12, [defects()] * 12)))
    for steps in range(12):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            task = asyncio.create_task(judge.grade(request()))
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await asyncio.sleep(0)
            gc.collect()
        unawaited = [str(w.message) for w in seen if "never awaited" in str(w.message)]
        assert unawaited == [], (steps, unawaited)
    await judge.aclose()
