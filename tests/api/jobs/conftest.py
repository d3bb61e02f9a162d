"""The job store under test, on both engines: the SQLite file and a real Postgres database.

``jobs_url`` is parametrized: None (the default SQLite file in the service's data folder) and the
URL of a fresh database on the session's PostgreSQL (``postgres_database``, tests/conftest.py).
A test taking it, ``store_target`` or ``open_store`` runs once per engine; an app built with
``make_app(..., jobs_url=jobs_url)`` uses the same store.

``replica`` builds ``bonusjudge serve`` replicas on one job store, as users start them, with a
short lease (``LEASE_SECONDS``) so that a replica's chunks are taken over soon. ``client`` is an
in-process service on the default store, and ``finished`` waits for one of its jobs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.jobs import JOBS_DB, JobStore
from tests.helpers.processes import ServiceProcess

LEASE_SECONDS = 3
"""The job lease of the replicas ``replica`` builds (30 s by default)."""


# The Postgres case starts the session's PostgreSQL server: the fast loop leaves it out.
@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.process)])
def jobs_url(request: pytest.FixtureRequest) -> str | None:
    """None (the SQLite file under ``tmp_path/data``) or a new Postgres database's URL."""
    if request.param == "sqlite":
        return None
    return str(request.getfixturevalue("postgres_database"))


@pytest.fixture
def store_target(jobs_url: str | None, tmp_path: Path) -> str | Path:
    """What ``JobStore`` opens for this test: the app's SQLite file, or the Postgres URL."""
    return jobs_url or tmp_path / "data" / JOBS_DB


@pytest.fixture
def open_store(store_target: str | Path) -> Iterator[Callable[..., JobStore]]:
    """Open a ``JobStore`` on ``store_target`` with ``JobStore``'s options (closed at the end)."""
    opened: list[JobStore] = []

    def open_(**options: Any) -> JobStore:
        store = JobStore(store_target, **options)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def replica(tmp_path: Path) -> Callable[..., ServiceProcess]:
    """Build (not start) a ``bonusjudge serve`` replica: ``replica(name, jobs_url, judge_url)``.

    It grades coverage and defects with the stand-in judge at ``judge_url`` (``--model
    openai/standin``), keeps its jobs at ``jobs_url`` and its cache in ``tmp_path/name``, and
    leases chunks for ``LEASE_SECONDS``; ``env`` adds ``BONUSJUDGE_*`` settings.
    """

    def build(
        name: str, jobs_url: str, judge_url: str, env: dict[str, str] | None = None
    ) -> ServiceProcess:
        folder = tmp_path / name
        folder.mkdir()
        return ServiceProcess(
            ["--jobs-url", jobs_url, "--model", "openai/standin", "--api-base", judge_url,
             "--metrics", "coverage,defects", "--cache-dir", str(folder / "cache")],
            folder,
            env={"BONUSJUDGE_JOB_LEASE_SECONDS": str(LEASE_SECONDS), **(env or {})},
        )

    return build


@pytest.fixture
def client(make_app: Callable[..., FastAPI]) -> Iterator[TestClient]:
    """An in-process service (``make_app``'s defaults) for the upload tests."""
    with TestClient(make_app()) as test_client:
        yield test_client


def _finished(client: TestClient, path: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while client.get(path).json()["status"] not in ("done", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return [json.loads(x) for x in client.get(f"{path}/results").text.splitlines()]


@pytest.fixture
def finished() -> Callable[[TestClient, str], list[dict[str, Any]]]:
    """``finished(client, job_path)``: wait (30 s at most) until the job ends; its results."""
    return _finished
