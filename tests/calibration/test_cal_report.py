import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from calibration.report import (
    CalibrationReport,
    ReportFiles,
    build_report,
    config_hash,
    render_markdown,
    write_report,
)
from calibration.sets import CalibrationItem, LoadedSet, load_example_set
from core.errors import ConfigError, InputError

CONFIGS: dict[str, dict[str, Any]] = {
    "coverage": {"model": "openai/gpt-4o", "temperature": 0.2, "api_key": "sk-secret"},
    "rouge_l": {"metric": "rouge_l", "segmenter": "char"},
}


def _scores(items: Sequence[CalibrationItem], seed: int, noise: float) -> dict[str, float | None]:
    rng = np.random.default_rng(seed)
    return {i.id: float(np.clip(i.human_norm + rng.normal(0, noise), 0, 1)) for i in items}


def _inputs(name: str = "example") -> tuple[LoadedSet, dict[str, Any]]:
    dataset = load_example_set(name)
    coverage: dict[str, Any] = _scores(dataset.items, 0, 0.15)
    rouge = _scores(dataset.items, 1, 0.35)
    first = dataset.items[0].id
    rouge[first] = None
    kwargs: dict[str, Any] = {
        "configs": CONFIGS,
        "scores": {"coverage": coverage, "rouge_l": rouge},
        "unscored": {"rouge_l": {first: "parse_failure"}},
        "retest": {"coverage": _scores(dataset.items, 0, 0.15)},
        "n_resamples": 200,
        "n_folds": 3,
    }
    if name == "example_keypoints":
        kwargs["point_verdicts"] = {
            "coverage": {i.id: coverage[i.id] >= 0.5 for i in dataset.items}
        }
        kwargs["defects"] = {"coverage": {i.id: i.is_contradicted for i in dataset.items}}
    return dataset, kwargs


Written = tuple[LoadedSet, dict[str, Any], CalibrationReport, ReportFiles, Path]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    dataset, kwargs = _inputs()
    report = build_report(dataset, seed=11, **kwargs)
    out = tmp_path_factory.mktemp("report")
    return dataset, kwargs, report, write_report(report, out), out


def test_files_exist(written: Written) -> None:
    _, _, _, files, out = written
    assert files.json == out / "report.json" and files.json.is_file()
    assert files.markdown == out / "report.md" and files.markdown.is_file()
    names = sorted(p.name for p in files.plots)
    assert names == [
        "reliability_coverage.png",
        "reliability_rouge_l.png",
        "scatter_coverage.png",
        "scatter_rouge_l.png",
    ]
    for png in files.plots:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in files.mappings) == ["coverage.json", "rouge_l.json"]


def test_json_has_every_section(written: Written) -> None:
    dataset, kwargs, _, files, _ = written
    data = json.loads(files.json.read_text())
    assert set(data) == {
        "format_version",
        "set",
        "options",
        "configs",
        "metrics",
        "human_ceiling",
        "judge_vs_judge",
        "test_retest",
        "table7",
        "plots",
    }
    assert data["set"]["hash"] == dataset.sha256
    assert data["set"]["n_items"] == 16
    assert data["options"]["seed"] == 11
    assert data["options"]["group_fields"] == ["dimension", "system"]
    assert data["configs"]["coverage"]["hash"] == config_hash(CONFIGS["coverage"])
    assert data["configs"]["coverage"]["config"]["api_key"] == "***"
    assert "sk-secret" not in files.json.read_text()
    for name in ("coverage", "rouge_l"):
        metric = data["metrics"][name]
        assert metric["config"] == name
        agreement = metric["agreement"]
        for key in ("n", "n_unscored", "pearson", "spearman", "kendall"):
            assert key in agreement
        assert agreement["pearson"]["ci_low"] <= agreement["pearson"]["value"]
        assert set(metric["by_group"]) == {"dimension", "system"}
        assert metric["mapping"]["judge_config_hash"] == data["configs"][name]["hash"]
        assert metric["mapping"]["file"] == f"mappings/{name}.json"
        assert len(metric["mapping"]["reliability"]) == 10
    rouge = data["metrics"]["rouge_l"]
    assert rouge["agreement"]["n"] == 15
    assert rouge["agreement"]["unscored_reasons"] == {"parse_failure": 1}
    assert rouge["left_out"][0]["reason"] == "parse_failure"
    expected = stats.pearsonr(
        [kwargs["scores"]["coverage"][i.id] for i in dataset.items],
        [i.human_norm for i in dataset.items],
    ).statistic
    assert data["metrics"]["coverage"]["agreement"]["pearson"]["value"] == pytest.approx(expected)
    assert data["human_ceiling"]["level"] == "interval" and data["human_ceiling"]["alpha"] > 0.8
    assert [(p["a"], p["b"]) for p in data["judge_vs_judge"]] == [("coverage", "rouge_l")]
    assert data["test_retest"]["coverage"]["exact_agreement"] == 1.0
    assert set(data["table7"]) == {"sys_a", "sys_b", "All"}
    assert data["plots"]["scatter"]["coverage"] == "scatter_coverage.png"


