"""The cascade judge through the service (issue 32.4): ``judge: {"judge": "cascade"}``.

A real ``bonusjudge serve`` whose default judge is an LLM (the strict stand-in): a batch and a
job asking for the cascade send the stand-in only the item the matcher is unsure of (the close
paraphrase; the exact and the unrelated answers are outside the shipped band), each result
says who decided, and the job's summary adds the routes up. In process: a service whose only
judge is the matcher refuses the cascade, naming what to set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from bonusjudge_client import JudgeClient
from judge.engine import Grader
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess

ANSWERS = {
    "exact": "Levin feels humiliated and he wants to return to his estate.",
    "unrelated": "The stock market closed higher on Tuesday after strong earnings reports.",
    "close": "He feels humiliated and wants to go back to his estate in the country.",
}


def items(suffix: str = "", book: str | None = None) -> list[dict[str, Any]]:
    """The three answers; ``book`` changes the LLM's prompt (not the matcher's input), so a
    second run's LLM calls are not answered from the first one's cache."""
    return [
        {"id": key + suffix, "question": "How does Levin feel after Kitty refuses him?",
         "reference": "He feels humiliated and wants to return to his estate.",
         "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
         "response": response, "tom_dimension": "emotion", "book_name": book}
        for key, response in ANSWERS.items()
    ]


@pytest.mark.process
def test_a_batch_and_a_job_send_only_the_unsure_item(tmp_path: Path) -> None:
    cascade = {"judge": "cascade"}
    with OpenAIStandIn() as judge:
        args = ["--model", "openai/gpt-4o-mini", "--api-base", judge.base_url,
                "--metrics", "coverage,defects", "--cache-dir", str(tmp_path / "cache"),
                "--no-preflight"]
        env = {"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}
        with ServiceProcess(args, tmp_path, env=env) as svc, JudgeClient(svc.url) as client:
            results = {r.id: r for r in client.grade_many(items(), judge=cascade)}
            assert judge.stats().requests == 2, svc.log()[-2000:]
            sent = [json.dumps(body) for body in judge.requests]
            assert all(ANSWERS["close"] in body for body in sent)
            assert {k: r.decided_by for k, r in results.items()} == {
                "exact": "embedded-matcher", "unrelated": "embedded-matcher", "close": "llm",
            }  # fmt: skip
            assert results["exact"].defects.status == "not_assessed"
            assert results["close"].defects.status == "scored"
            assert results["exact"].provenance.calls == []
            assert results["close"].provenance.config_hash != (
                client.grade(items("-llm", "War and Peace")[2]).provenance.config_hash
            )  # the cascade is its own configuration (the LLM alone answered that one)

            judge.reset_stats()
            status = client.submit_job(items("-job", "Anna Karenina"), judge=cascade)
            final = client.wait(status.id, poll_interval=0.1, timeout=120)
            assert final.status == "done", svc.log()[-2000:]
            summary = client.summary(status.id)
            assert judge.stats().requests == 2
            assert (summary.decided_by_matcher, summary.decided_by_llm) == (2, 1)
            assert summary.decided_by_matcher + summary.decided_by_llm == summary.items
            assert summary.llm_share == pytest.approx(1 / 3, abs=1e-6)
            assert summary.llm_calls_saved == 4


def test_a_service_without_an_llm_refuses_the_cascade(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    body = {**items()[0], "judge": {"judge": "cascade"}}
    with TestClient(make_app(make_grader(model="embedded-matcher"))) as client:
        answer = client.post("/v1/grade", json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"].startswith("judge")
    assert "needs an LLM judge model" in error["message"]
