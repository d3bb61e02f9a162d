"""Per-key quotas: queued or running jobs, unfinished items and stored bytes; 429 beyond them.

Every test runs on both job stores (SQLite and Postgres: ``jobs_url`` in conftest.py).
"""



import asyncio
import base64
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from judge.config import JudgeConfig
from judge.engine import Grader
from judge.providers.base import Completion
from judge.providers.fake import FakeProvider
from tests.helpers.engine import levin_item, plain_answer

KEY_A = "key-a-0123456789"
KEY_B = "key-b-9876543210"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def item(n: int, **extra: Any) -> dict[str, Any]:
    return levin_item(n, **{"bonus_points": ["Levin feels humiliated"], **extra})


class Held:
    """A judge that answers only once ``gate`` is set: submitted jobs stay unfinished."""

    def __init__(self) -> None:
        self.inner = FakeProvider(handler=plain_answer)
        self.gate = threading.Event()

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        while not self.gate.is_set():
            await asyncio.sleep(0.005)
        return await self.inner.complete(
            messages, response_model, config, validation_context=validation_context
        )


@pytest.fixture
def held() -> Held:
    return Held()


@pytest.fixture
def client_for(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader], held: Held,
    jobs_url: str | None,
) -> Callable[..., Iterator[TestClient]]:
    """A client of the service over the held judge, with these limits (iterate to open it)."""

    def serve(**limits: Any) -> Iterator[TestClient]:
        grader = make_grader(held, metrics=("coverage", "defects"))
        app = make_app(grader, drain_timeout=5.0, api_keys=[KEY_A, KEY_B], jobs_url=jobs_url,
                       **limits)
        with TestClient(app) as client:
            try:
                yield client
            finally:
                held.gate.set()  # let the held jobs finish, so shutdown does not wait on them

    return serve


def submit(client: TestClient, key: str, items: list[dict[str, Any]]) -> Any:
    return client.post("/v1/jobs", json={"items": items}, headers=auth(key))


def test_jobs_per_key(client_for: Callable[..., Iterator[TestClient]]) -> None:
    for client in client_for(max_jobs_per_key=2):
        first = submit(client, KEY_A, [item(1)])
        assert submit(client, KEY_A, [item(2)]).status_code == 202
        over = submit(client, KEY_A, [item(3)])
        assert over.status_code == 429
        error = over.json()["error"]
        assert error["type"] == "quota_exceeded"
        assert "at most 2 queued or running jobs" in error["message"]
        assert "this key has 2" in error["message"]
        assert int(over.headers["Retry-After"]) >= 1
        # Multiple-choice jobs count towards the same limit.
        mcq = {"items": [{"id": "q1", "choices": ["a", "b"], "answer": "A", "response": "[[A]]"}]}
        assert client.post("/v1/mcq/jobs", json=mcq, headers=auth(KEY_A)).status_code == 429
        # Another key has its own quota; a cancelled job frees a place.
        assert submit(client, KEY_B, [item(4)]).status_code == 202
        assert client.delete(f"/v1/jobs/{first.json()['id']}", headers=auth(KEY_A)).is_success
        assert submit(client, KEY_A, [item(5)]).status_code == 202


def test_calibration_runs_are_held_to_the_job_limit(
    tmp_path: Path, client_for: Callable[..., Iterator[TestClient]]
) -> None:
    for client in client_for(max_jobs_per_key=1):
        assert submit(client, KEY_A, [item(1)]).status_code == 202
        body = {"set": "example", "metrics": ["rouge_l"], "resamples": 100}
        over = client.post("/v1/calibrate", json=body, headers=auth(KEY_A))
        assert over.status_code == 429, over.text
        assert over.json()["error"]["type"] == "quota_exceeded"
        reports = tmp_path / "data" / "reports"
        assert not reports.exists() or not any(reports.iterdir())  # nothing left behind


def test_unfinished_items_per_key(client_for: Callable[..., Iterator[TestClient]]) -> None:
    for client in client_for(max_queued_items_per_key=10):
        assert submit(client, KEY_A, [item(n) for n in range(6)]).status_code == 202
        over = submit(client, KEY_A, [item(n) for n in range(10, 15)])
        assert over.status_code == 429
        error = over.json()["error"]
        assert error["type"] == "quota_exceeded" and error["field"] == "items"
        assert "at most 10 unfinished items" in error["message"]
        assert "this key has 6 queued and the job adds 5" in error["message"]
        assert "Retry-After" in over.headers
        # Invalid items are finished at once: they do not count (6 + 4 is the limit).
        assert submit(client, KEY_A, [item(20), item(21), {"id": "bad"}, {"id": "bad2"},
                                      item(22), item(23)]).status_code == 202
        assert submit(client, KEY_A, [item(30)]).status_code == 429
        assert submit(client, KEY_B, [item(n) for n in range(40, 50)]).status_code == 202


def test_stored_bytes_per_key(client_for: Callable[..., Iterator[TestClient]], held: Held) -> None:
    held.gate.set()  # jobs may finish: stored bytes count whatever the job's status
    for client in client_for(max_stored_bytes_per_key=20_000):
        small = submit(client, KEY_A, [item(1)])
        assert small.status_code == 202
        # Random bytes as base64 hardly compress: about 45 kB stored.
        noise = base64.b64encode(random.Random(0).randbytes(45_000)).decode()
        over = submit(client, KEY_A, [item(2, context=noise)])
        assert over.status_code == 429
        error = over.json()["error"]
        assert error["type"] == "quota_exceeded"
        assert "at most 20000 stored bytes" in error["message"]
        assert "this key's jobs keep" in error["message"]
        assert "Retry-After" not in over.headers  # waiting alone frees nothing
        assert submit(client, KEY_B, [item(3)]).status_code == 202