def test_markdown_table7_layout(written: Written) -> None:
    _, _, _, files, _ = written
    text = files.markdown.read_text()
    assert "| System | n | Human | coverage | rouge_l |" in text
    assert "**Human correlation** (Pearson)" in text
    assert "| Pearson [95% CI] |" in text
    assert "## By system" in text and "## Judge vs judge" in text
    assert "![scatter coverage](scatter_coverage.png)" in text
    assert "unscored: parse_failure (1)" in text
    assert render_markdown(json.loads(files.json.read_text())) == text


def test_deterministic_given_the_seed(tmp_path: Path, written: Written, no_plots: None) -> None:
    # report.json again, byte for byte (plots aside: none of a plot is in it).
    dataset, kwargs, _, files, _ = written
    again = write_report(build_report(dataset, seed=11, **kwargs), tmp_path / "again")
    assert again.json.read_text() == files.json.read_text()
    other = build_report(dataset, seed=12, **kwargs).data
    first = json.loads(files.json.read_text())
    assert (
        other["metrics"]["coverage"]["agreement"]["pearson"]["ci_low"]
        != first["metrics"]["coverage"]["agreement"]["pearson"]["ci_low"]
    )


def test_binary_and_keypoint_sections(tmp_path: Path) -> None:
    dataset, kwargs = _inputs("example_keypoints")
    data = build_report(dataset, **kwargs).data
    agreement = data["metrics"]["coverage"]["agreement"]
    assert agreement["binary"]["auroc"]["value"] is not None
    assert agreement["binary"]["cv"]["folds"][0]["threshold"] is not None
    assert agreement["keypoints"]["contradicted_defect_rate"] == 1.0
    assert data["metrics"]["coverage"]["mapping"]["kind"] == "logistic"
    assert data["human_ceiling"]["level"] == "nominal"
    text = render_markdown(data)
    assert "AUROC [95% CI]" in text and "Contradicted points -> defect rate" in text


def test_bad_inputs_name_the_metric() -> None:
    dataset, kwargs = _inputs()
    kwargs["scores"] = {**kwargs["scores"], "broken": {"not-in-set": 0.5}}
    with pytest.raises(InputError, match="metric 'broken'") as info:
        build_report(dataset, **kwargs)
    assert info.value.field == "scores.broken"
    dataset, kwargs = _inputs()
    with pytest.raises(ConfigError, match="unknown configuration"):
        build_report(dataset, metric_configs={"coverage": "nope"}, **kwargs)
    with pytest.raises(InputError, match="set_name"):
        build_report(dataset.items, **kwargs)
    with pytest.raises(InputError, match="retest"):
        build_report(dataset, **{**kwargs, "retest": {"nope": {}}})


def test_metric_without_a_configuration_gets_no_mapping() -> None:
    dataset, kwargs = _inputs()
    kwargs["configs"] = {"a": {"x": 1}, "b": {"x": 2}}
    data = build_report(dataset, **kwargs).data
    assert data["metrics"]["coverage"]["config"] is None
    assert "no judge configuration" in data["metrics"]["coverage"]["mapping"]["note"]


def test_degenerate_metrics_do_not_crash(tmp_path: Path) -> None:
    dataset = load_example_set("example_binary")
    ids = [i.id for i in dataset.items]
    report = build_report(
        dataset,
        configs={"constant": {"m": 1}, "empty": {"m": 2}},
        scores={"constant": dict.fromkeys(ids, 0.5), "empty": dict.fromkeys(ids)},
        unscored={"empty": dict.fromkeys(ids, "provider_error")},
        n_resamples=50,
        n_folds=3,
    )
    files = write_report(report, tmp_path)
    data = json.loads(files.json.read_text())
    constant = data["metrics"]["constant"]["agreement"]
    assert constant["pearson"]["value"] is None and "constant" in constant["pearson"]["note"]
    assert constant["binary"]["auroc"]["value"] == 0.5
    empty = data["metrics"]["empty"]
    assert empty["agreement"]["n"] == 0
    assert empty["agreement"]["unscored_reasons"] == {"provider_error": 16}
    assert "no mapping" in empty["mapping"]["note"]
    assert data["judge_vs_judge"][0]["n"] == 0
    assert "provider_error (16)" in files.markdown.read_text()


