"""``--fail-on-bad-lines`` (issue 40.4): ``grade`` takes it as ``mcq`` does, one option defined
once, with the same meaning: invalid lines are still reported and skipped and the valid ones
graded and written, and the exit status is 1 when any line was skipped."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cli.main import build_parser
from tests.helpers.processes import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"


def option(command: str, flag: str) -> argparse.Action:
    """The action of ``flag`` in ``command``'s parser."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command_parser: argparse.ArgumentParser = sub.choices[command]
    return next(a for a in command_parser._actions if flag in a.option_strings)


def test_grade_and_mcq_take_the_same_fail_on_bad_lines() -> None:
    grade, mcq = option("grade", "--fail-on-bad-lines"), option("mcq", "--fail-on-bad-lines")
    assert (grade.dest, grade.help, grade.default, grade.nargs) == (
        mcq.dest, mcq.help, mcq.default, mcq.nargs
    )
    assert grade.help == "exit with status 1 when any input line was skipped"


@pytest.mark.process
def test_grade_exits_1_on_skipped_lines_with_fail_on_bad_lines(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(EXAMPLES.read_text() + '{"question": "Why?"}\n')
    cache = ["--metrics", "rouge_l", "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    for flag, code in ((["--fail-on-bad-lines"], 1), ([], 0)):
        out, summary = tmp_path / f"out{code}.jsonl", tmp_path / f"summary{code}.json"
        done = run_cli(["grade", str(items), "--out", str(out), "--summary", str(summary),
                        *flag, *cache])
        assert done.returncode == code, (flag, done.returncode, done.stderr[-2000:])
        assert f"{items}: line 11 (field answer)" in done.stderr
        # Written all the same: the valid lines' results and the summary with the bad line.
        assert len(out.read_text().splitlines()) == 10
        assert len(json.loads(summary.read_text())["invalid_lines"]) == 1
    estimate = run_cli(["grade", str(items), "--estimate", "--fail-on-bad-lines", *cache])
    assert estimate.returncode == 1, estimate.stderr[-2000:]
    clean = run_cli(["grade", str(EXAMPLES), "--out", str(tmp_path / "clean.jsonl"),
                     "--fail-on-bad-lines", *cache])
    assert clean.returncode == 0, clean.stderr[-2000:]
