"""A calibration run costs what was asked, within the service's concurrency, and stops on DELETE.

Issue 31.3: ``POST /v1/calibrate`` with ``metrics=["coverage"]`` and ``retest`` made 84,052
provider requests for 10,000 items, defects calls included, up to 96 in flight against the
service's concurrency of 16 (each run built its own grader), and ``DELETE`` answered 405 while
3,943 more requests went out. Here the strict stand-in judge counts what the provider sees.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from calibration.sets import example_set_path
from judge.engine import Grader
from judge.providers.routing import RoutingProvider
from standins.openai_server import OpenAIStandIn

pytestmark = pytest.mark.process  # a stand-in judge on a loopback port

KEY_A, KEY_B = "calibrate-key-a", "calibrate-key-b"
CONCURRENCY = 4


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def upload(n: int, tag: str) -> list[dict[str, Any]]:
    """``n`` rated lines from the bundled example set, each with its own id and answer.

    Every answer differs, so no judge call is answered from another's cache entry.
    """
    text = example_set_path("example").read_text(encoding="utf-8")
    lines = [json.loads(raw) for raw in text.splitlines() if raw.strip()]
    out = []
    for index in range(n):
        line = dict(lines[index % len(lines)])
        line["id"] = f"{tag}-{index}"
        line["candidate"] = f"{line['candidate']} ({tag} {index})"
        out.append(line)
    return out


def wait_status(client: TestClient, job_id: str, key: str, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        status = str(client.get(f"/v1/calibrate/{job_id}", headers=auth(key)).json()["status"])
        if status not in ("queued", "running"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


@pytest.fixture
def service(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> Callable[[float], AbstractContextManager[tuple[TestClient, OpenAIStandIn]]]:
    """The service with two keys, its judge the stand-in at a concurrency of 4."""

    @contextmanager
    def start(latency: float) -> Iterator[tuple[TestClient, OpenAIStandIn]]:
        with OpenAIStandIn(latency=latency, record_requests=0) as srv:
            grader = make_grader(
                RoutingProvider(), model="openai/standin", api_base=srv.base_url,
                api_key="sk-standin", metrics=("coverage",), concurrency=CONCURRENCY,
            )
            app = make_app(grader, judge=grader.config, api_keys=[KEY_A, KEY_B],
                           lease_seconds=30.0)
            with TestClient(app, raise_server_exceptions=False) as client:
                yield client, srv

    return start


def test_calls_are_items_times_asked_metrics_within_the_services_concurrency(
    service: Callable[[float], AbstractContextManager[tuple[TestClient, OpenAIStandIn]]],
) -> None:
    """Two runs at once: one request per item (coverage only), one more with retest."""
    n = 24
    with service(0.05) as (client, srv):
        srv.reset_stats()
        plain = client.post("/v1/calibrate", headers=auth(KEY_A), json={
            "items": upload(n, "a"), "metrics": ["coverage"], "resamples": 100})
        retest = client.post("/v1/calibrate", headers=auth(KEY_B), json={
            "items": upload(n, "b"), "metrics": ["coverage"], "resamples": 100, "retest": True})
        assert plain.status_code == retest.status_code == 202, (plain.text, retest.text)
        assert wait_status(client, plain.json()["id"], KEY_A) == "done"
        assert wait_status(client, retest.json()["id"], KEY_B) == "done"
        stats = srv.stats()
    # coverage x items, and x2 for the retest: no defects call, no extraction (points given).
    assert stats.requests == n + 2 * n, stats
    assert stats.ok == stats.requests, stats.outcomes
    # Both runs share the service's one grader: never more in flight than its concurrency.
    assert stats.max_in_flight <= CONCURRENCY, stats


def test_delete_stops_a_run_and_its_provider_requests(
    service: Callable[[float], AbstractContextManager[tuple[TestClient, OpenAIStandIn]]],
) -> None:
    with service(0.3) as (client, srv):
        job = client.post("/v1/calibrate", headers=auth(KEY_A), json={
            "items": upload(60, "c"), "metrics": ["coverage"], "resamples": 100,
            "retest": True}).json()
        deadline = time.monotonic() + 60
        while srv.stats().requests < 2 * CONCURRENCY:
            assert time.monotonic() < deadline, srv.stats()
            time.sleep(0.02)
        # Another key cannot see it, let alone stop it.
        assert client.delete(f"/v1/calibrate/{job['id']}", headers=auth(KEY_B)).status_code == 404
        answer = client.delete(f"/v1/calibrate/{job['id']}", headers=auth(KEY_A))
        at_delete = srv.stats().requests
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "cancelled"
        time.sleep(2.0)
        after = srv.stats().requests
        assert after - at_delete <= 1, (at_delete, after)  # at most one already on its way
        assert at_delete < 120  # it was stopped well before its 120 calls
        status = client.get(f"/v1/calibrate/{job['id']}", headers=auth(KEY_A)).json()
        assert status["status"] == "cancelled" and status["report"] is None
