"""`bonusjudge grade` on what harnesses write, and in the paper's mode, as users run it.

A fresh interpreter per run, an empty cache, and an OpenAI-compatible stand-in as the judge. A
null answer (a harness's refusal or timeout) is graded as an empty one against its respondent,
never dropped as an invalid line; invalid lines that differ between respondents are reported per
respondent. In the paper's mode (``--rubric chartom-paper``) unscored defects are counted apart
from unscored coverage, and Chinese items judged with its English-only prompts are flagged and
pointed to ``--rubric chartom``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import run_cli

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process


def item(n: int, respondent: str, response: Any) -> dict[str, Any]:
    return {
        "id": f"q{n}-{respondent}",
        "question": f"How does Levin feel after Kitty refuses him ({n})?",
        "answer": "He feels humiliated and wants to return to his estate.",
        "bonus_points": ["Levin feels humiliated"],
        "tom_dimension": "emotion",
        "respondent": respondent,
        "response": response,
    }


ZH_ITEM = {
    "id": "zh-1",
    "question": "列文被吉蒂拒绝后感觉如何？",
    "answer": "他感到羞辱，想回到自己的庄园。",
    "bonus_points": ["列文感到羞辱"],
    "tom_dimension": "emotion",
    "response": "他觉得很丢脸，回家了。",
}


def write_items(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items))
    return path


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def grade(tmp: Path, source: Path, base_url: str, *extra: str) -> Any:
    """``bonusjudge grade`` with the paper's rubrics on the stand-in, fresh cache folders."""
    args = ["grade", str(source), "--out", str(tmp / "out.jsonl"), "--summary",
            str(tmp / "summary.json"), "--cache-dir", str(tmp / "cache"), "--quiet",
            "--model", "openai/standin", "--api-base", base_url, "--rubric", "chartom-paper",
            "--metrics", "coverage,defects", *extra]
    return run_cli(args, env={"XDG_CACHE_HOME": str(tmp / "xdg")})


@pytest.fixture
def judge_server() -> Iterator[OpenAIStandIn]:
    """The stand-in's plain answers: point 1 covered, no defect."""
    with OpenAIStandIn() as srv:
        yield srv


def judged_texts(server: OpenAIStandIn) -> list[str]:
    """The user messages of the grading calls the stand-in received (not the preflight)."""
    texts = [" ".join(str(m.get("content")) for m in body["messages"]) for body in
             server.requests]
    return [text for text in texts if "[Response]:" in text]


