"""The job store under test, on both engines: the SQLite file and a real Postgres database.

``jobs_url`` is parametrized: None (the default SQLite file in the service's data folder) and the
URL of a fresh database on the session's PostgreSQL (``postgres_database``, tests/conftest.py).
A test taking it, ``store_target`` or ``open_store`` runs once per engine; an app built with
``make_app(..., jobs_url=jobs_url)`` uses the same store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from api.jobs import JOBS_DB, JobStore


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
