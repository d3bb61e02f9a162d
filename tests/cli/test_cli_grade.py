"""`bonusjudge grade` as users run it: a fresh interpreter per run, a fresh cache folder.

Resume grades again what changed (content, judge, metrics); `--server` passes the judge options
on (or refuses those the service cannot honour), writes results as they arrive and keeps one bad
item that item's problem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess, run_cli

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

ITEMS = [
    {
        "id": f"it-{n}",
        "question": "How does Levin feel after Kitty refuses him?",
        "answer": "He feels humiliated and wants to return to his estate.",
        "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
        "tom_dimension": "emotion",
        "response": f"He is humiliated and goes home to his estate ({n}).",
    }
    for n in range(1, 5)
]


def write_items(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def grade(tmp: Path, source: Path, *extra: str) -> Any:
    args = ["grade", str(source), "--out", str(tmp / "out.jsonl"), "--summary",
            str(tmp / "summary.json"), "--cache-dir", str(tmp / "cache"), "--quiet", *extra]
    return run_cli(args)


def test_resume_grades_again_what_changed(tmp_path: Path) -> None:
    source = write_items(tmp_path / "in.jsonl", ITEMS)
    first = grade(tmp_path, source, "--metrics", "coverage,rouge_l")
    assert first.returncode == 0, first.stderr
    before = {o["id"]: o for o in lines(tmp_path / "out.jsonl")}
    assert len(before) == 4 and all(o["input_hash"] for o in before.values())

    edited = [dict(i) for i in ITEMS]
    edited[1]["response"] = ""  # an empty answer is an answer: scored 0, not an invalid line
    write_items(source, edited)
    second = grade(tmp_path, source, "--metrics", "coverage,rouge_l")
    assert second.returncode == 0, second.stderr
    assert "grading 1 item(s) again: 1 with changed content" in second.stderr
    after = {o["id"]: o for o in lines(tmp_path / "out.jsonl")}
    assert len(after) == 4
    assert after["it-2"]["flags"] == ["empty_response"]
    assert after["it-2"]["coverage"]["coverage"] == 0.0
    assert after["it-1"] == before["it-1"]  # untouched items are not graded again

    third = grade(tmp_path, source, "--metrics", "coverage")
    assert "grading 4 item(s) again: 4 graded with other metrics" in third.stderr
    results = lines(tmp_path / "out.jsonl")
    assert {tuple(o["provenance"]["metrics"]) for o in results} == {("coverage",)}
    assert len({o["provenance"]["config_hash"] for o in results}) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["items"] == 4 and summary["bpc_all"] is not None
    assert summary["unscored_rate"] == 0.0


def test_server_mode_refuses_options_the_service_cannot_honour(tmp_path: Path) -> None:
    source = write_items(tmp_path / "in.jsonl", ITEMS)
    done = run_cli(["grade", str(source), "--out", str(tmp_path / "out.jsonl"),
                    "--server", "http://127.0.0.1:9", "--mode", "json_schema"])
    assert done.returncode == 2
    assert done.stderr.startswith("bonusjudge: error: --mode: not honoured with --server")
    assert not (tmp_path / "out.jsonl").exists()


@pytest.fixture(scope="module")
def judge_server():
    with OpenAIStandIn() as srv:
        yield srv


def test_server_mode_passes_judge_options_and_writes_as_results_arrive(
    judge_server: OpenAIStandIn, tmp_path: Path
) -> None:
    items = [*ITEMS, {**ITEMS[0], "id": "too-many", "bonus_points": ["a", "b", "c"]}]
    source = write_items(tmp_path / "in.jsonl", items)
    serve_args = ["--model", "openai/standin", "--api-base", judge_server.base_url,
                  "--metrics", "coverage,defects,rouge_l", "--cache-dir", str(tmp_path / "svc")]
    # The service allows at most 2 points per item: the third item is the service's refusal.
    with ServiceProcess(serve_args, tmp_path, env={"BONUSJUDGE_MAX_BONUS_POINTS": "2"}) as svc:
        done = run_cli(["grade", str(source), "--out", str(tmp_path / "out.jsonl"),
                        "--summary", str(tmp_path / "summary.json"), "--server", svc.url,
                        "--metrics", "coverage", "--temperature", "0.3", "--quiet"])
        assert done.returncode == 0, done.stderr + svc.log()[-2000:]
        assert "too-many" in done.stderr and "not graded" in done.stderr
        results = lines(tmp_path / "out.jsonl")
        assert sorted(o["id"] for o in results) == [f"it-{n}" for n in range(1, 5)]
        for result in results:
            assert result["provenance"]["metrics"] == ["coverage"]  # --metrics reached it
            assert result["provenance"]["sampling"]["temperature"] == 0.3
            assert result["defects"] is None and result["rouge_l"] is None
        hashes = {o["provenance"]["config_hash"] for o in results}
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["config_hash"] in hashes and len(hashes) == 1

        # Another temperature is another judge: every line is graded again, none mixed in.
        again = run_cli(["grade", str(source), "--out", str(tmp_path / "out.jsonl"),
                         "--server", svc.url, "--metrics", "coverage", "--quiet"])
        assert again.returncode == 0, again.stderr
        assert "graded by another judge configuration" in again.stderr
        results = lines(tmp_path / "out.jsonl")
        assert {o["provenance"]["sampling"]["temperature"] for o in results} == {0.0}
        assert len(results) == 4


def test_server_mode_reports_the_judge_calls_the_service_made(
    judge_server: OpenAIStandIn, tmp_path: Path
) -> None:
    # Issue 28: `grade --server` ended with "0 judge call(s)" (this process made none) while the
    # service made them all; the closing line and the summary now count the service's, from
    # the results' provenance.
    source = write_items(tmp_path / "in.jsonl", ITEMS)
    serve_args = ["--model", "openai/standin", "--api-base", judge_server.base_url,
                  "--metrics", "coverage,defects", "--cache-dir", str(tmp_path / "svc")]
    with ServiceProcess(serve_args, tmp_path) as svc:
        before = judge_server.stats().requests
        done = run_cli(["grade", str(source), "--out", str(tmp_path / "a.jsonl"), "--summary",
                        str(tmp_path / "a.json"), "--server", svc.url, "--quiet"])
        assert done.returncode == 0, done.stderr + svc.log()[-2000:]
        made = judge_server.stats().requests - before
        assert made == len(ITEMS) * 2  # coverage and defects of each item, the probe's included
        assert f"{made} judge call(s) made by the service (0 from its cache)" in done.stdout
        summary = json.loads((tmp_path / "a.json").read_text())
        assert (summary["judge_calls"], summary["cache_hits"]) == (made, 0)

        # The same items again into a new file: the service answers them all from its cache.
        again = run_cli(["grade", str(source), "--out", str(tmp_path / "b.jsonl"), "--summary",
                         str(tmp_path / "b.json"), "--server", svc.url, "--quiet"])
        assert again.returncode == 0, again.stderr + svc.log()[-2000:]
        assert judge_server.stats().requests == before + made
        assert f"0 judge call(s) made by the service ({made} from its cache)" in again.stdout
        summary = json.loads((tmp_path / "b.json").read_text())
        assert (summary["judge_calls"], summary["cache_hits"]) == (0, made)


def test_closing_line_counts_metric_cache_hits(tmp_path: Path) -> None:
    source = write_items(tmp_path / "in.jsonl", ITEMS)
    first = grade(tmp_path, source, "--metrics", "rouge_l")
    (tmp_path / "out.jsonl").unlink()
    again = grade(tmp_path, source, "--metrics", "rouge_l")
    assert first.returncode == 0 and again.returncode == 0, again.stderr
    assert "0 metric cache hit(s)" in first.stdout
    assert "4 metric cache hit(s)" in again.stdout  # everything came from the cache


def test_table_keeps_long_respondent_names_and_output_can_follow_input_order(
    tmp_path: Path,
) -> None:
    items = [{**item, "respondent": f"very-long-model-name-{n % 2}"} for n, item in
             enumerate(ITEMS)]
    source = write_items(tmp_path / "in.jsonl", items)
    done = grade(tmp_path, source, "--metrics", "rouge_l", "--order", "input")
    assert done.returncode == 0, done.stderr
    assert "model=very-long-model-name-0" in done.stdout
    assert "model=very-long-model-name-1" in done.stdout
    assert [o["id"] for o in lines(tmp_path / "out.jsonl")] == [i["id"] for i in ITEMS]
