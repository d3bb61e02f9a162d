"""A job store that fails for a while (a full disk): jobs go on once it works again, and callers
get 503 with Retry-After, never 500 and never a job stuck in `running`."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import api.jobs.worker
from api.jobs import JobStore
from judge.engine import Grader


def item(n: int) -> dict[str, Any]:
    return {"id": f"it-{n}", "question": "How does Levin feel?",
            "reference": "He feels humiliated.", "bonus_points": ["Levin feels humiliated"],
            "response": f"Levin is humiliated ({n})."}


@pytest.fixture
def make_client(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> Callable[[], TestClient]:
    """A client of the service over the fake judge (no cache, 2 s leases), not yet opened."""

    def build() -> TestClient:
        grader = make_grader(metrics=("coverage", "defects"), cache=False)
        return TestClient(make_app(grader, lease_seconds=2.0))

    return build


def wait_status(client: TestClient, job_id: str, wanted: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if status.get("status") == wanted:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def test_a_store_that_fails_for_a_while_does_not_end_the_job(make_client, monkeypatch) -> None:
    monkeypatch.setattr(api.jobs.worker, "STORE_RETRY_DELAYS", (0.01, 0.01))
    real = JobStore.save_results
    failures = {"left": 6}  # more than one save's retries: the job must survive a release

    def flaky(self: JobStore, *args: Any, **kwargs: Any) -> int:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(JobStore, "save_results", flaky)
    with make_client() as client:
        job = client.post("/v1/jobs", json={"items": [item(n) for n in range(5)]}).json()
        status = wait_status(client, job["id"], "done")
    assert (status["done"], status["scored"]) == (5, 5)
    assert failures["left"] == 0


def test_a_process_reclaims_its_own_lapsed_lease(make_client, monkeypatch) -> None:
    """A release that failed (the disk was full) leaves the job leased to this process and not
    running here: once the lease lapses, this process takes it up again, no restart needed."""
    with make_client() as client:
        manager = client.app.state.jobs  # type: ignore[attr-defined]
        real_release = JobStore.release
        monkeypatch.setattr(JobStore, "release", lambda self, job_id, token: (_ for _ in ()).throw(
            sqlite3.OperationalError("database or disk is full")))
        monkeypatch.setattr(manager, "_grade_job", _fail_store)
        job = client.post("/v1/jobs", json={"items": [item(1)]}).json()
        time.sleep(0.3)
        row = manager.store.get(job["id"])
        assert row["status"] in ("queued", "running") and row["lease_owner"] == manager.token
        monkeypatch.setattr(JobStore, "release", real_release)
        monkeypatch.undo()  # the store and the runner work again
        status = wait_status(client, job["id"], "done", timeout=30)
    assert status["scored"] == 1


async def _fail_store(job_id: str, row: Any) -> None:
    raise sqlite3.OperationalError("database or disk is full")


def test_submitting_to_a_failing_store_is_503_with_retry_after(
    tmp_path, make_client, monkeypatch
) -> None:
    def full(self: JobStore, **kwargs: Any) -> None:
        raise sqlite3.OperationalError(f"database or disk is full: {self.path}")

    with make_client() as client:
        monkeypatch.setattr(JobStore, "create", full)
        answer = client.post("/v1/jobs", json={"items": [item(1)]})
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "10"
    error = answer.json()["error"]
    assert error["type"] == "store_unavailable"
    assert str(tmp_path) not in answer.text  # no server path reaches the client
