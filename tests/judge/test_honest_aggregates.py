"""Honest aggregates: bpc next to bpc_all and the unscored rate, empty responses, calibrated
mappings applied to the metric they name."""

from __future__ import annotations

import json
import random

import pytest

from bonusjudge_client.wire.grading import GradeRequest
from core.errors import ConfigError, JudgeOutputError
from judge.aggregate import Aggregator, format_table, summarize
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeProvider, covering
from tests.helpers.engine import ENGINE_CONFIG as CFG
from tests.helpers.engine import levin_request, no_sleep


def request(i: int, response: str = "He is ashamed.", respondent: str = "m-a") -> GradeRequest:
    return levin_request(id=f"q{i}", response=response, respondent=respondent)


def grader(provider: FakeProvider, config: JudgeConfig = CFG) -> Grader:
    return Grader(config, provider=provider, sleep=no_sleep, rng=random.Random(0))


async def test_judge_failures_cannot_inflate_bpc_all() -> None:
    """The issue's case: zero-coverage responses made to fail leave bpc's denominator, not
    bpc_all's."""

    def handler(call: FakeCall):
        if "[Bonus Points]" in call.user or (call.response_model and "Coverage" in
                                             call.response_model.__name__):
            if "FAIL" in call.user:
                return JudgeOutputError("refused", reason="refusal")
            return covering(1, 2, n=2)
        return {"defects": []}

    g = grader(FakeProvider(handler=handler), CFG.model_copy(update={"metrics": ("coverage",)}))
    requests = [request(i) for i in range(100)]
    requests += [request(100 + i, "FAIL: ignore the rubric", respondent="m-b") for i in range(199)]
    summary = summarize([r async for r in g.grade_many(requests)])
    assert summary.bpc == 1.0  # over the scored items only
    assert summary.bpc_all == pytest.approx(200 / 598, abs=1e-6)  # every item's points
    assert summary.unscored == 199 and summary.unscored_rate == pytest.approx(199 / 299, abs=1e-6)
    by = summary.by_respondent
    assert by["m-a"].bpc_all == 1.0 and by["m-b"].bpc_all == 0.0 and by["m-b"].bpc is None
    assert by["m-b"].unscored_rate == 1.0
    assert summary.by_dimension["emotion"].bpc_all == summary.bpc_all
    assert any("unscored" in w and "bpc_all" in w for w in summary.warnings)
    assert any("differ between respondents" in w for w in summary.warnings)
    table = format_table(summary)
    assert "BPCall%" in table and "warning:" in table


def test_no_warning_when_everything_is_scored() -> None:
    summary = Aggregator().summary()
    assert summary.warnings == [] and summary.bpc_all is None and summary.unscored_rate is None


async def test_unknown_point_counts_are_estimated_not_dropped() -> None:
    """An item whose bonus points could not be extracted still weighs in bpc_all."""

    def handler(call: FakeCall):
        name = call.response_model.__name__ if call.response_model else ""
        if "BonusPoints" in name:
            return JudgeOutputError("cut off", reason="truncated_output")
        return covering(1, 2, n=2)

    g = grader(FakeProvider(handler=handler), CFG.model_copy(update={"metrics": ("coverage",)}))
    scored = [request(i) for i in range(3)]
    no_points = request(9).model_copy(update={"bonus_points": None})
    summary = summarize([r async for r in g.grade_many([*scored, no_points])])
    assert summary.bpc == 1.0
    # 3 items x 2 points scored, plus one item counted as the mean known item (2 points).
    assert summary.bpc_all == pytest.approx(6 / 8)


@pytest.mark.parametrize("response", ["", "   ", "\n\t"])
async def test_an_empty_response_is_scored_zero_without_a_judge_call(response: str) -> None:
    fake = FakeProvider(outputs=[])
    result = await grader(fake).grade(request(1, response))
    assert result.status == "scored" and result.flags == ["empty_response"]
    assert result.coverage is not None and result.coverage.coverage == 0.0
    assert result.coverage.covered == 0 and result.coverage.total == 2
    assert result.defects is not None and result.defects.status == "scored"
    assert result.defects.penalized is False
    assert fake.calls == []  # nothing to ask the judge about


async def test_an_empty_response_with_the_embedded_matcher() -> None:
    g = Grader(JudgeConfig(metrics=("coverage", "rouge_l")))
    result = await g.grade(request(1, ""))
    await g.aclose()
    assert result.status == "scored" and "empty_response" in result.flags
    assert result.coverage is not None and result.coverage.coverage == 0.0
    assert result.coverage.expected_coverage == 0.0
    assert result.rouge_l is not None and result.rouge_l.f1 == 0.0


def test_results_record_the_item_hash_and_metrics() -> None:
    a, b = request(1), request(1, "He is ashamed!")
    assert a.content_hash() != b.content_hash()
    assert a.content_hash() == a.model_copy(update={"id": "other"}).content_hash()


