"""Outages through the service: sync routes answer 503 with Retry-After while the judge's breaker
is open, and a finished job's unscored items can be graded again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from bonusjudge_client import ClientHTTPError, JudgeClient
from core.errors import JudgeOutputError, ProviderError
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeProvider, covering, defects
from judge.retry import CircuitBreaker
from judge.verdicts import DefectJudgement
from tests.helpers.engine import levin_item


def item(n: int) -> dict[str, Any]:
    return levin_item(n)


@pytest.fixture
def app_for(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> Callable[..., FastAPI]:
    """The service over ``provider`` (no retries), with ``breaker`` when given."""

    def build(provider: Any, breaker: CircuitBreaker | None = None) -> FastAPI:
        grader = make_grader(provider, metrics=("coverage", "defects"), retries=0, breaker=breaker)
        return make_app(grader)

    return build


def wait_done(client: TestClient, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if status["status"] in ("done", "failed", "cancelled"):
            return status
        time.sleep(0.02)
    raise AssertionError("job did not finish")


def test_sync_routes_answer_503_with_retry_after_while_the_breaker_is_open(
    app_for: Callable[..., FastAPI],
) -> None:
    down = ProviderError("503 from the provider", reason="provider_error", retryable=True,
                         status=503)
    healthy = threading.Event()

    def handler(call: FakeCall) -> Any:
        if not healthy.is_set():
            return down
        if call.response_model is DefectJudgement:
            return defects()
        return covering(1, n=2)

    breaker = CircuitBreaker(threshold=2, cooldown=0.3, max_cooldown=0.3)
    app = app_for(FakeProvider(handler=handler), breaker)
    with TestClient(app) as client:
        first = client.post("/v1/grade", json=item(1))
        assert first.status_code in (200, 503)  # its two failing calls open the breaker
        refused = client.post("/v1/grade", json=item(2))
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["type"] == "provider_outage" and "circuit breaker" in error["message"]
        batch = client.post("/v1/grade/batch", json={"items": [item(3), item(4)]})
        assert batch.status_code == 503 and "retry-after" in batch.headers
        healthy.set()  # the provider recovers; after the cool-down a probe closes the breaker
        time.sleep(0.35)
        ok = client.post("/v1/grade", json=item(5))
        assert ok.status_code == 200, ok.text
        assert ok.json()["status"] == "scored"


def test_retry_unscored_regrades_a_finished_jobs_unscored_items(
    app_for: Callable[..., FastAPI],
) -> None:
    refusing = {"on": True}
    calls: list[str] = []

    def handler(call: FakeCall) -> Any:
        if call.response_model is DefectJudgement:
            return defects()
        calls.append(call.user)
        if refusing["on"] and ("answer-2)" in call.user or "answer-3)" in call.user):
            return JudgeOutputError("I cannot help with that", reason="refusal")
        return covering(1, 2, n=2)

    app = app_for(FakeProvider(handler=handler))
    with TestClient(app) as http:
        client = JudgeClient(http_client=http)
        job = client.submit_job([item(n) for n in range(1, 6)])
        status = wait_done(http, job.id)
        assert (status["status"], status["scored"], status["unscored"]) == ("done", 3, 2)
        summary = client.summary(job.id)
        assert summary.bpc == 1.0 and summary.bpc_all == pytest.approx(6 / 10)

        refusing["on"] = False  # whatever made them fail is gone
        before = len(calls)
        # A refusal is the judge's answer to that prompt: not re-sent unless asked for.
        kept = client.retry_unscored(job.id)
        assert (kept.status, kept.unscored) == ("done", 2) and len(calls) == before
        assert kept.detail is not None and kept.detail.startswith("2 unscored item(s) not graded")
        queued = client.retry_unscored(job.id, include=["refusal"])
        assert queued.status in ("queued", "running", "done")
        status = wait_done(http, job.id)
        assert (status["status"], status["done"], status["scored"], status["unscored"]) == (
            "done", 5, 5, 0)
        assert len(calls) - before == 2  # only the two unscored items were asked again
        entries = list(client.results(job.id))
        assert sorted(e.id for e in entries if e.result) == [f"it-{n}" for n in range(1, 6)]
        assert all(e.result.status == "scored" for e in entries if e.result)
        assert client.summary(job.id).bpc_all == 1.0

        again = client.retry_unscored(job.id)  # nothing left to retry: still done
        assert again.status == "done" and again.unscored == 0
        with pytest.raises(ClientHTTPError) as missing:
            client.retry_unscored("f" * 32)
        assert missing.value.status == 404


def test_retry_unscored_refuses_a_running_job(app_for: Callable[..., FastAPI]) -> None:
    gate = threading.Event()

    class Slow:
        async def complete(self, messages: Any, response_model: Any, config: Any, **kw: Any):
            import asyncio

            while not gate.is_set():
                await asyncio.sleep(0.01)
            return await FakeProvider(handler=lambda call: defects()
                                      if call.response_model is DefectJudgement
                                      else covering(1, n=2)).complete(
                messages, response_model, config, **kw)

    app = app_for(Slow())
    with TestClient(app) as http:
        job = http.post("/v1/jobs", json={"items": [item(1)]}).json()
        answer = http.post(f"/v1/jobs/{job['id']}/retry-unscored")
        assert answer.status_code == 409
        assert answer.json()["error"]["type"] == "conflict"
        gate.set()
        wait_done(http, job["id"])
