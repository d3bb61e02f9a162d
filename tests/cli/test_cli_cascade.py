"""``bonusjudge grade --judge cascade`` as users run it, against the strict stand-in (issue 32.4).

A fresh interpreter, a fresh cache, the shipped bands (agreement 0.95: [0.05, 0.80] for English
short points). The exact answer (p 0.96-0.98) and the unrelated one (p 0.03-0.04) are outside
the matcher's uncertain band, the close paraphrase of both points is inside it (p 0.85 and 0.74,
the second in the band): only that item reaches the stand-in,
which sees its response and never the others'. Without an LLM the option is refused, naming
what to set; an LLM that refuses leaves the unsure item unscored with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from standins.openai_server import FaultPlan, OpenAIStandIn
from tests.helpers.processes import run_cli

pytestmark = pytest.mark.process

QUESTION = "How does Levin feel after Kitty refuses him?"
ANSWERS = {
    "exact": "Levin feels humiliated and he wants to return to his estate.",
    "unrelated": "The stock market closed higher on Tuesday after strong earnings reports.",
    "close": "He feels humiliated and wants to go back to his estate in the country.",
    "blank": "",
}
ROUTES = {"exact": "embedded-matcher", "unrelated": "embedded-matcher", "close": "llm",
          "blank": "embedded-matcher"}


def items() -> list[dict[str, Any]]:
    return [
        {"id": key, "question": QUESTION,
         "answer": "He feels humiliated and wants to return to his estate.",
         "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
         "tom_dimension": "emotion", "response": response}
        for key, response in ANSWERS.items()
    ]


def grade(tmp: Path, base_url: str, *extra: str) -> Any:
    source = tmp / "in.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in items()))
    return run_cli(["grade", str(source), "--out", str(tmp / "out.jsonl"), "--summary",
                    str(tmp / "summary.json"), "--cache-dir", str(tmp / "cache"), "--quiet",
                    "--model", "openai/gpt-4o-mini", "--api-base", base_url, "--no-preflight",
                    "--metrics", "coverage,defects", "--judge", "cascade", *extra])


def results(tmp: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, (tmp / "out.jsonl").read_text().splitlines())}


def test_only_the_unsure_item_reaches_the_llm(tmp_path: Path) -> None:
    with OpenAIStandIn() as judge:
        # The estimate (issue 32.1) runs the same routing: it counts the unsure item's calls.
        estimate = grade(tmp_path, judge.base_url, "--estimate", "--json")
        assert estimate.returncode == 0, estimate.stderr
        assert json.loads(estimate.stdout)["total"]["calls"] == 2
        assert judge.stats().requests == 0
        done = grade(tmp_path, judge.base_url)
        assert done.returncode == 0, done.stderr
        sent = judge.requests
        stats = judge.stats()
        assert stats.requests == 2 and stats.outcomes.get("bad_request", 0) == 0
    bodies = [json.dumps(body) for body in sent]
    assert all("go back to his estate in the country" in body for body in bodies)
    assert not any(ANSWERS["exact"] in body or ANSWERS["unrelated"] in body for body in bodies)
    out = results(tmp_path)
    assert {key: r["decided_by"] for key, r in out.items()} == ROUTES
    for key, result in out.items():
        confidences = [v["confidence"] for v in result["coverage"]["verdicts"]]
        if ROUTES[key] == "llm":
            assert result["defects"]["status"] == "scored"
            assert confidences == [None, None]  # the LLM's verdicts, not the matcher's
            assert {c["task"] for c in result["provenance"]["calls"]} == {"coverage", "defects"}
        else:
            assert result["defects"]["status"] == "not_assessed"
            assert result["provenance"]["calls"] == []
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["decided_by_llm"] == 1 and summary["decided_by_matcher"] == 3
    assert summary["llm_share"] == 0.25 and summary["llm_calls_saved"] == 4
    assert summary["judge_calls"] == 2
    assert "cascade: 1 of 4 item(s) sent to the LLM judge (25.0%)" in done.stdout


def test_an_llm_refusal_leaves_the_unsure_item_unscored(tmp_path: Path) -> None:
    with OpenAIStandIn(faults=FaultPlan(probabilities={"refusal": 1.0})) as judge:
        done = grade(tmp_path, judge.base_url)
        assert done.returncode == 0, done.stderr
    close = results(tmp_path)["close"]
    assert close["decided_by"] == "llm" and close["status"] == "unscored"
    assert close["coverage"]["status"] == "unscored" and close["coverage"]["reason"] == "refusal"
    assert all(v["covered"] is None for v in close["coverage"]["verdicts"])
    assert results(tmp_path)["exact"]["status"] == "scored"


def test_a_cascade_without_an_llm_is_refused_naming_what_to_set(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(items()[0]) + "\n")
    out = ["--out", str(tmp_path / "o.jsonl"), "--cache-dir", str(tmp_path / "cache")]
    done = run_cli(["grade", str(source), *out, "--judge", "cascade"])
    assert done.returncode == 2
    assert "judge `cascade` needs an LLM judge model" in done.stderr
    assert "set `model` (--model, BONUSJUDGE_JUDGE__MODEL" in done.stderr
    unfitted = run_cli(["grade", str(source), *out, "--judge", "cascade", "--model", "openai/x",
                        "--api-base", "http://127.0.0.1:9/v1", "--no-preflight",
                        "--cascade-agreement", "0.8"])
    assert unfitted.returncode == 2
    assert "no cascade band is fitted for agreement 0.8; fitted: 0.9, 0.95, 0.97" in (
        unfitted.stderr
    )
    # Refused before anything is written: no empty output left behind.
    assert not (tmp_path / "o.jsonl").exists()
