"""An input with no item (issue 40.3): an empty file, or one whose every line is invalid, is a
mistake named on stderr with exit 2, for ``grade`` (and ``--estimate``), ``mcq`` and
``calibrate``; no output is created and no judge is asked.

Every case runs the CLI as users do: a fresh interpreter (subprocess), a fresh cache folder.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import run_cli

# Every test here starts a process (the CLI, a stand-in server): not in the fast loop.
pytestmark = pytest.mark.process

INPUTS = {
    "empty": ("", "(the file is empty)"),
    "blank lines": ("\n   \n\n", "(the file is empty)"),
    "all invalid": ('{"question": "Why?"}\nnot json\n', "(all 2 line(s) are invalid)"),
}


def no_item(done: subprocess.CompletedProcess[str], path: Path, why: str, command: str) -> None:
    """Exit 2, nothing on stdout, and the last stderr line naming the file and the reason."""
    assert done.returncode == 2, (done.returncode, done.stdout[-1000:], done.stderr[-2000:])
    assert done.stdout == "", done.stdout[-1000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"bonusjudge{command}: error: input: no item in {path} {why}", last


@pytest.mark.parametrize("kind", INPUTS)
def test_grade_refuses_an_input_without_items(tmp_path: Path, kind: str) -> None:
    text, why = INPUTS[kind]
    items = tmp_path / "items.jsonl"
    items.write_text(text)
    out = tmp_path / "out" / "results.jsonl"
    with OpenAIStandIn() as srv:
        judge = ["--model", "openai/standin", "--api-base", srv.base_url]
        done = run_cli(["grade", str(items), "--out", str(out), "--summary",
                        str(tmp_path / "s.json"), *judge, "--cache-dir",
                        str(tmp_path / "cache"), "--quiet"])
        no_item(done, items, why, "")
        estimate = run_cli(["grade", str(items), "--estimate", *judge, "--cache-dir",
                            str(tmp_path / "cache")])
        no_item(estimate, items, why, "")
        assert srv.stats().requests == 0  # not even the preflight's one-token call
    # The embedded judge too (it printed a table of dashes and "judge None", exit 0).
    embedded = run_cli(["grade", str(items), "--out", str(out), "--metrics", "rouge_l",
                        "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    no_item(embedded, items, why, "")
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.json").exists()
    if kind == "all invalid":  # each invalid line is reported, as in a run that grades
        assert f"{items}: line 1 (field answer)" in done.stderr
        assert f"{items}: line 2" in done.stderr


@pytest.mark.parametrize("kind", INPUTS)
def test_mcq_refuses_an_input_without_items(tmp_path: Path, kind: str) -> None:
    text, why = INPUTS[kind]
    items = tmp_path / "run.jsonl"
    items.write_text(text)
    out, summary = tmp_path / "m.jsonl", tmp_path / "m.summary.json"
    done = run_cli(["mcq", str(items), "--out", str(out), "--summary", str(summary),
                    "--cache-dir", str(tmp_path / "cache")])
    no_item(done, items, why, " mcq")
    assert not out.exists() and not summary.exists()
    if kind == "all invalid":
        assert f"{items}:1: skipped: " in done.stderr and f"{items}:2: skipped: " in done.stderr


def test_calibrate_refuses_an_empty_set(tmp_path: Path) -> None:
    """calibrate had no such fault: its set loader refuses a set without items (a guard)."""
    empty = tmp_path / "set.jsonl"
    empty.write_text("")
    done = run_cli(["calibrate", str(empty), "--metrics", "rouge_l", "--out",
                    str(tmp_path / "report"), "--cache-dir", str(tmp_path / "cache")])
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"no line of {empty} loaded (0 bad: the file is empty)" in done.stderr
    assert not (tmp_path / "report").exists()
