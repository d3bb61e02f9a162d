"""Fairness between API keys: a small job of one key is not queued behind another key's big ones.

Every test runs on both job stores (SQLite and Postgres: ``jobs_url`` in conftest.py).
"""



import re
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.jobs import JobItem, JobStore
from bonusjudge_client.wire.grading import GradeRequest
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider
from tests.helpers.engine import levin_item

KEY_A = "key-a-0123456789"
KEY_B = "key-b-9876543210"
NUMBER = re.compile(r"answer-(\d+)\b")


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def item(n: int) -> dict[str, Any]:
    # Every item differs (its answer number), so no judge call is a cache hit.
    return levin_item(n)


def wait_for(
    client: TestClient, key: str, job_id: str, predicate: Callable[[dict[str, Any]], bool],
    timeout: float = 60.0,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=auth(key)).json()
        if predicate(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"job never reached the expected state: {status}")
        time.sleep(0.05)  # each poll is a request through the app: CPU the jobs then lack


def test_small_job_of_another_key_finishes_while_big_ones_are_far_from_done(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader],
    fake_judge: Callable[[FakeCall], FakeOutput], jobs_url: str | None,
) -> None:
    grader = make_grader(
        # An asynchronous 5 ms per judge call: the jobs compete for the grader's slots.
        FakeProvider(handler=fake_judge, latency=0.005),
        metrics=("coverage", "defects"), concurrency=4,
    )
    with TestClient(make_app(grader, api_keys=[KEY_A, KEY_B], jobs_url=jobs_url)) as client:
        big = []
        # As many jobs as the process runs at once, of 16 chunks of 8 items. A's chunks are
        # claimed oldest job first, so its first job ends after ~32 items' time (4 chunks at
        # once, one item each); B's job starts when A's first chunk ends and is done after ~13:
        # A has then done ~50 items (as with 200-item jobs), far from half of theirs.
        for job in range(4):
            items = [item(1000 * (job + 1) + k) for k in range(128)]
            answer = client.post("/v1/jobs", json={"items": items}, headers=auth(KEY_A))
            assert answer.status_code == 202
            big.append(answer.json()["id"])
        small = client.post(
            "/v1/jobs", json={"items": [item(k) for k in range(5)]}, headers=auth(KEY_B)
        ).json()["id"]
        done = wait_for(client, KEY_B, small, lambda s: s["status"] == "done")
        assert done["done"] == 5 and done["scored"] == 5
        progress = [
            client.get(f"/v1/jobs/{job_id}", headers=auth(KEY_A)).json() for job_id in big
        ]
        # Key A's jobs are still far from done: B's job ran beside them, not after one of them.
        assert all(status["status"] != "done" for status in progress), progress
        assert sum(status["done"] for status in progress) < 256, progress
        # And A's jobs all finish, every item graded once (the one that made room resumed).
        for job_id in big:
            final = wait_for(client, KEY_A, job_id, lambda s: s["status"] == "done")
            assert final["done"] == final["scored"] == 128


def request(n: int) -> GradeRequest:
    return GradeRequest.model_validate(item(n))


def test_claim_prefers_the_owner_holding_fewest_jobs(
    open_store: Callable[..., JobStore],
) -> None:
    store = open_store()
    for n, owner in enumerate(["a", "a", "a", "b", "a", "c"]):
        store.create(
            job_id=f"{owner}{n}", owner=owner,
            items=[JobItem(0, "1", None, request(n), None)],
            overrides=None, config=None, lease_owner=None, lease_seconds=30.0,
        )
        time.sleep(0.002)  # distinct creation times
    def claim(token: str, limit: int) -> list[str]:
        return [chunk.job_id for chunk in store.claim(token, 30.0, limit)]

    # Oldest first would take a0, a1, a2; fairness takes one job of each owner first.
    assert claim("worker-1", 3) == ["a0", "b3", "c5"]
    # Then a (1 held) before b and c (1 held each)? All equal: the oldest, a1.
    assert claim("worker-2", 1) == ["a1"]
    # A second process sees the same counts: a holds 2, b and c 1 each, so b's and c's next
    # jobs would come first; they have none, so a's oldest free job (a2) is next, then a4.
    assert claim("worker-3", 5) == ["a2", "a4"]
    assert store.held_by_owner() == {"a": 4, "b": 1, "c": 1}
    assert store.waiting_owners(["grade"]) == set()
