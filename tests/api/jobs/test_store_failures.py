"""A job store that fails for a while (a full disk, a lost database): jobs go on once it works
again, and callers get 503 with Retry-After, never 500 and never a job stuck in `running`.

The failures are what the store raises (SQLAlchemy's errors wrapping the driver's); every test
runs on both job stores (SQLite and Postgres: ``jobs_url`` in conftest.py).
"""

from __future__ import annotations

import errno
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

import api.jobs.worker
from api.errors import store_cause
from api.jobs import JobStore
from api.jobs.schema import GRADE
from api.services import grade_jobs
from judge.engine import Grader


def disk_full() -> OperationalError:
    """What the store raises when SQLite finds its disk full."""
    return OperationalError("INSERT INTO results ...", None,
                            sqlite3.OperationalError("database or disk is full"))


def item(n: int) -> dict[str, Any]:
    return {"id": f"it-{n}", "question": "How does Levin feel?",
            "reference": "He feels humiliated.", "bonus_points": ["Levin feels humiliated"],
            "response": f"Levin is humiliated ({n})."}


@pytest.fixture
def make_client(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader], jobs_url: str | None
) -> Callable[..., TestClient]:
    """A client of the service over the fake judge (no cache), not yet opened:
    ``make_client(lease_seconds=2.0)``."""

    def build(lease_seconds: float = 2.0) -> TestClient:
        grader = make_grader(metrics=("coverage", "defects"), cache=False)
        return TestClient(make_app(grader, lease_seconds=lease_seconds, jobs_url=jobs_url))

    return build


