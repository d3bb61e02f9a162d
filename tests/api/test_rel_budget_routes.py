"""Every route that can call a provider spends against the key's day budget (issue 41.2).

On a real ``bonusjudge serve`` with an API key, a day budget and the strict stand-in judge,
priced as litellm prices openai/gpt-4o-mini: once the key's day is spent, ``/v1/grade`` was
refused but ``POST /v1/calibrate`` (a 300-item run sent 900 requests), ``/v1/bonus-points`` and
``/v1/mcq`` with ``llm_extract`` still called the provider (one key reached 158% of its day);
and a calibration run cancelled with calls in flight left requests the provider billed out of
the key's books. The stand-in counts what the provider received.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.auth import hash_key
from api.jobs import JOBS_DB, JobStore
from api.jobs.spend import utc_day
from calibration.sets import example_set_path
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess

pytestmark = pytest.mark.process

KEY = "budget-routes-key"
CONCURRENCY = 4


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


def item(n: int) -> dict[str, Any]:
    return {
        "id": f"i{n}", "question": "How does Levin feel?", "reference": "He feels humiliated.",
        "bonus_points": ["Levin feels humiliated"], "response": f"He is ashamed ({n}).",
    }


def rated(n: int, tag: str) -> list[dict[str, Any]]:
    """``n`` rated lines of the bundled example set, each with its own id and answer."""
    text = example_set_path("example").read_text(encoding="utf-8")
    lines = [json.loads(raw) for raw in text.splitlines() if raw.strip()]
    out = []
    for index in range(n):
        line = dict(lines[index % len(lines)])
        line["id"] = f"{tag}-{index}"
        line["candidate"] = f"{line['candidate']} ({tag} {index})"
        out.append(line)
    return out


MCQ = {"id": "m1", "choices": ["red", "blue"], "answer": "A",
       "response": "hmm, I would say the first colour, perhaps"}
"""An answer the rules cannot read: with ``llm_extract`` the judge is asked."""


def serve(judge: OpenAIStandIn, tmp_path: Path, limit: float) -> ServiceProcess:
    args = ["--model", "openai/gpt-4o-mini", "--api-base", judge.base_url, "--metrics",
            "coverage", "--concurrency", str(CONCURRENCY), "--cache-dir", str(tmp_path / "cache"),
            "--no-preflight"]
    env = {"BONUSJUDGE_API_KEYS": json.dumps([KEY]),
           "BONUSJUDGE_DATA_DIR": str(tmp_path / "data"),
           "BONUSJUDGE_MAX_COST_PER_KEY_USD": str(limit)}
    return ServiceProcess(args, tmp_path, env=env)


def key_day(tmp_path: Path) -> tuple[float, int]:
    """The key's spend today as the job store keeps it: USD and requests."""
    store = JobStore(tmp_path / "data" / JOBS_DB)
    try:
        return store.spend.key_day(hash_key(KEY), utc_day(time.time()))
    finally:
        store.close()


def billed(judge: OpenAIStandIn) -> float:
    """What the stand-in's tokens cost at gpt-4o-mini's prices (USD 0.15 / 0.60 per M)."""
    stats = judge.stats()
    return (stats.prompt_tokens * 0.15 + stats.completion_tokens * 0.6) / 1e6


