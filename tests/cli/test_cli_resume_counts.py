"""A resumed run's closing line (issue 40.6): the items it graded and those it read from the
output apart, since the summary counts both."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.processes import run_cli

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"


def closing_line(stdout: str) -> str:
    """The line that counts what was graded."""
    return next(line for line in stdout.splitlines() if " graded" in line and "judge" in line)


def test_a_resumed_run_says_what_it_graded_and_what_it_read(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    options = ["--out", str(out), "--metrics", "rouge_l", "--cache-dir", str(tmp_path / "cache"),
               "--quiet"]
    first = run_cli(["grade", str(EXAMPLES), "--limit", "4", *options])
    assert first.returncode == 0, first.stderr[-2000:]
    assert closing_line(first.stdout).startswith("4 graded (0 unscored), 0 invalid line(s)")
    again = run_cli(["grade", str(EXAMPLES), *options])
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming: 4 item(s) already graded in {out}" in again.stderr
    assert closing_line(again.stdout).startswith(
        f"10 graded: 6 now, 4 from {out} (0 unscored), 0 invalid line(s)"
    )
    done = run_cli(["grade", str(EXAMPLES), *options])
    assert closing_line(done.stdout).startswith(f"10 graded: 0 now, 10 from {out} (0 unscored)")
