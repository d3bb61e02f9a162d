"""``grade --calibration`` through the CLI (issue 40): a refused mapping leaves every output as it
was, and a ROUGE-L or BERTScore mapping belongs to its metric's settings, not to a judge.

Every case runs the CLI as users do: a fresh interpreter (subprocess), a fresh cache folder.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from judge.mapping import MIN_ITEMS, CalibratedMapping, CVErrors, CVFigures, Scale
from standins.processes import run_cli

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