def calibration(http: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        status: dict[str, Any] = http.get(f"/v1/calibrate/{job_id}", headers=auth()).json()
        if status["status"] not in ("queued", "running"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def assert_refused(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["type"] == "budget_exhausted", answer.text
    assert "max_cost_per_key_usd" in answer.json()["error"]["message"]
    assert 0 < int(answer.headers["Retry-After"]) <= 86_400


def test_a_spent_key_sends_nothing_more_from_any_route(tmp_path: Path) -> None:
    limit = 0.0005  # about four coverage calls
    with OpenAIStandIn(tokenizer="o200k_base") as judge, serve(judge, tmp_path, limit) as svc, \
            httpx.Client(base_url=svc.url, timeout=120) as http:
        spend = http.post("/v1/grade/batch", json={"items": [item(n) for n in range(8)]},
                          headers=auth())
        assert_refused(spend)  # the batch reached the budget midway
        sent = judge.stats().requests
        assert 0 < sent < 8
        answers = {
            "calibrate": http.post("/v1/calibrate", headers=auth(), json={
                "items": rated(30, "c"), "metrics": ["coverage"], "resamples": 100}),
            "bonus-points": http.post("/v1/bonus-points", headers=auth(), json={
                "question": "How does Levin feel?",
                "reference": "He feels humiliated and wants to go home. He blames Kitty."}),
            "mcq": http.post("/v1/mcq", headers=auth(),
                             json={"items": [MCQ], "llm_extract": True}),
            "mcq/jobs": http.post("/v1/mcq/jobs", headers=auth(),
                                  json={"items": [MCQ], "llm_extract": True}),
        }
        time.sleep(1.0)  # a job or run that was let in has sent its first requests
        codes = {route: answer.status_code for route, answer in answers.items()}
        assert (codes, judge.stats().requests - sent) == (dict.fromkeys(answers, 429), 0)
        for answer in answers.values():
            assert_refused(answer)
        # What calls no judge still answers: the rules alone.
        rules = http.post("/v1/mcq", headers=auth(), json={"items": [MCQ]})
        assert rules.status_code == 200, rules.text
        assert judge.stats().requests == sent  # not one request more
        time.sleep(1.5)  # the spend reaches the store
        usage = http.get("/v1/usage", headers=auth()).json()
    spent, requests = key_day(tmp_path)
    assert requests == usage["provider_requests"] == judge.stats().requests == sent
    assert spent <= limit and billed(judge) <= limit, (spent, billed(judge))


def test_a_calibration_run_stops_at_the_budget_and_loses_nothing(tmp_path: Path) -> None:
    limit = 0.0012  # about ten of the run's 30 coverage calls
    body = {"items": rated(30, "r"), "metrics": ["coverage"], "resamples": 100}
    with OpenAIStandIn(tokenizer="o200k_base", latency=0.05) as judge:
        with serve(judge, tmp_path, limit) as svc, \
                httpx.Client(base_url=svc.url, timeout=120) as http:
            started = http.post("/v1/calibrate", headers=auth(), json=body)
            assert started.status_code == 202, started.text
            status = calibration(http, started.json()["id"])
            first = judge.stats().requests
            # It ends, saying why and how far it got; it does not go on sending.
            assert status["status"] == "failed" and status["report"] is None, status
            detail = status["detail"]
            assert detail.startswith("budget_exhausted: ") and "max_cost_per_key_usd" in detail
            graded = int(detail.split("openai/gpt-4o-mini: ")[1].split(" of 30 ")[0])
            assert 0 < graded < 30 and first < 30, (detail, first)
            # A new run is refused up front while the day is spent.
            assert_refused(http.post("/v1/calibrate", headers=auth(), json=body))
            time.sleep(1.5)
            usage = http.get("/v1/usage", headers=auth()).json()
        spent, requests = key_day(tmp_path)
        assert requests == usage["provider_requests"] == first
        # Over the limit by at most the calls in flight when it was reached.
        assert spent <= limit and billed(judge) <= limit + CONCURRENCY * limit / 8
        # With a higher limit the same run sends only what it had not paid for: what it graded
        # is in the key's cache.
        with serve(judge, tmp_path, 1.0) as svc, \
                httpx.Client(base_url=svc.url, timeout=120) as http:
            again = http.post("/v1/calibrate", headers=auth(), json=body)
            assert again.status_code == 202, again.text
            assert calibration(http, again.json()["id"])["status"] == "done"
        assert judge.stats().requests - first == 30 - graded


def test_a_cancelled_calibration_counts_every_request_it_sent(tmp_path: Path) -> None:
    with OpenAIStandIn(tokenizer="o200k_base", latency=0.4) as judge, \
            serve(judge, tmp_path, 1.0) as svc, httpx.Client(base_url=svc.url, timeout=120) as http:
        started = http.post("/v1/calibrate", headers=auth(), json={
            "items": rated(200, "x"), "metrics": ["coverage"], "resamples": 100})
        assert started.status_code == 202, started.text
        deadline = time.monotonic() + 60
        while judge.stats().requests < 3 * CONCURRENCY:
            assert time.monotonic() < deadline, judge.stats()
            time.sleep(0.02)
        time.sleep(0.2)  # calls in flight
        cancelled = http.delete(f"/v1/calibrate/{started.json()['id']}", headers=auth())
        assert cancelled.json()["status"] == "cancelled", cancelled.text
        time.sleep(2.0)  # the in-flight requests end, and the spend reaches the store
        usage = http.get("/v1/usage", headers=auth()).json()
        received = judge.stats().requests
    spent, requests = key_day(tmp_path)
    assert requests == usage["provider_requests"] == received, (requests, usage, received)
    assert spent > 0


def test_a_multiple_choice_job_pauses_at_the_budget_with_its_unread_answers_pending(
    tmp_path: Path,
) -> None:
    limit = 0.00015  # a few readings
    # Each answer its own (no reading is answered from the cache), none the rules can read.
    items = [dict(MCQ, id=f"m{n}", response=f"{MCQ['response']}{'!' * (n + 1)}")
             for n in range(10)]
    with OpenAIStandIn(tokenizer="o200k_base") as judge, serve(judge, tmp_path, limit) as svc, \
            httpx.Client(base_url=svc.url, timeout=120) as http:
        job = http.post("/v1/mcq/jobs", headers=auth(), json={"items": items, "llm_extract": True})
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 60
        while (status := http.get(f"/v1/mcq/jobs/{job.json()['id']}", headers=auth()).json())[
                "status"] not in ("paused", "done", "failed"):
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        assert status["status"] == "paused", status
        assert "max_cost_per_key_usd" in status["detail"]
        read = judge.stats().requests
        # What was read is stored; the answers the judge was kept from reading stay pending
        # (never stored as unparseable).
        lines = http.get(f"/v1/mcq/jobs/{job.json()['id']}/results", headers=auth()).text
        results = [json.loads(line)["result"] for line in lines.splitlines()]
        assert 0 < len(results) == status["done"] < 10 and read < 10, (results, read)
        assert all(r["method"] == "llm" for r in results), results
        time.sleep(1.5)
    spent, requests = key_day(tmp_path)
    assert requests == read and spent <= limit
