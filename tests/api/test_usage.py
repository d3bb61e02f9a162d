"""``GET /v1/usage``: each API key sees its own provider requests, tokens, items and jobs, and
never another key's (issue 31.5, second bullet; counted as issue 31.3 asks)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from bonusjudge_client import JudgeClient
from judge.engine import Grader
from judge.providers.fake import FakeProvider
from tests.helpers.engine import plain_answer

KEYS = {"a": "usage-key-a", "b": "usage-key-b"}


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def item(n: int) -> dict[str, Any]:
    return {
        "question": "How does Levin feel?", "reference": "He feels humiliated.",
        "bonus_points": ["Levin feels humiliated"], "response": f"He is ashamed ({n}).",
    }


def test_each_key_sees_its_own_usage_only(make_app: Callable[..., FastAPI]) -> None:
    provider = FakeProvider(handler=plain_answer, prompt_tokens=100, completion_tokens=20)
    app = make_app(provider=provider, api_keys=list(KEYS.values()))
    with TestClient(app) as http:
        assert http.get("/v1/usage").status_code == 401
        for n in range(3):
            assert http.post("/v1/grade", json=item(n), headers=auth("a")).status_code == 200
        job = http.post("/v1/jobs", json={"items": [item(10)]}, headers=auth("b"))
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 30
        while http.get(f"/v1/jobs/{job.json()['id']}", headers=auth("b")).json()["status"] \
                != "done":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        a = http.get("/v1/usage", headers=auth("a")).json()
        b = http.get("/v1/usage", headers=auth("b")).json()
        # The client reads the same report, typed.
        with JudgeClient("http://testserver", api_key=KEYS["a"], http_client=http) as client:
            assert client.usage().model_dump(mode="json") == a
    # Two judge calls per item (coverage, defects), each one request of 100 + 20 tokens.
    assert (a["provider_requests"], a["prompt_tokens"], a["completion_tokens"]) == (6, 600, 120)
    assert (a["items"], a["scored"], a["cache_hits"]) == (3, 3, 0)
    assert a["jobs"] == {"queued": 0, "running": 0, "paused": 0, "done": 0, "cancelled": 0,
                         "failed": 0}
    assert (b["provider_requests"], b["prompt_tokens"], b["items"]) == (2, 200, 1)
    assert b["jobs"]["done"] == 1 and sum(b["jobs"].values()) == 1
    assert len(provider.calls) == a["provider_requests"] + b["provider_requests"]


def test_the_items_of_a_refused_request_are_refused_not_unscored(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    # A request answered with an error gave no grade; its items were counted as unscored.
    provider = FakeProvider(handler=plain_answer, prompt_tokens=100, completion_tokens=20)
    request_usd = (100 * 0.15 + 20 * 0.6) / 1e6  # openai/gpt-4o-mini's price of one request
    grader = make_grader(provider, model="openai/gpt-4o-mini", metrics=("coverage", "defects"),
                         concurrency=1)
    app = make_app(grader, api_keys=list(KEYS.values()), max_cost_per_key_usd=12 * request_usd,
                   max_batch=8)
    with TestClient(app) as http:
        graded = http.post("/v1/grade", json=item(0), headers=auth("a"))
        assert graded.status_code == 200, graded.text
        # Refused before anything is graded: an invalid item (422), a batch over max_batch.
        assert http.post("/v1/grade", json={**item(1), "bonus_points": []},
                         headers=auth("a")).status_code == 422
        assert http.post("/v1/grade/batch", json={"items": [item(n) for n in range(9)]},
                         headers=auth("a")).status_code == 422
        # The key's budget runs out midway through a batch: 429, none of its six items graded.
        batch = http.post("/v1/grade/batch", json={"items": [item(n) for n in range(10, 16)]},
                          headers=auth("a"))
        assert batch.status_code == 429, batch.text
        assert batch.json()["error"]["type"] == "budget_exhausted"
        a = http.get("/v1/usage", headers=auth("a")).json()
        b = http.get("/v1/usage", headers=auth("b")).json()
        with JudgeClient("http://testserver", api_key=KEYS["a"], http_client=http) as client:
            typed = client.usage()
    # It said 7 items, the batch's among them as scored or unscored (as far as each got).
    assert (a["items"], a["scored"], a["unscored"], a.get("refused")) == (1, 1, 0, 6), a
    assert typed.model_dump(mode="json") == a
    assert a["provider_requests"] == len(provider.calls)  # every request sent is billed
    assert (b["items"], b["refused"]) == (0, 0)
    # The service's own counters agree (Prometheus: items graded, scored or unscored).
    assert (grader.stats.items, grader.stats.unscored, grader.stats.refused) == (1, 0, 6)
