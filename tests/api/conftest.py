"""Shared set-up of the service tests: a scripted judge, a grader and the app.

``make_app`` builds the service in-process over a ``FakeProvider`` (no LLM, no network), with
its cache and data folders under the test's ``tmp_path``, polling for jobs every 200 ms. Tests
that need another judge pass their own provider (``make_app(provider=...)``) or grader
(``make_app(make_grader(...))``); settings are keyword arguments (``make_app(api_keys=[...])``).
Open the app with ``TestClient(app)`` as a context manager: its lifespan then runs (and jobs do).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from api.app import create_app
from api.jobs import JOBS_DB, open_store
from api.settings import ServiceSettings
from bonusjudge_client.wire.vocab import MetricName
from judge.cache import JudgeCache
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.providers.base import Provider
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider
from tests.helpers.engine import plain_answer

METRICS: tuple[MetricName, ...] = ("coverage", "defects", "rouge_l")
"""The fake judge's metrics unless a test chooses others."""


@pytest.fixture
def fake_judge() -> Callable[[FakeCall], FakeOutput]:
    """The scripted judge's handler (for a ``FakeProvider`` a test builds itself)."""
    return plain_answer


@pytest.fixture(scope="session")
def empty_judge_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty judge-call cache folder, made once per session (per worker).

    Creating diskcache's database costs about 6 ms of CPU beyond opening one (13 against 6);
    ``make_grader`` copies this folder into each test's ``tmp_path`` instead. The cache's own
    opening (settings, privacy, damage) is tested in ``tests/judge``.
    """
    folder = tmp_path_factory.mktemp("judge-cache") / "cache"
    JudgeCache(folder).close()
    assert sorted(path.name for path in folder.iterdir()) == ["cache.db"]  # no journal left
    return folder


@pytest.fixture
def make_grader(tmp_path: Path, empty_judge_cache: Path) -> Callable[..., Grader]:
    """Build a grader over the fake judge (or ``provider``), cached under ``tmp_path/cache``.

    ``make_grader(provider=None, *, cache=True, cls=Grader, breaker=None,
    cache_scope="shared", sleep=None, **judge)``: ``judge`` are ``JudgeConfig`` fields (default
    model ``fake/judge`` and ``METRICS``); ``cache=False`` leaves the grader without a cache. A
    cache folder the test has not made itself starts as a copy of ``empty_judge_cache``.
    """

    def build(
        provider: Provider | None = None,
        *,
        cache: bool = True,
        cls: type[Grader] = Grader,
        **options: Any,
    ) -> Grader:
        grader_options = {
            key: options.pop(key) for key in ("breaker", "cache_scope", "sleep") if key in options
        }
        config = JudgeConfig(**{"model": "fake/judge", "metrics": METRICS, **options})
        folder = tmp_path / "cache"
        if cache and not folder.exists():
            shutil.copytree(empty_judge_cache, folder)
        return cls(
            config,
            provider=provider if provider is not None else FakeProvider(handler=plain_answer),
            cache=JudgeCache(folder) if cache else None,
            **grader_options,
        )

    return build


@pytest.fixture(scope="session")
def migrated_jobs_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new SQLite job store at this code's schema, migrated once per session (per worker).

    Migrating a new store runs every Alembic revision (about 45 ms of CPU); ``make_app`` copies
    this file into each test's data folder instead, for the hundreds of services the tests
    build. The migrations themselves are tested in ``tests/api/jobs/test_migrations.py``.
    """
    folder = tmp_path_factory.mktemp("migrated-store")
    open_store(ServiceSettings(data_dir=folder)).close()
    assert sorted(path.name for path in folder.iterdir()) == [JOBS_DB]  # no WAL left behind
    return folder / JOBS_DB


@pytest.fixture
def make_app(
    tmp_path: Path, make_grader: Callable[..., Grader], migrated_jobs_db: Path
) -> Callable[..., FastAPI]:
    """Build the service: ``make_app(grader=None, *, provider=None, **options)``.

    ``options`` are ``ServiceSettings`` fields, and ``create_app``'s ``poll_seconds`` (0.2),
    ``lease_seconds`` (5), ``drain_timeout`` and ``warm_up``. Without a grader, one is built by
    ``make_grader(provider)``. A SQLite job store the test has not made itself starts as a copy
    of ``migrated_jobs_db``.
    """

    def build(
        grader: Grader | None = None, *, provider: Provider | None = None, **options: Any
    ) -> FastAPI:
        # Jobs start when submitted and when a chunk ends (the worker is woken), not at a poll;
        # an idle poll costs ~4 ms of CPU, 80 ms a second of each app's life at 50 ms.
        app_options: dict[str, Any] = {"poll_seconds": 0.2, "lease_seconds": 5.0}
        for key in ("poll_seconds", "lease_seconds", "drain_timeout", "warm_up"):
            if key in options:
                app_options[key] = options.pop(key)
        settings = ServiceSettings(
            cache_dir=tmp_path / "cache", data_dir=tmp_path / "data", **options
        )
        store = settings.resolved_data_dir() / JOBS_DB
        if settings.jobs_url is None and not store.exists():
            store.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(migrated_jobs_db, store)
        engine = grader if grader is not None else make_grader(provider)
        return create_app(settings, grader=engine, **app_options)

    return build