# --- issue 28: the human ceiling from meta, titles that fit ------------------------------------


def test_the_human_ceiling_reads_ratings_kept_in_meta(tmp_path: Path) -> None:
    from calibration.sets import load_set

    rng = np.random.default_rng(3)
    lines = []
    for n in range(40):
        ratings = [int(v) for v in rng.integers(0, 2, size=2)]
        lines.append(json.dumps({
            "id": f"nq-{n}", "source": "nq301", "question": f"Question {n}?",
            "reference": "Paris", "candidate": f"Answer {n}", "human_score": ratings[0],
            "score_scale": "binary: 1=correct, 0=incorrect",
            # Agreement on every item but a few: alpha is high, and defined.
            "meta": {"annotators": [ratings[0], ratings[0] if n % 8 else 1 - ratings[0]]},
        }))
    path = tmp_path / "nq301.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dataset = load_set(path)
    scores = {i.id: i.human_norm for i in dataset.items}
    report = build_report(dataset, configs={"coverage": {"m": 1}},
                          scores={"coverage": scores}, n_resamples=50, n_folds=3)
    ceiling = report.data["human_ceiling"]
    assert ceiling["alpha"] is not None and ceiling["alpha"] > 0.5
    assert ceiling["n_items"] == 40 and ceiling["from"] == "meta.annotators"
    assert "ratings from meta.annotators" in render_markdown(report.data)


LONG_METRIC = "coverage@openai/gpt-4o-2024-08-06-through-a-long-deployment-name-of-our-proxy"


@pytest.mark.parametrize("metric", [LONG_METRIC, "bertscore_f1_microsoft_deberta-xlarge-mnli_l40"])
def test_every_plot_title_fits_its_figure(tmp_path: Path, metric: str) -> None:
    from calibration.report import _reliability_png, _scatter_png

    dataset = load_example_set()
    report = build_report(
        dataset,
        configs={metric: CONFIGS["coverage"]},
        scores={metric: _scores(dataset.items, 0, 0.15)},
        n_resamples=50,
        n_folds=3,
    )
    figures = [
        _scatter_png(tmp_path / "s.png", metric, report, np.random.default_rng(0)),
        _reliability_png(tmp_path / "r.png", metric, report),
    ]
    for figure in figures:
        figure.draw_without_rendering()  # lays the texts out, as a draw would, for their boxes
        frame = figure.bbox
        (axes,) = figure.axes
        title = axes.title
        for text in (title, axes.xaxis.label, axes.yaxis.label):
            box = text.get_window_extent()
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (text.get_text(), box, frame)
            assert frame.y0 <= box.y0 and box.y1 <= frame.y1, (text.get_text(), box, frame)
        # Nothing of the title is dropped: wrapping only breaks lines.
        squeezed = "".join(title.get_text().split())
        assert squeezed.startswith(metric + ":") and squeezed.endswith(")")
    scatter_title = "".join(figures[0].axes[0].title.get_text().split())
    assert scatter_title.endswith("(n=16,unscored=0)")


# --- issue 42: render_markdown's output, pinned byte for byte ----------------------------------


def _estimate(
    value: float | None, low: float | None = None, high: float | None = None, note: str = ""
) -> dict[str, Any]:
    out: dict[str, Any] = {"value": value, "ci_low": low, "ci_high": high}
    if note:
        out["note"] = note
    return out


