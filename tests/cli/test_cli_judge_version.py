"""Resume and calibration never reuse another matcher's grades (issue 28, part 1), as users run
them: `bonusjudge grade` and `bonusjudge calibrate` in fresh interpreters with a fresh cache.

The reproduction: a grade file rewritten to say `judge_version: "matcher-v2"` with every
`expected_coverage` 0.5 was reused as is. Now it is graded again, and the run says why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge.identity import MATCHER_VERSION
from tests.helpers.processes import run_cli

pytestmark = pytest.mark.process

ITEMS = [
    {
        "id": f"it-{n}",
        "question": "How does Levin feel after Kitty refuses him?",
        "answer": "He feels humiliated and wants to return to his estate.",
        "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
        "response": f"He is humiliated and goes home to his estate ({n}).",
    }
    for n in range(1, 4)
]


METRIC = "coverage@embedded-matcher"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def as_old_matcher(path: Path) -> None:
    """Rewrite a results file as if an older matcher had made it (the hash left as it was)."""
    rows = lines(path)
    for row in rows:
        row["provenance"]["judge_version"] = "matcher-v2"
        if row.get("coverage"):
            row["coverage"]["expected_coverage"] = 0.5
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_grade_regrades_lines_of_another_matcher_version(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    args = ["grade", str(source), "--out", str(out), "--summary", str(summary), "--metrics",
            "coverage", "--cache-dir", str(tmp_path / "cache"), "--quiet"]  # fmt: skip
    first = run_cli(args)
    assert first.returncode == 0, first.stderr
    assert json.loads(summary.read_text())["judge_version"] == MATCHER_VERSION
    as_old_matcher(out)

    again = run_cli(args)
    assert again.returncode == 0, again.stderr
    assert (
        f"grading 3 item(s) again: 3 graded by matcher-v2, now {MATCHER_VERSION}" in again.stderr
    )
    rows = lines(out)
    assert {r["provenance"]["judge_version"] for r in rows} == {MATCHER_VERSION}
    assert all(r["coverage"]["expected_coverage"] != 0.5 for r in rows)
    # The verdicts came from the matcher's cache: the re-run made no judge work of its own.
    figures = json.loads(summary.read_text())
    assert figures["cache_hits"] == 3 and figures["judge_calls"] == 0


def test_calibrate_regrades_a_grade_file_of_another_matcher(tmp_path: Path) -> None:
    out = tmp_path / "report"
    args = ["calibrate", "calibration/data/example.jsonl", "--metrics", "coverage", "--out",
            str(out), "--resamples", "50", "--quiet", "--cache-dir", str(tmp_path / "cache")]
    first = run_cli(args)
    assert first.returncode == 0, first.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["metrics"][METRIC]["judge_version"] == MATCHER_VERSION
    mapping = json.loads((out / "mappings" / "coverage_embedded-matcher.json").read_text())
    assert mapping["judge_version"] == MATCHER_VERSION
    assert MATCHER_VERSION in (out / "report.md").read_text()

    (grades,) = out.glob("grades-*-coverage.jsonl")
    as_old_matcher(grades)
    # The file an older matcher's run left under its own (older) configuration hash.
    older = out / "grades-0213e3616871c1c1-coverage.jsonl"
    older.write_text(grades.read_text())
    again = run_cli(args)
    assert again.returncode == 0, again.stderr
    assert f"graded by matcher-v2, now {MATCHER_VERSION}" in again.stderr
    assert f"{older}: not reused: graded by matcher-v2" in again.stderr
    assert {r["provenance"]["judge_version"] for r in lines(grades)} == {MATCHER_VERSION}
    redone = json.loads((out / "report.json").read_text())
    assert redone["metrics"][METRIC]["agreement"] == report["metrics"][METRIC]["agreement"]
