"""Checks before money is spent (issue 28): one rule for every output path of `grade`,
`calibrate` and `mcq`, calibration sets as CSV, and results that name the metric a calibrated
mapping maps.

Every case runs the CLI as users do: a fresh interpreter (subprocess), a fresh cache folder.
"""

from __future__ import annotations

import csv
import json
import random
import subprocess
from pathlib import Path

import pytest

from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import run_cli

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"
MCQ = ROOT / "judge" / "data" / "mcq_example_tombench.jsonl"
CALIBRATION_EXAMPLE = ROOT / "calibration" / "data" / "example.jsonl"


def one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2 and exactly one stderr line, `bonusjudge...: error: ...`, naming ``needles``."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("bonusjudge") and ": error: " in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def ratings_csv(path: Path, rows: int = 30) -> Path:
    """A researcher's ratings table: ROUGE-like overlap rated 1-5 by people."""
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "while", "his", "brother", "read", "old",
             "books", "near", "river"]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "question", "reference", "response", "human_score"])
        for n in range(rows):
            reference = rng.sample(words, 6)
            kept = rng.randint(0, 6)
            response = reference[:kept] + rng.sample(words, 6 - kept)
            writer.writerow([f"r{n}", f"Question {n}?", " ".join(reference), " ".join(response),
                             1 + round(4 * kept / 6)])
    return path


# -- output paths --------------------------------------------------------------------------------


def test_grade_summary_into_a_missing_folder_is_created_like_out(tmp_path: Path) -> None:
    out = tmp_path / "results" / "out.jsonl"
    summary = tmp_path / "reports" / "today" / "s.json"
    done = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--summary", str(summary),
                    "--metrics", "rouge_l", "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.is_file() and summary.is_file()
    assert json.loads(summary.read_text())["items"] == len(out.read_text().splitlines())


@pytest.mark.parametrize("command", ["grade", "calibrate", "mcq"])
def test_an_output_that_cannot_be_written_is_refused_before_the_first_judge_call(
    tmp_path: Path, command: str
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with OpenAIStandIn() as srv:
        judge = ["--api-base", srv.base_url]
        if command == "grade":
            args = ["grade", str(EXAMPLES), "--out", str(tmp_path / "out.jsonl"), "--summary",
                    str(blocked / "s.json"), "--model", "openai/standin", "--metrics",
                    "coverage", *judge]
            option = "summary"
        elif command == "calibrate":
            args = ["calibrate", str(CALIBRATION_EXAMPLE), "--out", str(blocked / "report"),
                    "--judge", "openai/standin", "--metrics", "coverage", *judge]
            option = "out"
        else:
            args = ["mcq", str(MCQ), "--out", str(tmp_path / "m.jsonl"), "--summary",
                    str(blocked / "s.json"), "--llm-model", "openai/standin", *judge]
            option = "summary"
        done = run_cli([*args, "--cache-dir", str(tmp_path / "cache")])
        line = one_line_error(done, f"error: {option}: ", "is not a folder")
        assert str(blocked) in line
        assert srv.stats().requests == 0  # not even the preflight's one-token call
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]


# -- calibration sets as CSV ---------------------------------------------------------------------


def test_calibrate_reads_a_csv_and_its_mapping_names_what_it_maps(tmp_path: Path) -> None:
    cache = ["--cache-dir", str(tmp_path / "cache")]
    report = tmp_path / "cal"
    done = run_cli(["calibrate", str(ratings_csv(tmp_path / "mine.csv")), "--scale", "1-5",
                    "--metrics", "rouge_l", "--out", str(report), "--resamples", "50", "--quiet",
                    *cache])
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads((report / "report.json").read_text())
    assert data["set"]["n_items"] == 30 and data["set"]["n_problems"] == 0
    assert data["metrics"]["rouge_l"]["agreement"]["spearman"]["value"] > 0.5
    mapping = report / "mappings" / "rouge_l.json"

    out, summary = tmp_path / "g" / "out.jsonl", tmp_path / "g" / "s.json"
    graded = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--summary", str(summary),
                      "--metrics", "rouge_l", "--calibration", str(mapping), *cache])
    assert graded.returncode == 0, graded.stderr[-2000:]
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert results and all(r["calibrated_metric"] == "rouge_l" for r in results)
    assert all(r["calibrated_score"] is not None for r in results)
    figures = json.loads(summary.read_text())
    assert figures["calibrated_metric"] == "rouge_l"
    assert figures["calibrated_n"] == len(results)
    assert "calibrated score (rouge_l mapped onto the human scale" in graded.stdout

    # Lines written before results named the metric are graded again, not read as coverage.
    legacy = [{k: v for k, v in r.items() if k != "calibrated_metric"} for r in results]
    out.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    again = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--metrics", "rouge_l",
                     "--calibration", str(mapping), "--quiet", *cache])
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{len(results)} without the name of their calibrated metric" in again.stderr
    assert all(json.loads(line)["calibrated_metric"] == "rouge_l"
               for line in out.read_text().splitlines())


def test_the_calibration_option_help_says_what_it_does() -> None:
    done = run_cli(["grade", "--help"])
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "the coverage mapped" not in text
    assert "the metric the mapping was fitted on" in text and "calibrated_metric" in text


def test_calibrate_refuses_a_csv_without_its_columns_before_creating_anything(
    tmp_path: Path,
) -> None:
    table = tmp_path / "mine.csv"
    table.write_text("question,gold,answer_text,score\n" + "Why?,Because.,So.,3\n" * 31)
    report = tmp_path / "report"
    done = run_cli(["calibrate", str(table), "--scale", "1-5", "--out", str(report),
                    "--metrics", "rouge_l", "--cache-dir", str(tmp_path / "cache")])
    one_line_error(done, "missing column(s) reference, response, human_score", "mine.csv")
    assert not report.exists()


def test_calibrate_refuses_an_unreadable_set_in_one_line_and_leaves_no_file(
    tmp_path: Path,
) -> None:
    garbage = tmp_path / "notes.jsonl"
    garbage.write_text("question,reference,response,human_score\n" + "a,b,c,1\n" * 30)
    report = tmp_path / "report"
    done = run_cli(["calibrate", str(garbage), "--out", str(report), "--metrics", "rouge_l",
                    "--cache-dir", str(tmp_path / "cache")])
    one_line_error(done, "set: no line of", "(31 bad: line 1: invalid JSON")
    assert not report.exists()  # no empty grades-*.jsonl behind
