"""Retrying a job's unscored items is bounded: its reasons, its passes and the key's quotas.

Issue 31.3: 100 refusing items over 6 passes of ``POST /v1/jobs/{id}/retry-unscored`` cost
3,600 provider requests, and with quotas of 2 jobs / 150 items retries left a key 5 active
jobs and 181 unfinished items. Every test runs on both job stores.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from core.errors import JudgeOutputError, ProviderError
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.providers.base import Completion
from judge.providers.fake import FakeCall, FakeProvider, covering

KEY = "retry-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}


def item(n: int, tag: str = "it") -> dict[str, Any]:
    return {
        "id": f"{tag}-{n}",
        "question": "How does Levin feel?",
        "reference": "He feels humiliated and hurt.",
        "bonus_points": ["Levin feels humiliated"],
        "response": f"Levin is humiliated ({tag}-{n}).",
    }


class Judge:
    """Fails ``fail-*`` items with ``failure``, refuses ``refuse-*`` ones, holds ``held-*``.

    Items tagged ``held`` wait until ``gate`` is set, so their job stays active.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.gate = threading.Event()
        self.inner = FakeProvider(handler=self.answer)

    def answer(self, call: FakeCall) -> Any:
        self.calls.append(call.user)
        if "(fail-" in call.user:
            return ProviderError("502 from the provider", reason="provider_error",
                                 retryable=False, status=502)
        if "(refuse-" in call.user:
            return JudgeOutputError("I cannot help with that", reason="refusal")
        return covering(1, n=1)

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        if any("(held-" in m["content"] for m in messages):
            while not self.gate.is_set():
                await asyncio.sleep(0.005)
        return await self.inner.complete(
            messages, response_model, config, validation_context=validation_context
        )


@pytest.fixture
def judge() -> Judge:
    return Judge()


@pytest.fixture
def serve(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader], judge: Judge,
    jobs_url: str | None,
) -> Callable[..., Iterator[TestClient]]:
    """A client of the service over ``judge`` with these settings (iterate to open it)."""

    def start(**settings: Any) -> Iterator[TestClient]:
        grader = make_grader(judge, metrics=("coverage",), retries=0, cache=False)
        app = make_app(grader, drain_timeout=5.0, api_keys=[KEY], jobs_url=jobs_url, **settings)
        with TestClient(app) as client:
            try:
                yield client
            finally:
                judge.gate.set()

    return start


def wait_done(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
        if status["status"] not in ("queued", "running"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.02)


def submit(client: TestClient, items: list[dict[str, Any]]) -> str:
    answer = client.post("/v1/jobs", json={"items": items}, headers=AUTH)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def retry(client: TestClient, job_id: str, **body: Any) -> Any:
    return client.post(f"/v1/jobs/{job_id}/retry-unscored", json=body or None, headers=AUTH)


def test_refusals_are_not_re_sent_without_include(
    serve: Callable[..., Iterator[TestClient]], judge: Judge
) -> None:
    for client in serve():
        job = submit(client, [item(n, "refuse") for n in range(5)] + [item(0, "fail")])
        assert wait_done(client, job)["unscored"] == 6
        before = len(judge.calls)
        answer = retry(client, job)
        assert answer.status_code == 202, answer.text
        status = wait_done(client, job)
        # Only the provider failure went again; the five refusals stayed as they were.
        assert len(judge.calls) - before == 1
        assert status["unscored"] == 6 and status["detail"].startswith("5 unscored item(s)")
        before = len(judge.calls)
        assert retry(client, job, include=["refusal"]).status_code == 202
        wait_done(client, job)
        assert len(judge.calls) - before == 6
        bad = retry(client, job, include=["bored"])
        assert bad.status_code == 422 and bad.json()["error"]["field"].startswith("include")


def test_passes_are_bounded(serve: Callable[..., Iterator[TestClient]], judge: Judge) -> None:
    for client in serve(max_retry_passes=2):
        job = submit(client, [item(1), item(1, "fail")])
        wait_done(client, job)
        for _ in range(2):
            assert retry(client, job).status_code == 202
            assert wait_done(client, job)["unscored"] == 1
        calls = len(judge.calls)
        over = retry(client, job)
        assert over.status_code == 409, over.text
        error = over.json()["error"]
        assert error["type"] == "conflict"
        assert "at most 2 per job (max_retry_passes)" in error["message"]
        time.sleep(0.2)
        assert len(judge.calls) == calls  # nothing was sent
        assert wait_done(client, job)["status"] == "done"


def test_a_retry_counts_against_the_keys_quotas(
    serve: Callable[..., Iterator[TestClient]], judge: Judge
) -> None:
    for client in serve(max_jobs_per_key=2, max_queued_items_per_key=4):
        failed = submit(client, [item(n, "fail") for n in range(3)])
        assert wait_done(client, failed)["unscored"] == 3
        calls = len(judge.calls)
        submit(client, [item(0, "held"), item(1, "held")])  # active: 1 job, 2 items
        items = retry(client, failed)  # its 3 items again: 5 unfinished
        assert items.status_code == 429, items.text
        error = items.json()["error"]
        assert error["type"] == "quota_exceeded" and error["field"] == "items"
        assert "at most 4 unfinished items" in error["message"]
        assert "this key has 2 queued and the job adds 3" in error["message"]
        submit(client, [item(2, "held")])  # active: 2 jobs, 3 items
        jobs = retry(client, failed)  # a third active job
        assert jobs.status_code == 429, jobs.text
        assert "at most 2 queued or running jobs" in jobs.json()["error"]["message"]
        assert "Retry-After" in jobs.headers
        assert client.get(f"/v1/jobs/{failed}", headers=AUTH).json()["status"] == "done"
        judge.gate.set()
        deadline = time.monotonic() + 30
        while any(
            client.get(f"/v1/jobs?status={state}", headers=AUTH).json()["jobs"]
            for state in ("queued", "running")
        ):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert len(judge.calls) - calls == 3  # the held items; nothing of the refused retries
        assert retry(client, failed).status_code == 202  # within the quotas again
        assert wait_done(client, failed)["unscored"] == 3