def test_null_answers_count_against_their_respondent(
    judge_server: OpenAIStandIn, tmp_path: Path
) -> None:
    """The issue's case: a respondent who answers null scored higher, its nulls left out."""
    items = [item(n, "model-a", f"He is humiliated ({n}).") for n in range(1, 5)]
    items += [item(n, "model-b", f"He is humiliated ({n}).") for n in (1, 2)]
    items += [item(n, "model-b", None) for n in (3, 4)]
    source = write_items(tmp_path / "in.jsonl", items)
    done = grade(tmp_path, source, judge_server.base_url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "invalid" not in done.stderr  # a null answer is an answer

    results = {o["id"]: o for o in lines(tmp_path / "out.jsonl")}
    assert len(results) == 8
    for n in (3, 4):
        null = results[f"q{n}-model-b"]
        assert null["status"] == "scored" and null["flags"] == ["null_response"]
        assert null["coverage"]["coverage"] == 0.0 and null["defects"]["penalized"] is False
    assert results["q1-model-b"]["flags"] == []
    # No judge call for a null answer: coverage and defects of the 6 real answers only, and
    # model-b's two real answers are model-a's words, asked once (cached or under way).
    assert len(judged_texts(judge_server)) == 4 * 2

    summary = json.loads((tmp_path / "summary.json").read_text())
    by = summary["by_respondent"]
    assert by["model-a"]["items"] == 4 and by["model-a"]["bpc"] == 1.0
    assert by["model-b"]["items"] == 4 and by["model-b"]["bpc"] == 0.5  # was 1.0 over 2 items
    assert by["model-b"]["bpc_all"] == 0.5 and by["model-b"]["flags"] == {"null_response": 2}
    assert summary["invalid_lines"] == [] and summary["flags"] == {"null_response": 2}
    row = next(row for row in done.stdout.splitlines() if row.startswith("model=model-b"))
    assert row.split()[:6] == ["model=model-b", "4", "0", "0", "50.0", "50.0"]
    assert "8 graded (0 unscored), 0 invalid line(s)" in done.stdout
    assert "2 null response(s) graded as empty answers" in done.stdout


def test_invalid_lines_that_differ_between_respondents_are_reported(
    judge_server: OpenAIStandIn, tmp_path: Path
) -> None:
    """A number or an object is no answer a harness means: still an invalid line, counted per
    respondent, since the respondents' figures are then over different items."""
    items = [item(n, "model-a", f"He is humiliated ({n}).") for n in range(1, 4)]
    items += [item(1, "model-b", "He is humiliated."), item(2, "model-b", {"error": "timeout"}),
              item(3, "model-b", 42)]
    source = write_items(tmp_path / "in.jsonl", items)
    done = grade(tmp_path, source, judge_server.base_url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "line 5 (field response): response: must be text, or null for no answer (got an " \
           "object)" in done.stderr
    assert "line 6 (field response): response: must be text, or null for no answer (got a " \
           "number)" in done.stderr

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["invalid_lines_by_respondent"] == {"model-a": 0, "model-b": 2}
    assert [p["respondent"] for p in summary["invalid_lines"]] == ["model-b", "model-b"]
    warning = ("invalid lines differ between respondents: model-b 2, model-a 0. Invalid lines "
               "are not graded, so these respondents' bpc and bpc_all are over different item "
               "sets")
    assert any(w.startswith(warning) for w in summary["warnings"])
    assert f"warning: {warning}" in done.stdout
    assert "4 graded (0 unscored), 2 invalid line(s) (model-a 0, model-b 2)" in done.stdout


def test_paper_mode_counts_unscored_defects_apart_from_coverage(tmp_path: Path) -> None:
    """Defect replies that do not parse leave the penalty rate's base; BPC is scored in full
    and nothing says otherwise."""

    def handler(body: dict[str, Any]) -> str:
        text = " ".join(str(m.get("content")) for m in body["messages"])
        return "[Included Bonus Points]: 1" if "[Bonus Points]" in text else "I cannot tell."

    items = [item(n, "model-a", f"He is humiliated ({n}).") for n in range(1, 4)]
    source = write_items(tmp_path / "in.jsonl", items)
    with OpenAIStandIn(handler=handler) as srv:
        done = grade(tmp_path, source, srv.base_url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert {o["coverage"]["status"] for o in lines(tmp_path / "out.jsonl")} == {"scored"}

    table = done.stdout.splitlines()
    assert table[0].split() == ["group", "items", "unsc.C", "unsc.D", "BPC%", "BPCall%", "PR%",
                                "ROUGE-L", "BERTSc.", "len"]
    overall = next(row for row in table if row.startswith("overall"))
    assert overall.split()[:7] == ["overall", "3", "0", "3", "100.0", "100.0", "-"]
    assert "bpc counts" not in done.stdout  # coverage is scored: no warning about BPC
    assert ("warning: 3 of 3 items' defect verdict is unscored (100.0%): the penalty rate "
            "counts defect-scored items only (none, so it has no value); bpc is not affected"
            in done.stdout)
    assert "3 graded (3 unscored: coverage 0, defects 3)" in done.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["coverage_unscored"], summary["defects_unscored"]) == (0, 3)
    assert summary["bpc"] == 1.0


def test_paper_mode_flags_chinese_items_and_points_to_chartom(
    judge_server: OpenAIStandIn, tmp_path: Path
) -> None:
    items = [item(1, "model-a", "He is humiliated."), ZH_ITEM, {**ZH_ITEM, "id": "zh-2"}]
    source = write_items(tmp_path / "in.jsonl", items)
    done = grade(tmp_path, source, judge_server.base_url)
    assert done.returncode == 0, done.stderr[-2000:]
    flags = {o["id"]: o["flags"] for o in lines(tmp_path / "out.jsonl")}
    assert flags == {"q1-model-a": [], "zh-1": ["paper_prompts_english_only"],
                     "zh-2": ["paper_prompts_english_only"]}
    notice = ("2 Chinese item(s) were judged with English prompts (flag "
              "paper_prompts_english_only): the paper publishes English prompts only (--rubric "
              "chartom-paper) and its public scorer grades English only; --rubric chartom has "
              "Chinese prompts.")
    assert done.stdout.count(notice) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert notice in summary["warnings"]
    assert summary["flags"] == {"paper_prompts_english_only": 2}
