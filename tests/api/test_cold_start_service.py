"""Cold start of the service (issue 13): requests and jobs that arrive while the encoder loads.

The start-up warm-up is held open deterministically: the app factory takes the warm-up loader,
and these tests inject one that waits for an event. Meanwhile a grading request that needs the
encoder gets 503 with ``Retry-After`` in the uniform error body (it used to race the warm-up's
first imports and end in a 500), and a job worker waits for the loader before grading (a job
resumed at start-up used to fail with an ``ImportError``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from judge.config import JudgeConfig
from judge.engine import Grader
from judge.loading import warm_up
from judge.providers.fake import FakeProvider

ITEM = {
    "id": "item-1",
    "question": "How does Levin feel after Kitty refuses him?",
    "reference": "He feels humiliated and hurt, and wants to go back to his estate.",
    "bonus_points": ["Levin feels humiliated and hurt", "He wants to return to his estate"],
    "response": "Levin is humiliated and longs for his estate.",
}
PAIRS = [{"response": "Levin feels hurt.", "reference": "He feels humiliated."}]


def wait_until(predicate: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_encoder_routes_answer_503_with_retry_after_until_the_warm_up_ends(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader],
) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow_warm_up(config: JudgeConfig) -> None:
        started.set()
        assert release.wait(120), "the test never released the warm-up"
        warm_up(config)

    grader = make_grader(metrics=("coverage", "rouge_l", "bertscore"))
    app = make_app(grader, warm_up=slow_warm_up)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert started.wait(10)
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["encoder"]["detail"].endswith("not loaded yet")
        for path, body in (
            ("/v1/grade", ITEM),
            ("/v1/grade/batch", {"items": [ITEM, {**ITEM, "id": "item-2"}]}),
            ("/v1/metrics", {"pairs": PAIRS, "metrics": ["rouge_l", "bertscore"]}),
        ):
            response = client.post(path, json=body)
            assert response.status_code == 503, (path, response.text)
            assert int(response.headers["retry-after"]) >= 1, path
            error = response.json()["error"]
            assert error["type"] == "unavailable" and "loading" in error["message"], path
            assert set(response.json()) == {"error"} and error["field"] is None, path

        # What needs no encoder is served during the warm-up.
        no_bert = {**ITEM, "judge": {"metrics": ["coverage", "rouge_l"]}}
        assert client.post("/v1/grade", json=no_bert).status_code == 200
        rouge_only = client.post("/v1/metrics", json={"pairs": PAIRS, "metrics": ["rouge_l"]})
        assert rouge_only.status_code == 200

        release.set()
        wait_until(lambda: client.get("/readyz").status_code == 200, "/readyz 200")
        graded = client.post("/v1/grade", json=ITEM)
        assert graded.status_code == 200, graded.text
        assert graded.json()["bertscore"]["f1"] > 0
        batch = client.post("/v1/grade/batch", json={"items": [ITEM]})
        assert batch.status_code == 200 and batch.json()["results"][0]["result"]["bertscore"]
        metrics = client.post("/v1/metrics", json={"pairs": PAIRS, "metrics": ["bertscore"]})
        assert metrics.status_code == 200 and metrics.json()["results"][0]["bertscore"]["f1"] > 0


def test_a_failed_warm_up_stops_gating(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    def broken(config: JudgeConfig) -> None:
        raise RuntimeError("no encoder here")

    grader = make_grader(metrics=("coverage", "rouge_l", "bertscore"))
    app = make_app(grader, warm_up=broken)
    with TestClient(app) as client:
        wait_until(lambda: app.state.warmup.error is not None, "the warm-up to fail", 10)
        detail = client.get("/readyz").json()["checks"]["encoder"]["detail"]
        assert "failed to load" in detail and "no encoder here" in detail
        assert app.state.warmup.loading is False  # requests now load (or fail) on their own


class HeldPrepare(Grader):
    """A grader whose ``prepare`` (the warm-up loader) waits until the test releases it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.prepared: list[JudgeConfig | None] = []

    async def prepare(self, config: JudgeConfig | None = None) -> None:
        self.entered.set()
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        self.prepared.append(config)
        await super().prepare(config)


def test_job_worker_waits_for_the_warm_up_before_grading(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(metrics=("coverage", "defects", "rouge_l"), cls=HeldPrepare)
    assert isinstance(grader, HeldPrepare)
    provider = grader.caller.provider
    assert isinstance(provider, FakeProvider)
    app = make_app(grader)
    items = [{**ITEM, "id": f"j{i}", "response": f"Levin is humiliated ({i})."} for i in range(3)]
    with TestClient(app) as client:
        submitted = client.post("/v1/jobs", json={"items": items})
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        assert grader.entered.wait(10), "the job worker graded without waiting for the warm-up"
        time.sleep(0.2)  # held: nothing may be graded meanwhile
        status = client.get(f"/v1/jobs/{job_id}").json()
        assert status["done"] == 0 and status["status"] in ("queued", "running"), status
        assert provider.calls == []
        grader.release.set()
        wait_until(
            lambda: client.get(f"/v1/jobs/{job_id}").json()["status"] == "done", "the job", 30
        )
        status = client.get(f"/v1/jobs/{job_id}").json()
    assert status["done"] == 3 and status["scored"] == 3, status
    assert grader.prepared and grader.prepared[0] is not None
    assert grader.prepared[0].config_hash() == grader.config.config_hash()
