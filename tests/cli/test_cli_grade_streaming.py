"""`bonusjudge grade` streams its input and output: ids are read first, the requests again as
grading takes them, and results are not kept once written. What users see must not change:
bad lines reported once, ``--limit``, resume (and re-grading what changed), ``--order input``.

ROUGE-L only, so no encoder loads and each run is a fresh interpreter of a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.processes import run_cli

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process


def _item(n: int, response: str | None = None) -> dict[str, Any]:
    return {
        "id": f"it-{n}",
        "question": "Why does Anna leave the ball early?",
        "answer": "She sees Vronsky with Kitty and feels jealous.",
        "bonus_points": ["Anna feels jealous"],
        "tom_dimension": "emotion",
        "response": response or f"She is jealous of Kitty ({n}).",
    }


def _write(path: Path, items: list[dict[str, Any] | str]) -> Path:
    path.write_text("".join((i if isinstance(i, str) else json.dumps(i)) + "\n" for i in items))
    return path


def _grade(tmp: Path, source: Path, *extra: str) -> Any:
    done = run_cli([
        "grade", str(source), "--out", str(tmp / "out.jsonl"), "--summary",
        str(tmp / "summary.json"), "--cache-dir", str(tmp / "cache"), "--quiet",
        "--metrics", "rouge_l", "--order", "input", *extra,
    ])
    assert done.returncode == 0, done.stderr
    return done


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def test_limit_resume_regrade_and_input_order_with_a_streamed_input(tmp_path: Path) -> None:
    items: list[dict[str, Any] | str] = [
        _item(1), _item(2), "{not json", _item(3), _item(4), {**_item(5), "id": "it-1"}, _item(6)
    ]
    source = _write(tmp_path / "in.jsonl", items)

    first = _grade(tmp_path, source, "--limit", "2")
    assert _ids(tmp_path / "out.jsonl") == ["it-1", "it-2"]
    assert "line" not in first.stderr  # --limit stops reading before the bad lines
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["items"] == 2 and [p["line"] for p in summary["invalid_lines"]] == []

    second = _grade(tmp_path, source)
    assert "resuming: 2 item(s) already graded" in second.stderr
    # Reported by the first pass over the input only, not by the passes after it.
    assert second.stderr.count(f"{source}:") == 2
    assert second.stderr.count("duplicate id 'it-1'") == 1
    # Completed in any order, rewritten in input order; the duplicate is not graded.
    assert _ids(tmp_path / "out.jsonl") == ["it-1", "it-2", "it-3", "it-4", "it-6"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["items"] == 5  # the resumed lines count too
    assert [p["line"] for p in summary["invalid_lines"]] == [3, 6]
    before = {json.loads(line)["id"]: line for line in (tmp_path / "out.jsonl").open()}

    items[4] = _item(4, "A completely different answer.")
    _write(source, items)
    third = _grade(tmp_path, source)
    assert "grading 1 item(s) again: 1 with changed content" in third.stderr
    after = {json.loads(line)["id"]: line for line in (tmp_path / "out.jsonl").open()}
    assert list(after) == ["it-1", "it-2", "it-3", "it-4", "it-6"]
    assert after["it-4"] != before["it-4"]
    assert {k: v for k, v in after.items() if k != "it-4"} == {
        k: v for k, v in before.items() if k != "it-4"
    }
