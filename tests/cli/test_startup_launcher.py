"""The service's launcher (``api.launcher``), held in its loading state on purpose.

A real uvicorn server serves a ``Launcher`` whose build waits for the test: while it waits,
``/healthz`` answers, ``/readyz`` says what is loading, and other requests are held; once built,
the app's lifespan runs and every request reaches the app. A build that fails is reported and
refused with 503; a stop that arrives while loading never starts the app; the stop hooks reach
the app's job manager. Ordering and content only: no figure here depends on the machine's speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from api.launcher import GracefulServer, Launcher
from core.errors import ConfigError
from core.processes import free_port


@dataclass
class Jobs:
    """Stands where the app keeps its ``JobManager``: records the launcher's stop hooks."""

    calls: list[str] = field(default_factory=list)

    def begin_stop(self) -> None:
        self.calls.append("begin_stop")

    def abandon(self) -> None:
        self.calls.append("abandon")


def small_app(events: list[str]) -> Starlette:
    """An app with a lifespan that records itself, a readiness route and a work route."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    async def readyz(request: Request) -> JSONResponse:
        return JSONResponse({"ready": True, "checks": {}, "degraded": False})

    async def work(request: Request) -> JSONResponse:
        return JSONResponse({"served_by": "app"})

    app = Starlette(routes=[Route("/readyz", readyz), Route("/v1/work", work)],
                    lifespan=lifespan)
    app.state.jobs = Jobs()
    return app


class Running:
    """A launcher served by a real uvicorn server in a thread."""

    def __init__(self, build: Callable[[], Any], *, hold_seconds: float = 30.0) -> None:
        self.failures: list[BaseException] = []
        self.launcher = Launcher(build, on_failure=self.failures.append,
                                 hold_seconds=hold_seconds)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.launcher, host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
        self.server = GracefulServer(config, launcher=self.launcher, grace=5.0)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Running:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive()

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive():
            self.stop()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def test_while_the_app_loads_healthz_answers_readyz_says_what_and_requests_wait(
    pool: ThreadPoolExecutor,
) -> None:
    release = threading.Event()
    events: list[str] = []

    def build() -> Starlette:
        assert release.wait(60)
        return small_app(events)

    with Running(build) as running:
        assert httpx.get(f"{running.url}/healthz").json() == {"status": "ok"}
        answer = httpx.get(f"{running.url}/readyz")
        assert answer.status_code == 503
        body = answer.json()
        assert body["ready"] is False and not body["checks"]["service"]["ok"]
        assert body["checks"]["service"]["detail"].startswith("loading: the service")
        held: Future[httpx.Response] = pool.submit(httpx.get, f"{running.url}/v1/work",
                                                   timeout=60)
        time.sleep(0.3)
        assert not held.done()  # waits for the app rather than failing
        assert events == []
        release.set()
        assert held.result(60).json() == {"served_by": "app"}
        assert events == ["startup"]  # the app's lifespan ran before it served
        assert httpx.get(f"{running.url}/readyz").json()["ready"] is True
        running.stop()
    assert events == ["startup", "shutdown"]
    assert running.failures == []


def test_a_request_held_too_long_gets_503_with_retry_after() -> None:
    release = threading.Event()
    with Running(lambda: release.wait(60) and small_app([]), hold_seconds=0.2) as running:
        answer = httpx.get(f"{running.url}/v1/work")
        assert answer.status_code == 503
        assert int(answer.headers["retry-after"]) >= 1
        error = answer.json()["error"]
        assert error["type"] == "unavailable" and "still starting" in error["message"]
        release.set()


def test_a_build_that_fails_is_reported_and_refused() -> None:
    def build() -> Starlette:
        raise ConfigError("the job store cannot be opened: disk on fire", field="data_dir")

    with Running(build) as running:
        deadline = time.monotonic() + 30
        while not running.failures:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert isinstance(running.failures[0], ConfigError)
        body = httpx.get(f"{running.url}/readyz").json()
        assert body["checks"]["service"]["detail"].startswith("failed to start: ConfigError")
        answer = httpx.get(f"{running.url}/v1/work")
        assert answer.status_code == 503 and answer.json()["error"]["type"] == "unavailable"
        assert "disk on fire" not in answer.text  # details stay in the log


def test_a_stop_while_loading_never_starts_the_app() -> None:
    release = threading.Event()
    events: list[str] = []
    with Running(lambda: release.wait(60) and small_app(events)) as running:
        running.server.should_exit = True
        time.sleep(0.3)
        release.set()
        running.thread.join(30)
        assert not running.thread.is_alive()
    assert events == []


def test_the_stop_hooks_reach_the_app_job_manager() -> None:
    app = small_app([])
    with Running(lambda: app) as running:
        deadline = time.monotonic() + 30
        while httpx.get(f"{running.url}/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        running.launcher.begin_stop()  # from the signal handler: scheduled on the loop
        running.launcher.abort()  # the immediate exit's thread: called at once
        deadline = time.monotonic() + 10
        while "begin_stop" not in app.state.jobs.calls:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert sorted(app.state.jobs.calls) == ["abandon", "begin_stop"]  # each once
