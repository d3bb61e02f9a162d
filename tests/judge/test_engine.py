"""Engine behaviour with the shipped FakeProvider: verdicts, re-asks, unscored reasons, retries."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from core.errors import JudgeOutputError, ProviderError, RubricNotFound
from judge.cache import JudgeCache
from judge.config import JudgeConfig, JudgeOverrides
from judge.engine import Grader
from judge.fake import FakeCall, FakeProvider, FakeProviderExhausted, covering, defects
from judge.retry import CircuitBreaker, RetryBudget
from judge.types import ExtractRequest, GradeRequest

CFG = JudgeConfig(model="fake/judge", metrics=("coverage", "defects"))


def request(**kw) -> GradeRequest:
    base = {
        "id": "q1",
        "question": "How does Levin feel after Kitty refuses him?",
        "reference": "He feels humiliated and wants to return to his estate.",
        "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
        "response": "He is ashamed and longs for the countryside.",
        "tom_dimension": "emotion",
    }
    base.update(kw)
    return GradeRequest(**base)


def by_task(coverage, defect):
    """A handler answering the coverage call with `coverage`, the defect call with `defect`."""
    cov = iter(coverage)
    dfc = iter(defect)

    def handler(call: FakeCall):
        name = call.response_model.__name__ if call.response_model else "text"
        if name == "CoverageJudgement" or "[Bonus Points]" in call.user:
            return next(cov)
        return next(dfc)

    return handler


async def no_sleep(_: float) -> None:
    return None


def grader(provider, config=CFG, **kw) -> Grader:
    kw.setdefault("sleep", no_sleep)
    kw.setdefault("rng", random.Random(0))
    return Grader(config, provider=provider, **kw)


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


async def test_retryable_provider_errors_are_retried_then_succeed():
    err = ProviderError("429", reason="rate_limited", retryable=True, status=429, retry_after=1)
    fake = FakeProvider(handler=by_task([err, err, covering(1, 2, n=2)], [defects()]))
    g = grader(fake)
    result = await g.grade(request())
    assert result.coverage.coverage == 1.0
    assert g.stats.retries == 2


async def test_provider_errors_beyond_retries_are_unscored_with_reason():
    err = ProviderError("503", reason="provider_error", retryable=True, status=503)
    fake = FakeProvider(handler=by_task([err] * 10, [defects()]))
    cfg = CFG.model_copy(update={"retries": 2})
    result = await grader(fake, cfg).grade(request())
    assert result.coverage.status == "unscored"
    assert result.coverage.reason == "provider_error"
    assert result.provenance.calls[0].attempts == 3


async def test_non_retryable_error_is_not_retried():
    err = ProviderError("401", reason="provider_error", retryable=False, status=401)
    fake = FakeProvider(handler=by_task([err], [defects()]))
    g = grader(fake)
    result = await g.grade(request())
    assert result.coverage.reason == "provider_error"
    assert g.stats.retries == 0


async def test_retry_budget_caps_retries_for_the_run():
    err = ProviderError("429", reason="rate_limited", retryable=True, status=429)
    fake = FakeProvider(handler=lambda call: err)
    g = grader(fake, retry_budget=RetryBudget(limit=3))
    results = [r async for r in g.grade_many([request(id=f"q{i}") for i in range(5)])]
    assert g.stats.retries == 3
    assert all(r.status == "unscored" for r in results)
    assert g.retry_budget.refused > 0


async def test_circuit_breaker_past_max_outage_ends_circuit_open():
    """A provider that never comes back cannot hold a run forever: past max_outage, items end
    circuit_open (a reason --retry-unscored clears), and nothing more reaches the provider."""
    err = ProviderError("down", reason="provider_error", retryable=True, status=502)
    fake = FakeProvider(handler=lambda call: err)
    breaker = CircuitBreaker(threshold=3, cooldown=3600)
    cfg = CFG.model_copy(update={"retries": 4, "concurrency": 1, "max_outage": 0.0})
    g = grader(fake, cfg, breaker=breaker)
    results = [r async for r in g.grade_many([request(id=f"q{i}") for i in range(6)], config=cfg)]
    reasons = [r.coverage.reason for r in results]
    assert reasons.count("circuit_open") >= 5, reasons
    assert breaker.snapshot()["state"] == "open"
    assert len(fake.calls) == 3  # nothing reached the provider once open


async def test_outage_pauses_items_instead_of_ending_them():
    """Items wait out an outage (spending none of their own retries) and are graded after it."""
    calls = {"n": 0}
    err = ProviderError("down", reason="provider_error", retryable=True, status=503)

    def handler(call: FakeCall):
        calls["n"] += 1
        if calls["n"] <= 10:  # an outage: the first 10 requests fail
            return err
        return covering(1, n=2)

    fake = FakeProvider(handler=handler)
    breaker = CircuitBreaker(threshold=3, cooldown=0.05, max_cooldown=0.1)
    cfg = CFG.model_copy(update={"metrics": ("coverage",), "retries": 3, "concurrency": 4})
    g = grader(fake, cfg, breaker=breaker)
    results = [r async for r in g.grade_many([request(id=f"q{i}") for i in range(12)], config=cfg)]
    assert [r.status for r in results] == ["scored"] * 12
    assert breaker.snapshot()["opened_count"] >= 1 and breaker.state == "closed"
    assert g.stats.outage_waits > 0


async def test_one_breaker_per_model_and_base_url():
    err = ProviderError("down", reason="provider_error", retryable=True, status=502)

    def handler(call: FakeCall):
        return err if call.config.model == "fake/down" else covering(2, n=2)

    fake = FakeProvider(handler=handler)
    down = CFG.model_copy(update={"model": "fake/down", "metrics": ("coverage",),
                                  "retries": 0, "max_outage": 0.0})
    up = CFG.model_copy(update={"metrics": ("coverage",)})
    g = grader(fake, up, breaker=CircuitBreaker(threshold=2, cooldown=3600))
    for i in range(3):
        await g.grade(request(id=f"d{i}"), config=down)
    assert g.breaker_for(down).state == "open"
    assert g.breaker_for(up).state == "closed" and g.breaker_for(up) is g.breaker
    other_base = up.model_copy(update={"api_base": "http://127.0.0.1:9/v1"})
    assert g.breaker_for(other_base) is not g.breaker
    result = await g.grade(request(id="u1"), config=up)
    assert result.status == "scored"  # another judge's outage does not pause this one


async def test_client_errors_do_not_open_the_breaker():
    err = ProviderError("bad request", reason="provider_error", retryable=False, status=400)
    fake = FakeProvider(handler=lambda call: err)
    breaker = CircuitBreaker(threshold=2, cooldown=3600)
    cfg = CFG.model_copy(update={"metrics": ("coverage",), "concurrency": 1})
    g = grader(fake, cfg, breaker=breaker)
    results = [r async for r in g.grade_many([request(id=f"q{i}") for i in range(5)], config=cfg)]
    assert [r.coverage.reason for r in results] == ["provider_error"] * 5
    assert breaker.state == "closed" and len(fake.calls) == 5


async def test_judge_output_errors_keep_their_reason():
    for reason in ("refusal", "truncated_output", "empty_output"):
        exc = JudgeOutputError("bad", reason=reason)
        fake = FakeProvider(handler=by_task([exc], [defects()]))
        result = await grader(fake).grade(request())
        assert result.coverage.reason == reason


async def test_cache_hit_on_rerun_and_key_sensitivity(tmp_path):
    cache = JudgeCache(tmp_path / "c")
    fake = FakeProvider(handler=by_task([covering(1, n=2)] * 10, [defects()] * 10))
    g = grader(fake, cache=cache)
    await g.grade(request())
    assert len(fake.calls) == 2
    # Same item again: both calls served from the cache.
    again = await g.grade(request())
    assert len(fake.calls) == 2
    assert all(c.cached for c in again.provenance.calls)
    # Timeout, retries and concurrency do not change the output: still hits.
    cfg = CFG.model_copy(update={"timeout": 5, "retries": 1, "concurrency": 3})
    await g.grade(request(), config=cfg)
    assert len(fake.calls) == 2
    # Model, temperature, rubric text and response change it: misses.
    for changed in (
        CFG.model_copy(update={"model": "fake/other"}),
        CFG.model_copy(update={"temperature": 0.2}),
    ):
        await g.grade(request(), config=changed)
    assert len(fake.calls) == 6
    await g.grade(request(response="Something else entirely."))
    assert len(fake.calls) == 8


async def test_unscored_outputs_are_not_cached(tmp_path):
    cache = JudgeCache(tmp_path / "c")
    bad = {"points": []}
    fake = FakeProvider(handler=by_task([bad] * 3 + [covering(1, n=2)], [defects()] * 2))
    g = grader(fake, cache=cache)
    first = await g.grade(request())
    assert first.coverage.status == "unscored"
    second = await g.grade(request())
    assert second.coverage.status == "scored"


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
