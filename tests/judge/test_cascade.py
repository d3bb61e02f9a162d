"""The cascade judge in the engine (issue 32.4): the matcher where it is sure, the LLM where not.

The real matcher judges (its encoder loads once per process); the band is fixed here, so which
item is sure does not hang on the shipped fit: the exact answer (p 0.96-0.98) and an unrelated
one (p 0.05) are outside [0.2, 0.9], the close paraphrase of both points (p 0.85 and 0.74) is
inside. The LLM is the shipped FakeProvider, which records every call.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import ConfigError, ProviderError
from judge import engine
from judge.aggregate import summarize
from judge.config import JudgeConfig, JudgeOverrides, load_settings
from judge.identity import matcher_identity
from judge.matcher import MODEL_KINDS, CascadeBand
from judge.providers.fake import FakeCall, FakeProvider, covering, defects
from tests.helpers.engine import by_task
from tests.helpers.engine import levin_request as request
from tests.helpers.engine import quiet_grader as grader

CASCADE = JudgeConfig(model="fake/judge", judge="cascade", metrics=("coverage", "defects"))

EXACT = "Levin feels humiliated and he wants to return to his estate."
UNRELATED = "The weather in Moscow was cold that winter."
CLOSE = "He feels humiliated and wants to go back to his estate in the country."


@pytest.fixture(autouse=True)
def band(monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = {kind: CascadeBand(0.2, 0.9) for kind in MODEL_KINDS}
    monkeypatch.setattr(engine, "_cascade_bands", lambda config: fixed)


def llm_tasks(fake: FakeProvider) -> list[str]:
    return [c.response_model.__name__ if c.response_model else "text" for c in fake.calls]


async def test_sure_items_make_no_llm_call_and_leave_defects_not_assessed() -> None:
    fake = FakeProvider(handler=by_task([], []))  # any call would raise StopIteration
    g = grader(fake, CASCADE)
    covered = await g.grade(request(id="exact", response=EXACT))
    missed = await g.grade(request(id="unrelated", response=UNRELATED))
    assert fake.calls == []
    for result, expected in ((covered, [True, True]), (missed, [False, False])):
        assert result.decided_by == "embedded-matcher"
        assert result.status == "scored" and result.provenance.calls == []
        assert [v.covered for v in result.coverage.verdicts] == expected
        assert all(v.confidence is not None for v in result.coverage.verdicts)
        # Exactly the embedded judge's answer: not a silent "no defects".
        assert result.defects.status == "not_assessed" and result.defects.penalized is None
    assert covered.provenance.judge == "fake/judge"
    assert covered.provenance.judge_version == matcher_identity()["version"]


async def test_an_unsure_item_is_the_llms_for_coverage_and_defects() -> None:
    fake = FakeProvider(handler=by_task([covering(1, n=2)], [defects("wrong estate")]))
    result = await grader(fake, CASCADE).grade(request(response=CLOSE))
    assert sorted(llm_tasks(fake)) == ["CoverageJudgement", "DefectJudgement"]
    assert result.decided_by == "llm"
    # The LLM's verdicts replace the matcher's (which credited both points).
    assert [v.covered for v in result.coverage.verdicts] == [True, False]
    assert all(v.confidence is None for v in result.coverage.verdicts)
    assert result.defects.status == "scored" and result.defects.penalized is True
    assert "uncertain band: 1 (p=0.85), 2 (p=0.74)" in result.coverage.detail
    assert {c.task for c in result.provenance.calls} == {"coverage", "defects"}


async def test_an_llm_failure_is_unscored_with_its_reason_not_the_matchers_verdict() -> None:
    def failing(call: FakeCall) -> Any:
        return ProviderError("down", reason="provider_error", retryable=False)

    result = await grader(FakeProvider(handler=failing), CASCADE).grade(request(response=CLOSE))
    assert result.decided_by == "llm" and result.status == "unscored"
    assert result.coverage.status == "unscored" and result.coverage.reason == "provider_error"
    assert result.coverage.covered is None
    assert all(v.covered is None for v in result.coverage.verdicts)
    assert result.defects.status == "unscored" and result.defects.reason == "provider_error"
    reasons = ["coverage: provider_error", "defects: provider_error"]
    assert sorted(result.unscored_reasons) == reasons


async def test_the_summary_counts_the_routes_and_the_calls_saved() -> None:
    fake = FakeProvider(handler=by_task([covering(1, 2, n=2)], [defects()]))
    g = grader(fake, CASCADE)
    answers = {"a": EXACT, "b": UNRELATED, "c": CLOSE, "d": "", "e": EXACT}
    results = [await g.grade(request(id=k, response=v)) for k, v in answers.items()]
    summary = summarize(results)
    assert [r.decided_by for r in results] == [
        "embedded-matcher", "embedded-matcher", "llm", "embedded-matcher", "embedded-matcher",
    ]  # fmt: skip
    assert summary.decided_by_matcher == 4 and summary.decided_by_llm == 1
    assert summary.decided_by_matcher + summary.decided_by_llm == summary.items
    assert summary.llm_share == 0.2
    # Two calls (coverage, defects) for each of the three non-blank items the matcher decided;
    # the blank answer would have cost the LLM judge nothing either.
    assert summary.llm_calls_saved == 6
    assert len(fake.calls) == 2
    # The breakdowns count their own items.
    assert summary.by_dimension["emotion"].decided_by_llm == 1


async def test_defects_alone_are_routed_by_the_matcher_too() -> None:
    fake = FakeProvider(handler=by_task([], [defects()]))
    config = CASCADE.model_copy(update={"metrics": ("defects",)})
    g = grader(fake, config)
    sure = await g.grade(request(response=EXACT))
    unsure = await g.grade(request(response=CLOSE))
    assert sure.decided_by == "embedded-matcher" and sure.defects.status == "not_assessed"
    assert unsure.decided_by == "llm" and unsure.defects.status == "scored"
    assert llm_tasks(fake) == ["DefectJudgement"]


async def test_an_empty_answer_asks_no_judge() -> None:
    fake = FakeProvider(handler=by_task([], []))
    result = await grader(fake, CASCADE).grade(request(response=None))
    assert fake.calls == [] and result.decided_by == "embedded-matcher"
    assert result.coverage.covered == 0 and result.flags == ["null_response"]


async def test_other_judges_say_nothing_of_decided_by() -> None:
    fake = FakeProvider(handler=by_task([covering(1, n=2)], [defects()]))
    result = await grader(fake).grade(request())
    assert result.decided_by is None
    assert summarize([result]).llm_share is None


def test_a_cascade_without_an_llm_names_what_to_set() -> None:
    # The options alone are fine (`grade --server` sends them to a service with its own model);
    # the grader that would judge refuses them.
    settings = load_settings(judge={"judge": "cascade"})
    with pytest.raises(ConfigError, match=r"needs an LLM judge model .* set `model` \(--model"):
        grader(FakeProvider(outputs=[]), settings.judge)
    llm = grader(FakeProvider(outputs=[]))
    with pytest.raises(ConfigError, match="needs an LLM judge model") as refused:
        llm.resolve(JudgeOverrides(judge="cascade", model="embedded-matcher"))
    assert refused.value.field == "model"


def test_the_cascade_hash_covers_the_matcher_and_the_target() -> None:
    llm = JudgeConfig(model="fake/judge")
    cascade = llm.model_copy(update={"judge": "cascade"})
    stricter = cascade.model_copy(update={"cascade_agreement": 0.97})
    hashes = {llm.config_hash(), cascade.config_hash(), stricter.config_hash()}
    assert len(hashes) == 3
    identity = cascade.judge_identity()
    assert identity is not None and identity["digest"] == matcher_identity()["digest"]
    # The LLM judge's own hash does not move (its calibration mappings and grade files stand).
    assert llm.judge_identity() is None
    # Its calls are the LLM judge's calls: one cache entry serves both.
    assert cascade.output_fields() == llm.output_fields()


def test_an_unfitted_agreement_is_refused_naming_the_fitted_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.undo()  # the shipped bands, not the fixture's
    config = CASCADE.model_copy(update={"cascade_agreement": 0.8})
    with pytest.raises(ConfigError, match=r"no cascade band is fitted for agreement 0.8; fitted: "):
        grader(FakeProvider(outputs=[]), config)