def wait_status(client: TestClient, job_id: str, wanted: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if status.get("status") == wanted:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def test_a_store_that_fails_for_a_while_does_not_end_the_job(make_client, monkeypatch) -> None:
    monkeypatch.setattr(api.jobs.worker, "STORE_RETRY_DELAYS", (0.01, 0.01))
    real = JobStore.save_results
    failures = {"left": 6}  # more than one save's retries: the job must survive a release

    def flaky(self: JobStore, *args: Any, **kwargs: Any) -> int:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise disk_full()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(JobStore, "save_results", flaky)
    with make_client() as client:
        job = client.post("/v1/jobs", json={"items": [item(n) for n in range(5)]}).json()
        status = wait_status(client, job["id"], "done")
    assert (status["done"], status["scored"]) == (5, 5)
    assert failures["left"] == 0


def test_a_process_reclaims_its_own_lapsed_lease(make_client, monkeypatch) -> None:
    """A release that failed (the disk was full) leaves the job leased to this process and not
    running here: once the lease lapses, this process takes it up again, no restart needed."""
    # A short lease: the test waits for it to lapse (still held at 0.3 s, when it is checked).
    with make_client(lease_seconds=0.8) as client:
        manager = client.app.state.jobs  # type: ignore[attr-defined]
        real_release = JobStore.release
        monkeypatch.setattr(JobStore, "release", lambda self, job_id, token, lo=None: (
            _ for _ in ()).throw(disk_full()))
        manager.register(GRADE, _fail_store, yields=True)
        job = client.post("/v1/jobs", json={"items": [item(1)]}).json()
        time.sleep(0.3)
        row = manager.store.get(job["id"])
        assert row["status"] in ("queued", "running")
        assert manager.store.holders(job["id"]) == {manager.token: 1}
        monkeypatch.setattr(JobStore, "release", real_release)
        monkeypatch.undo()  # the store works again
        budgets = client.app.state.budgets  # type: ignore[attr-defined]
        manager.register(GRADE, grade_jobs.grade_runner(budgets), yields=True)  # and the runner
        status = wait_status(client, job["id"], "done", timeout=30)
    assert status["scored"] == 1


async def _fail_store(manager: Any, job_id: str, row: Any) -> None:
    raise disk_full()


@pytest.mark.parametrize("failure", ["driver", "pool"])
def test_submitting_to_a_failing_store_is_503_with_retry_after(
    tmp_path, make_client, monkeypatch, jobs_url, failure
) -> None:
    where = jobs_url or str(tmp_path)

    def full(self: JobStore, **kwargs: Any) -> None:
        if failure == "pool":  # every connection busy for pool_timeout seconds
            raise PoolTimeout(f"QueuePool limit reached, connection timed out ({where})")
        raise OperationalError(f"INSERT INTO jobs ... {where}", {"owner": where},
                               sqlite3.OperationalError(f"database or disk is full: {where}"))

    with make_client() as client:
        monkeypatch.setattr(JobStore, "create", full)
        answer = client.post("/v1/jobs", json={"items": [item(1)]})
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "10"
    error = answer.json()["error"]
    assert error["type"] == "store_unavailable"
    # The message names the cause (it said "e.g. its disk is full" for every failure).
    says = {"driver": "the sqlite job store is full: its disk",
            "pool": "the job store is busy: no connection"}[failure]
    assert error["message"].startswith(says), error
    # No SQL, no path, no database URL (with its password) reaches the client.
    assert where not in answer.text and "INSERT" not in answer.text


def sqlite_lock_error(tmp_path: Path) -> sqlite3.OperationalError:
    """What SQLite raises for a write while another connection holds the write lock."""
    holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    writer = sqlite3.connect(tmp_path / "locked.db", isolation_level=None, timeout=0)
    try:
        writer.execute("INSERT INTO t VALUES (1)")
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        writer.close()
        holder.close()
    raise AssertionError("the write was not refused")


def sqlite_open_error(tmp_path: Path) -> sqlite3.OperationalError:
    """What SQLite raises for a file it cannot open (its folder is missing)."""
    try:
        sqlite3.connect(tmp_path / "missing" / "jobs.sqlite3").execute("SELECT 1")
    except sqlite3.OperationalError as exc:
        return exc
    raise AssertionError("the file was opened")


def sqlite_io_error() -> sqlite3.OperationalError:
    """What SQLite raises for a write past the process's file-size limit (EFBIG).

    Its code as ``bonusjudge serve`` under ``RLIMIT_FSIZE`` got it (``test_rel_full_store``).
    """
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorcode = 778  # SQLITE_IOERR_WRITE
    return error


def wrapped(error: BaseException) -> OperationalError:
    """``error`` as SQLAlchemy raises it (the driver's error in ``orig``)."""
    return OperationalError("INSERT INTO jobs ...", None, error)  # type: ignore[arg-type]


def test_each_cause_of_a_store_failure_is_named(tmp_path: Path) -> None:
    cases: list[tuple[BaseException, str, str]] = [
        (wrapped(sqlite_lock_error(tmp_path)), "locked", "the sqlite job store is locked"),
        (wrapped(sqlite3.OperationalError("database is locked")), "locked",
         "the sqlite job store is locked"),
        (disk_full(), "full", "the sqlite job store is full"),
        (wrapped(OSError(errno.ENOSPC, "No space left on device")), "full",
         "the job store is full"),
        (wrapped(sqlite_open_error(tmp_path)), "unreachable",
         "the sqlite job store cannot be opened"),
        (PoolTimeout("QueuePool limit reached"), "busy", "the job store is busy"),
        (wrapped(psycopg.OperationalError("connection failed: Connection refused")),
         "unreachable", "the postgres job store cannot be reached"),
        (wrapped(psycopg.errors.AdminShutdown("terminating connection")), "unreachable",
         "the postgres job store cannot be reached"),
        (wrapped(psycopg.errors.DiskFull("could not extend file")), "full",
         "the postgres job store is full"),
        (wrapped(psycopg.errors.LockNotAvailable("could not obtain lock")), "busy",
         "the postgres job store is busy"),
        (wrapped(sqlite_io_error()), "io",
         "the sqlite job store could not write its file (disk I/O error)"),
        (wrapped(sqlite3.OperationalError("no such table: jobs")), "failing",
         "the sqlite job store cannot be written right now"),
    ]
    for error, cause, says in cases:
        got, sentence = store_cause(error)
        assert (got, sentence.startswith(says)) == (cause, True), (error, got, sentence)
        assert "disk" not in sentence or cause in ("full", "io"), sentence


def test_a_value_the_store_cannot_keep_is_the_callers_error(make_client, jobs_url) -> None:
    with make_client() as client:
        # An id naming no job (a NUL byte: Postgres text cannot hold one) is simply unknown.
        for path in ("/v1/jobs/%00", "/v1/jobs/a%00b/results", "/v1/reports/%00"):
            assert client.get(path).status_code == 404, path
        # An item id with NUL is that item's error on both stores (Postgres used to refuse the
        # whole upload with a 422 where SQLite took it): never a store outage (no 503).
        answer = client.post("/v1/jobs", json={"items": [item(2), {**item(1), "id": "it\u00001"}]})
        assert answer.status_code == 202, answer.text
        assert (answer.json()["total"], answer.json()["invalid"]) == (1, 1)