# Every row and section render_markdown can write: a 0-1 metric with binary, key-point and
# mapping rows, a raw-scale metric with no configuration, notes, a missing group value, pairs,
# test-retest, plots. Only the fields render_markdown reads.
GOLDEN_DATA: dict[str, Any] = {
    "set": {
        "name": "golden", "hash": "0123456789abcdef" * 4, "n_items": 6, "n_problems": 2,
        "scale": {"kind": "likert", "lo": 1.0, "hi": 5.0, "text": "1=wrong, 5=right"},
    },
    "options": {
        "seed": 7, "n_resamples": 200, "n_folds": 3, "group_by_question": True,
        "group_fields": ["system"],
    },
    "configs": {
        "coverage": {"hash": "aaaa1111bbbb2222", "config": {"model": "m", "api_key": "***"}},
        "raw": {"hash": "cccc3333dddd4444", "config": {"metric": "raw"}},
    },
    "metrics": {
        "coverage": {
            "config": "coverage", "config_hash": "aaaa1111bbbb2222", "judge_version": "v2",
            "agreement": {
                "n": 6, "n_unscored": 0, "n_missing": 0,
                "pearson": _estimate(0.81234, 0.5, 0.95),
                "spearman": _estimate(0.7),
                "kendall": _estimate(None, note="too few pairs"),
                "unscored_reasons": {},
                "binary": {
                    "auroc": _estimate(0.9, 0.75, 1.0),
                    "cv": {"accuracy": 0.8333, "f1": 0.8, "kappa": None,
                           "threshold_all_data": 0.55, "note": "3 folds only"},
                },
                "keypoints": {
                    "accuracy": 0.75, "kappa": 0.5, "contradicted_judged_covered": 0.0,
                    "contradicted_defect_rate": 1.0, "other_defect_rate": 0.25,
                },
            },
            "by_group": {"system": {
                "sys_a": {"pearson": _estimate(0.9, 0.8, 1.0), "n": 3,
                          "binary": {"auroc": {"value": 1.0}}},
                "sys_b": {"pearson": _estimate(0.6), "n": 3, "binary": None},
            }},
            "mapping": {"cv": {"primary": "brier", "mapped": {"brier": 0.12},
                               "constant": {"brier": 0.25}, "identity": {"brier": 0.2}}},
        },
        "raw": {
            "config": None, "config_hash": None, "judge_version": None,
            "agreement": {
                "n": 5, "n_unscored": 1, "n_missing": 0,
                "pearson": _estimate(-0.25, -0.9, 0.6),
                "spearman": _estimate(None, note="constant scores"),
                "kendall": _estimate(0.1, 0.0, 0.2),
                "unscored_reasons": {"parse_failure": 1},
                "binary": None, "keypoints": None,
            },
            "by_group": {"system": {"sys_c": {"pearson": _estimate(None), "n": 1}}},
            "mapping": {"note": "no judge configuration linked to this metric: no mapping fitted"},
        },
    },
    "human_ceiling": {"alpha": 0.66, "level": "interval", "n_items": 6, "n_annotators": 3,
                      "from": "meta.annotators"},
    "judge_vs_judge": [{
        "a": "coverage", "b": "raw", "n": 5, "pearson": _estimate(0.3, 0.1, 0.5),
        "spearman": _estimate(None), "kappa": 0.2, "exact_agreement": 0.4, "mean_abs_diff": 1.25,
    }],
    "test_retest": {"coverage": {"n": 6, "pearson": _estimate(0.99, 0.95, 1.0),
                                 "exact_agreement": 1.0, "mean_abs_diff": 0.0}},
    "table7": {
        "sys_a": {"n": 3, "human": 0.75, "coverage": 0.7, "raw": 3.5},
        "sys_b": {"n": 3, "human": 0.5, "coverage": 0.45, "raw": None},
        "All": {"n": 6, "human": 0.625, "coverage": 0.575, "raw": 3.5},
    },
    "plots": {"scatter": {"coverage": "scatter_coverage.png", "raw": "scatter_raw.png"},
              "reliability": {"coverage": "reliability_coverage.png"}},
}  # fmt: skip


def test_markdown_matches_the_golden_file() -> None:
    # data/report_golden.md is what render_markdown wrote for GOLDEN_DATA before it was split
    # into one helper per section: a change to report.md shows here, and is then deliberate.
    golden = Path(__file__).parent / "data" / "report_golden.md"
    assert render_markdown(GOLDEN_DATA) == golden.read_text(encoding="utf-8")


def test_markdown_leaves_out_empty_sections() -> None:
    data = {**GOLDEN_DATA, "judge_vs_judge": [], "test_retest": {}, "plots": {}}
    text = render_markdown(data)
    for heading in ("## Judge vs judge", "## Test-retest", "## Plots"):
        assert heading not in text
    assert text.endswith('| raw | `cccc3333dddd4444` | `{"metric": "raw"}` |\n')
