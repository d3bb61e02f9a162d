"""A key's day budget on a real ``bonusjudge serve`` with two API keys and the strict stand-in
judge, priced as litellm prices openai/gpt-4o-mini (issue 32.2, the service half): key A over its
budget gets 429 ``budget_exhausted`` and its job pauses, key B is unaffected, and after a
restart on the same SQLite store A's spend is still there (and nothing more is sent for it)."""

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
from bonusjudge_client import JudgeClient
from core.processes import free_port
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess, run_cli

pytestmark = pytest.mark.process

KEY_A, KEY_B = "budget-key-a", "budget-key-b"
LIMIT = 0.002
"""USD per key and day: about half of what the 40-item job costs at the stand-in's tokens."""


def item(n: int) -> dict[str, Any]:
    return {
        "id": f"i{n}", "question": "How does Levin feel?", "reference": "He feels humiliated.",
        "bonus_points": ["Levin feels humiliated", "He blames Kitty"],
        "response": f"He is ashamed ({n}).",
    }


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def wait_status(http: httpx.Client, job_id: str, key: str, want: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        status: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", headers=auth(key)).json()
        if status[want] if want == "paused" else status["status"] == want:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def test_a_key_over_its_budget_is_refused_and_paused_across_a_restart(tmp_path: Path) -> None:
    with OpenAIStandIn(tokenizer="o200k_base") as judge:
        args = ["--model", "openai/gpt-4o-mini", "--api-base", judge.base_url,
                "--metrics", "coverage,defects", "--cache-dir", str(tmp_path / "cache"),
                "--no-preflight"]
        env = {"BONUSJUDGE_API_KEYS": json.dumps([KEY_A, KEY_B]),
               "BONUSJUDGE_DATA_DIR": str(tmp_path / "data"),
               "BONUSJUDGE_MAX_COST_PER_KEY_USD": str(LIMIT)}
        with ServiceProcess(args, tmp_path, env=env) as svc, \
                httpx.Client(base_url=svc.url, timeout=60) as http:
            job = http.post("/v1/jobs", json={"items": [item(n) for n in range(40)]},
                            headers=auth(KEY_A))
            assert job.status_code == 202, job.text
            job_id = job.json()["id"]
            paused = wait_status(http, job_id, KEY_A, "paused")
            time.sleep(1.5)  # every chunk has stopped, and the spend is in the store
            paused = http.get(f"/v1/jobs/{job_id}", headers=auth(KEY_A)).json()
            # Its status says paused (it said "queued": a poller for done or failed waited
            # forever), and the client's wait() returns it.
            assert paused["paused"] and paused["status"] == "paused", paused
            assert 0 < paused["done"] < 40 and paused["unscored"] == 0
            assert "max_cost_per_key_usd" in paused["detail"]
            with JudgeClient(svc.url, api_key=KEY_A) as client:
                waited = client.wait(job_id, poll_interval=0.1, timeout=30)
            assert (waited.status, waited.done, waited.detail) == (
                "paused", paused["done"], paused["detail"])
            refused = http.post("/v1/grade", json=item(100), headers=auth(KEY_A))
            assert refused.status_code == 429, refused.text
            error = refused.json()["error"]
            assert error["type"] == "budget_exhausted"
            assert f"max_cost_per_key_usd ${LIMIT:g}" in error["message"]
            assert 0 < int(refused.headers["Retry-After"]) <= 86_400
            # B's day is its own.
            b = http.post("/v1/grade", json=item(200), headers=auth(KEY_B))
            assert b.status_code == 200 and b.json()["status"] == "scored", b.text
            b_job = http.post("/v1/jobs", json={"items": [item(n) for n in range(201, 203)]},
                              headers=auth(KEY_B)).json()
            assert wait_status(http, b_job["id"], KEY_B, "done")["scored"] == 2
        # The same SQLite store, the same limit: A's spend is still there.
        with ServiceProcess(args, tmp_path, env=env) as svc, \
                httpx.Client(base_url=svc.url, timeout=60) as http:
            # The restart lets A's job try again (the limit may have been raised): it sends at
            # most what still fits under the day's limit, and pauses again.
            status = wait_status(http, job_id, KEY_A, "paused")
            again = http.post("/v1/grade", json=item(101), headers=auth(KEY_A))
            assert again.status_code == 429, again.text
            assert again.json()["error"]["type"] == "budget_exhausted"
            status = http.get(f"/v1/jobs/{job_id}", headers=auth(KEY_A)).json()
            assert status["paused"] and status["done"] < 40 and status["unscored"] == 0, status
            assert status["status"] == "paused", status
            assert http.post("/v1/grade", json=item(300), headers=auth(KEY_B)).status_code == 200
            time.sleep(1.5)  # the last spend reaches the store
        total = judge.stats()
    # Every request of A was counted in the store, over both runs, and within A's limit.
    store = JobStore(tmp_path / "data" / JOBS_DB)
    try:
        spent, requests = store.spend.key_day(hash_key(KEY_A), utc_day(time.time()))
        _, b_requests = store.spend.key_day(hash_key(KEY_B), utc_day(time.time()))
    finally:
        store.close()
    assert b_requests == 8  # B's four items, two requests each
    assert requests == total.requests - b_requests > 0
    assert spent <= LIMIT, spent
    priced = (total.prompt_tokens * 0.15 + total.completion_tokens * 0.6) / 1e6
    assert spent < priced


def test_bonusjudge_serve_refuses_an_infinite_cost_cap(tmp_path: Path) -> None:
    # A key budget of inf (or nan) was a budget that never stops anything: a bad setting now.
    for value in ("inf", "nan"):
        started = run_cli(["serve", "--port", str(free_port()),
                           "--cache-dir", str(tmp_path / "cache")],
                          env={"BONUSJUDGE_MAX_COST_PER_KEY_USD": value}, timeout=120)
        assert started.returncode == 2, started.stderr[-2000:]
        assert "invalid setting max_cost_per_key_usd: Input should be a finite number" in \
            started.stderr, started.stderr[-2000:]
    # A job's max_cost of inf was a job without a cap: 422 naming the field, nothing stored.
    with ServiceProcess(["--cache-dir", str(tmp_path / "cache")], tmp_path, ready=False,
                        env={"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}) as svc, \
            httpx.Client(base_url=svc.url, timeout=60) as http:
        body = json.dumps({"items": [item(1)], "max_cost": "X"}).replace('"X"', "1e999")
        answers = [
            http.post("/v1/jobs", content=body, headers={"content-type": "application/json"}),
            http.post("/v1/jobs?max_cost=inf", content=json.dumps(item(1)) + "\n",
                      headers={"content-type": "application/x-ndjson"}),
        ]
        for answer in answers:
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"]["field"] == "max_cost", answer.text
            assert "finite number" in answer.json()["error"]["message"], answer.text
        assert http.get("/v1/jobs").json()["jobs"] == []