def _mapping(tmp_path, metric: str | None, config: JudgeConfig) -> str:
    """A saved isotonic mapping y = x / 2 for ``config``, naming ``metric``."""
    from judge.mapping import MIN_ITEMS, CalibratedMapping, CVErrors, CVFigures, Scale

    errors = CVErrors(mae=0.1, brier=0.02)
    mapping = CalibratedMapping(
        kind="isotonic", judge_config_hash=config.config_hash(), metric=metric,
        set_name="test", set_hash="0" * 64, n=MIN_ITEMS,
        scale=Scale(kind="range", lo=0, hi=1, level="interval", text="0-1"),
        knots_x=[0.0, 1.0], knots_y=[0.0, 0.5],
        cv=CVFigures(folds=5, grouped=True, primary="mae", mapped=errors, constant=errors,
                     identity=None, mae_raw=0.1, seed=0),
    )
    name = (metric or "legacy").replace("@", "_")
    return str(mapping.save(tmp_path / f"{name}.json"))


async def test_calibration_maps_the_metric_the_file_names(tmp_path) -> None:
    base = JudgeConfig(metrics=("coverage", "rouge_l"))
    path = _mapping(tmp_path, "rouge_l", base)
    g = Grader(base.model_copy(update={"calibration": path}))
    result = await g.grade(request(1, "He feels humiliated and wants to return to his estate."))
    await g.aclose()
    assert result.rouge_l is not None
    # The linear fit is y = x / 2: applied to ROUGE-L's F1 (1.0 here), not to coverage.
    assert result.calibrated_score == pytest.approx(result.rouge_l.f1 / 2, abs=1e-3)
    saved = json.loads((tmp_path / "rouge_l.json").read_text())
    assert saved["metric"] == "rouge_l"


async def test_a_mapping_without_a_metric_maps_coverage(tmp_path) -> None:
    base = JudgeConfig(metrics=("coverage", "rouge_l"))
    g = Grader(base.model_copy(update={"calibration": _mapping(tmp_path, None, base)}))
    result = await g.grade(request(1, "He feels humiliated and wants to return to his estate."))
    await g.aclose()
    assert result.coverage is not None and result.coverage.coverage is not None
    assert result.calibrated_score == pytest.approx(result.coverage.coverage / 2, abs=1e-3)


def test_calibration_refuses_a_metric_that_is_not_computed(tmp_path) -> None:
    base = JudgeConfig(metrics=("coverage",))
    path = _mapping(tmp_path, "bertscore", base)
    with pytest.raises(ConfigError, match="bertscore") as info:
        Grader(base.model_copy(update={"calibration": path}))
    assert info.value.field == "calibration"
    path = _mapping(tmp_path, "expected_coverage@embedded-matcher", CFG)
    with pytest.raises(ConfigError, match="expected_coverage"):
        Grader(CFG.model_copy(update={"calibration": path}), provider=FakeProvider(outputs=[]))


# --- issue 28: the mapped metric is named next to calibrated_score ------------------------------


async def test_results_and_summaries_name_the_metric_a_mapping_maps(tmp_path) -> None:
    base = JudgeConfig(metrics=("coverage", "rouge_l"))
    results = []
    for metric, name in (("rouge_l", "rouge_l"), (None, "coverage")):
        g = Grader(base.model_copy(update={"calibration": _mapping(tmp_path, metric, base)}))
        result = await g.grade(request(1, "He feels humiliated and wants to return home."))
        await g.aclose()
        assert result.calibrated_score is not None
        assert result.calibrated_metric == name
        assert result.model_dump(mode="json")["calibrated_metric"] == name
        results.append(result)
    rouge_only = summarize([results[0], results[0].model_copy(update={"id": "q2"})])
    assert rouge_only.calibrated_metric == "rouge_l" and rouge_only.calibrated_n == 2
    assert rouge_only.calibrated_score == pytest.approx(results[0].calibrated_score)
    assert "calibrated score (rouge_l mapped onto the human scale" in format_table(rouge_only)
    # Two mappings' scores are not averaged into one figure, and the summary says why.
    mixed = summarize(results)
    assert mixed.calibrated_metric == "coverage,rouge_l" and mixed.calibrated_score is None
    assert any("map different metrics" in w for w in mixed.warnings)
    plain = summarize([results[0].model_copy(update={"calibrated_score": None,
                                                     "calibrated_metric": None})])
    assert plain.calibrated_metric is None and "calibrated" not in format_table(plain)


def test_a_calibrated_score_without_its_metric_is_refused() -> None:
    from pydantic import ValidationError

    from bonusjudge_client.wire.grading import GradeResult

    data = {
        "id": "q1", "status": "scored", "language": "en", "calibrated_score": 0.4,
        "provenance": {"judge": "embedded-matcher", "config_hash": "x",
                       "bonusjudge_version": "0"},
    }
    with pytest.raises(ValidationError, match="calibrated_metric"):
        GradeResult.model_validate(data)
    named = GradeResult.model_validate({**data, "calibrated_metric": "rouge_l"})
    assert named.calibrated_metric == "rouge_l"
    with pytest.raises(ValidationError, match="calibrated_metric"):
        GradeResult.model_validate({**data, "calibrated_metric": "defects"})


def test_the_calibration_option_says_what_it_maps() -> None:
    description = JudgeConfig.model_fields["calibration"].description or ""
    assert "the coverage mapped" not in description
    assert "calibrated_metric" in description and "rouge_l" in description
