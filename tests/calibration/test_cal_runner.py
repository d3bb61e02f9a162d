"""The calibration runner end to end, and applying its calibrated mapping when grading."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bonusjudge_client.wire.grading import GradeRequest
from calibration.runner import run_calibration
from calibration.sets import load_example_set
from core.errors import ConfigError
from judge.cache import JudgeCache
from judge.config import JudgeConfig, Settings
from judge.engine import Grader


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("cal")
    settings = Settings(cache_dir=folder / "cache")
    dataset = load_example_set()
    return (
        run_calibration(
            dataset,
            settings=settings,
            judges=["embedded-matcher"],
            metrics=["rouge_l", "coverage"],
            out_dir=folder / "report",
            n_resamples=100,
        ),
        folder,
        settings,
    )


def test_report_is_complete_and_resumable(run, request: pytest.FixtureRequest):
    result, folder, settings = run
    data = json.loads(result.files.json.read_text())
    text = json.dumps(data)
    assert "rouge_l" in text and "coverage@embedded-matcher" in text
    assert result.files.markdown.read_text().count("|") > 10
    assert result.files.plots and all(p.exists() for p in result.files.plots)
    grades = sorted((folder / "report").glob("grades-*.jsonl"))
    assert len(grades) == 2
    n_lines = [len(p.read_text().splitlines()) for p in grades]
    # Re-running resumes: every item is already in the grade files, nothing is added. (Its
    # report's plots are not drawn again: the first run's were checked above.)
    request.getfixturevalue("no_plots")
    run_calibration(
        load_example_set(),
        settings=settings,
        judges=["embedded-matcher"],
        metrics=["rouge_l", "coverage"],
        out_dir=folder / "report",
        n_resamples=100,
    )
    assert [len(p.read_text().splitlines()) for p in grades] == n_lines


def test_calibrated_score_applied_for_the_matching_configuration(run):
    result, _, _ = run
    mapping = next(p for p in result.files.mappings if "coverage" in p.name)
    config = JudgeConfig(metrics=("coverage",), calibration=str(mapping))
    grader = Grader(config, cache=JudgeCache(None))
    request = GradeRequest(
        question="Why did she leave?",
        reference="She was afraid of him.",
        response="Because she feared him.",
    )
    graded = asyncio.run(grader.grade(request))
    assert graded.coverage is not None and graded.coverage.coverage is not None
    assert graded.calibrated_score is not None and 0.0 <= graded.calibrated_score <= 1.0
    with pytest.raises(ConfigError, match="calibration"):
        Grader(config.model_copy(update={"temperature": 0.7}), cache=JudgeCache(None))


def test_mapping_file_names_its_configuration(run):
    result, _, _ = run
    mapping = next(p for p in result.files.mappings if "coverage" in p.name)
    assert JudgeConfig(metrics=("coverage",)).config_hash() in Path(mapping).read_text()


def test_matcher_graded_score_is_reported_next_to_its_coverage(run):
    # The embedded matcher's expected coverage (mean point probability) gets its own column,
    # joined on item id, equal to what the grade file holds for each item.
    result, folder, _ = run
    metrics = json.loads(result.files.json.read_text())["metrics"]
    expected = metrics["expected_coverage@embedded-matcher"]["agreement"]
    assert expected["n"] == metrics["coverage@embedded-matcher"]["agreement"]["n"] > 0
    grades = next((folder / "report").glob("grades-*-coverage.jsonl"))
    values = []
    for line in grades.read_text().splitlines():
        coverage = json.loads(line)["coverage"]
        confidences = [v["confidence"] for v in coverage["verdicts"]]
        assert coverage["expected_coverage"] == pytest.approx(
            sum(confidences) / len(confidences), abs=1e-3
        )
        values.append(coverage["expected_coverage"])
    assert expected["mean_judge"] == pytest.approx(sum(values) / len(values), abs=1e-6)


def test_long_reference_lists_keep_the_first_and_the_closest_to_the_candidate():
    from calibration.runner import MAX_REFERENCES, item_request
    aliases = ["Eric Blair", *[f"alias number {i}" for i in range(40)], "George Orwell"]
    item = load_example_set().items[0].model_copy(
        update={
            "reference": aliases[0],
            "references": aliases,
            "candidate": "George Orwell wrote it.",
            "bonus_points": None,
            "key_point": None,
        }
    )
    request = item_request(item)
    assert request.reference == "Eric Blair"
    assert request.references is not None and len(request.references) == MAX_REFERENCES
    assert request.references[0] == "Eric Blair" and "George Orwell" in request.references


def test_progress_bars_go_to_stderr_labelled_per_pass(
    run, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_plots: None
):
    # One bar per grading pass and per retest pass, named by its configuration; the report on
    # stdout stays free of them, and --quiet turns them off.
    from calibration.sets import example_set_path
    from cli.main import main

    _, folder, _ = run
    argv = [
        "calibrate",
        str(example_set_path("example")),
        "--judge",
        "embedded-matcher",
        "--metrics",
        "rouge_l,coverage",
        "--limit",
        "4",
        "--resamples",
        "50",
        "--cache-dir",
        str(folder / "cache"),
        "--out",
        str(tmp_path / "report"),
    ]
    assert main([*argv, "--retest"]) == 0
    out, err = capsys.readouterr()
    for label in ("metrics", "embedded-matcher", "embedded-matcher (retest)"):
        assert f"{label}: 100%" in err
    assert err.count("4/4") >= 3
    assert "report:" in out and "4/4" not in out and "\r" not in out
    assert main([*argv, "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "report:" in out and "4/4" not in err and "100%" not in err
