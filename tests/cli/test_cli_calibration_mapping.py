"""``grade --calibration`` through the CLI (issue 40): a refused mapping leaves every output as it
was, and a ROUGE-L or BERTScore mapping belongs to its metric's settings, not to a judge.

Every case runs the CLI as users do: a fresh interpreter (subprocess), a fresh cache folder.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from judge.mapping import MIN_ITEMS, CalibratedMapping, CVErrors, CVFigures, Scale
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import run_cli

# Every test here starts a process (the CLI, a stand-in server): not in the fast loop.
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"
CALIBRATION_EXAMPLE = ROOT / "calibration" / "data" / "example.jsonl"


def foreign_mapping(path: Path) -> Path:
    """A coverage mapping fitted for a judge configuration no run has (hash ``0000...``)."""
    errors = CVErrors(mae=0.1, brier=0.02)
    mapping = CalibratedMapping(
        kind="isotonic", judge_config_hash="0" * 16, metric="coverage", set_name="test",
        set_hash="0" * 64, n=MIN_ITEMS,
        scale=Scale(kind="range", lo=0, hi=1, level="interval", text="0-1"),
        knots_x=[0.0, 1.0], knots_y=[0.0, 0.5],
        cv=CVFigures(folds=5, grouped=True, primary="mae", mapped=errors, constant=errors,
                     identity=None, mae_raw=0.1, seed=0),
    )
    return mapping.save(path)


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """Exit 2 and the one error line, which names the calibration option."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("bonusjudge: error: calibration: "), lines
    return lines[0]


# -- a refused mapping creates and touches nothing -----------------------------------------------


def test_a_refused_mapping_creates_no_output(tmp_path: Path) -> None:
    out, summary = tmp_path / "g" / "out.jsonl", tmp_path / "g" / "summary.json"
    done = run_cli([
        "grade", str(EXAMPLES), "--out", str(out), "--summary", str(summary), "--metrics",
        "coverage", "--calibration", str(foreign_mapping(tmp_path / "m.json")),
        "--cache-dir", str(tmp_path / "cache"), "--quiet",
    ])
    assert "fitted for judge configuration 0000000000000000" in refused(done)
    assert not out.exists() and not summary.exists()
    assert not out.parent.exists()


def test_a_refused_mapping_leaves_the_output_being_resumed_untouched(tmp_path: Path) -> None:
    cache = ["--cache-dir", str(tmp_path / "cache"), "--quiet"]
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    first = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--summary", str(summary),
                     "--metrics", "coverage", "--limit", "3", *cache])
    assert first.returncode == 0, first.stderr[-2000:]
    # A torn last line too: opening the file to resume would drop it.
    torn = out.read_bytes() + b'{"id": "half'
    out.write_bytes(torn)
    before = {path: (path.read_bytes(), os.stat(path).st_mtime_ns) for path in (out, summary)}
    done = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--summary", str(summary),
                    "--metrics", "coverage", "--calibration",
                    str(foreign_mapping(tmp_path / "m.json")), *cache])
    refused(done)
    assert {path: (path.read_bytes(), os.stat(path).st_mtime_ns) for path in before} == before


# -- ROUGE-L and BERTScore mappings belong to their metric, not to a judge -----------------------


def test_metric_mappings_apply_with_any_judge_and_a_coverage_mapping_keeps_its_judge(
    tmp_path: Path,
) -> None:
    cache = ["--cache-dir", str(tmp_path / "cache")]
    report = tmp_path / "cal"
    fitted = run_cli(["calibrate", str(CALIBRATION_EXAMPLE), "--metrics",
                      "rouge_l,bertscore,coverage", "--out", str(report), "--resamples", "50",
                      "--quiet", *cache])
    assert fitted.returncode == 0, fitted.stderr[-2000:]
    mappings = report / "mappings"
    rouge, bert = mappings / "rouge_l.json", mappings / "bertscore.json"
    coverage = mappings / "coverage_embedded-matcher.json"
    # The embedded judge on coverage too: the metrics pass's configuration hash differs.
    out = tmp_path / "matcher.jsonl"
    graded = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--metrics", "coverage,rouge_l",
                      "--calibration", str(rouge), "--quiet", *cache])
    assert graded.returncode == 0, graded.stderr[-2000:]
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == 10
    assert all(r["calibrated_metric"] == "rouge_l" and r["calibrated_score"] is not None
               for r in results)
    assert json.loads(rouge.read_text())["metric_config"]["tokenizer"] == "bonusjudge-cjk-char-v1"

    with OpenAIStandIn() as srv:
        llm = ["--model", "openai/standin", "--api-base", srv.base_url]
        out = tmp_path / "llm.jsonl"
        graded = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--metrics",
                          "coverage,defects,bertscore", "--calibration", str(bert), "--quiet",
                          *llm, *cache])
        assert graded.returncode == 0, graded.stderr[-2000:]
        results = [json.loads(line) for line in out.read_text().splitlines()]
        english = [r for r in results if r["language"] == "en"]
        assert english and all(r["calibrated_metric"] == "bertscore" for r in results)
        assert all(r["calibrated_score"] is not None for r in english)

        # Coverage is the judge's: its mapping is refused for another judge.
        line = refused(run_cli(["grade", str(EXAMPLES), "--out", str(tmp_path / "cov.jsonl"),
                                "--metrics", "coverage", "--calibration", str(coverage),
                                "--quiet", *llm, *cache]))
        assert "fitted for judge configuration" in line and "refit" in line
        assert not (tmp_path / "cov.jsonl").exists()
