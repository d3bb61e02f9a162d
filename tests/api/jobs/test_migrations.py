"""Migrations: an old SQLite file keeps its jobs; a new database (either engine) gets the schema
the code describes; several processes opening one new database at once migrate it once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from api.jobs import SCHEMA_REVISION, Chunk, JobStore, RetryPolicy
from api.jobs.codec import REQUESTS, RESULTS, pack
from api.jobs.schema import metadata
from api.jobs.sqlite import _use_wal
from core.errors import ConfigError
from tests.helpers.engine import numbered_request as request

# The schema of version 3 exactly as api/jobs/sqlite.py created it before the store moved to
# SQLAlchemy and Alembic (its _SCHEMA and _INDEXES, then PRAGMA user_version = 3): a file
# written by that code, which every release since must open with its jobs.
VERSION_3_DDL = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL DEFAULT 'grade',
    options TEXT NOT NULL DEFAULT '{}',
    owner TEXT NOT NULL,
    status TEXT NOT NULL,
    total INTEGER NOT NULL,
    invalid INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    scored INTEGER NOT NULL DEFAULT 0,
    unscored INTEGER NOT NULL DEFAULT 0,
    next_seq INTEGER NOT NULL DEFAULT 0,
    overrides TEXT NOT NULL,
    model TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    detail TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    run_started_at REAL,
    run_start_done INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_expires REAL NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    request_dict BLOB,
    result_dict BLOB
);
CREATE INDEX IF NOT EXISTS jobs_claimable ON jobs (status, created_at);
CREATE TABLE IF NOT EXISTS items (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    item_id TEXT,
    line INTEGER,
    request TEXT,
    error TEXT,
    result TEXT,
    status TEXT,
    seq INTEGER,
    PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_by_seq ON items (job_id, seq) WHERE seq IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, status);
PRAGMA user_version = 3;
"""


def result(n: int, status: str = "scored") -> str:
    return json.dumps({"id": f"it-{n}", "status": status, "coverage": {"covered": 1}})


def version_3_file(path: Path) -> dict[str, str]:
    """A database as version 3 wrote it: a grading job half done (compressed and text results,
    an invalid item, a pending one), a finished one with an unscored item, and a calibration
    run. Returns the stored result JSON by item id."""
    request_dict = request(0).model_dump_json().encode()
    result_dict = result(0).encode()
    dicts = {REQUESTS: request_dict, RESULTS: result_dict}
    conn = sqlite3.connect(path)
    conn.executescript(VERSION_3_DDL)
    jobs = [
        # id, kind, owner, status, total, invalid, done, scored, unscored, next_seq, bytes
        ("half", "grade", "owner-a", "running", 3, 1, 2, 1, 1, 3, 900),
        ("full", "grade", "owner-a", "done", 1, 0, 1, 0, 1, 1, 300),
        ("cal", "calibrate", "owner-b", "done", 16, 0, 16, 16, 0, 0, 0),
    ]
    for job_id, kind, owner, status, total, invalid, done, scored, unscored, seq, size in jobs:
        conn.execute(
            "INSERT INTO jobs (id, kind, options, owner, status, total, invalid, done, scored,"
            " unscored, next_seq, overrides, model, config_hash, created_at, updated_at,"
            " lease_owner, lease_expires, bytes, request_dict, result_dict) VALUES"
            " (?, ?, '{}', ?, ?, ?, ?, ?, ?, ?, ?, '{}', 'fake/judge', 'h', 100, 100, ?, ?, ?,"
            " ?, ?)",
            (job_id, kind, owner, status, total, invalid, done, scored, unscored, seq,
             "1234-dead" if status == "running" else None, 200.0 if status == "running" else 0,
             size, request_dict if kind == "grade" else None,
             result_dict if kind == "grade" else None),
        )
    stored = {"it-1": result(1), "it-3": result(3, "unscored"), "it-9": result(9, "unscored")}
    rows = [
        # A result compressed with the job's dictionary, finished first.
        ("half", 0, "it-1", 1, pack(request(1).model_dump_json(), dicts, REQUESTS), None,
         pack(stored["it-1"], dicts, RESULTS), "scored", 2),
        # An item rejected at submission: its entry came first.
        ("half", 1, "it-2", 2, None, pack('{"type":"invalid_input","message":"bad"}'), None,
         None, 1),
        # A result stored as text by version 2.
        ("half", 2, "it-3", 3, request(3).model_dump_json(), None, stored["it-3"], "unscored",
         3),
        # Still to grade.
        ("half", 3, "it-4", 4, pack(request(4).model_dump_json(), dicts, REQUESTS), None, None,
         None, None),
        ("full", 0, "it-9", None, pack(request(9).model_dump_json(), dicts, REQUESTS), None,
         pack(stored["it-9"], dicts, RESULTS), "unscored", 1),
    ]
    conn.executemany(
        "INSERT INTO items (job_id, idx, item_id, line, request, error, result, status, seq)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.commit()
    conn.close()
    return stored


def schema_differences(store: JobStore, *, version_3_file: bool = False) -> list[object]:
    """What ``api.jobs.schema`` says that the migrated database does not have (or vice versa)."""
    with store.db.read() as conn:
        found = compare_metadata(MigrationContext.configure(conn), metadata)
    if store.db.postgres:
        return list(found)

    def expected(diff: object) -> bool:
        if not isinstance(diff, list):
            return False
        kind, table, column = diff[0][0], diff[0][2], diff[0][3]
        # SQLite keeps version 3's declared types (TEXT request/error columns hold blobs; a
        # declared type is only an affinity there). And version 3's "id TEXT PRIMARY KEY" lets
        # SQLite store a NULL id (its rowid-table quirk); the store never writes one.
        return kind == "modify_type" or (
            version_3_file and (kind, table, column) == ("modify_nullable", "jobs", "id")
        )

    return [diff for diff in found if not expected(diff)]


def test_a_version_3_file_opens_with_every_job(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    stored = version_3_file(path)
    store = JobStore(path)
    try:
        # The jobs, as they were.
        half = store.get("half")
        assert half is not None
        assert (half["status"], half["done"], half["scored"], half["unscored"], half["next_seq"],
                half["bytes"]) == ("running", 2, 1, 1, 3, 900)
        # The job's lease is its chunk's now (4 items: one chunk); finished jobs' are done.
        assert store.holders("half") == {"1234-dead": 1}
        assert store.held("half", "1234-dead") == [Chunk("half", 0, 4)]
        assert store.held("full", "") == [] and store.holders("full") == {}
        assert store.get("cal", owner="owner-b", kind="calibrate") is not None
        # The result stream: finishing order, the invalid item first, both result encodings.
        lines = [json.loads(line) for _, line in store.entries("half", 0, 3, 10)]
        assert [(e["index"], e["id"]) for e in lines] == [(1, "it-2"), (0, "it-1"), (2, "it-3")]
        assert lines[0]["error"]["message"] == "bad" and lines[0]["result"] is None
        assert lines[1]["result"] == json.loads(stored["it-1"])
        assert lines[2]["result"] == json.loads(stored["it-3"])
        assert list(store.raw_results("half")) == [stored["it-1"], stored["it-3"]]
        assert store.item_errors("half") == [(1, 2, '{"type":"invalid_input","message":"bad"}')]
        assert store.pending("half", -1, 10) == [(3, "it-4", request(4).model_dump_json())]
        # The lapsed lease of the process that died is taken over; grading goes on.
        assert store.claim("new-process", 30.0, 4) == [Chunk("half", 0, 4)]
        assert store.save_results("half", [(3, result(4), "scored", True)]) == 1
        assert store.save_results("half", [(0, result(1), "scored", True)]) == 0  # had one
        assert store.complete_if_finished("half", "new-process")
        done = store.get("half")
        assert done is not None and (done["status"], done["done"], done["next_seq"]) == (
            "done", 3, 4)
        # A finished job's unscored item is graded again; the size it freed was counted.
        assert store.reset_unscored("full", "owner-a", lease_owner=None, lease_seconds=30,
                                    retry=RetryPolicy(max_passes=3)) == 1
        full = store.get("full")
        assert full is not None and (full["status"], full["done"], full["unscored"]) == (
            "queued", 0, 0)
        assert 0 < full["bytes"] < 300
        assert store.pending("full", -1, 10) == [(0, "it-9", request(9).model_dump_json())]
        # Its chunk is open again: the next claim takes it.
        assert store.claim("new-process", 30.0, 4) == [Chunk("full", 0, 1)]
        # The schema is the one this code describes, at the newest revision.
        assert schema_differences(store, version_3_file=True) == []
        with store.db.read() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == (
                SCHEMA_REVISION)
            columns = {c["name"] for c in inspect(conn).get_columns("items")}
        assert columns == {"job_id", "idx", "item_id", "line", "request", "error"}
    finally:
        store.close()
    # Opening it again changes nothing.
    JobStore(path).close()


def test_a_new_database_has_the_described_schema(store_target: str | Path) -> None:
    store = JobStore(store_target)
    try:
        assert schema_differences(store) == []
        with store.db.read() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == (
                SCHEMA_REVISION)
    finally:
        store.close()


def test_a_database_from_a_newer_release_is_refused(store_target: str | Path) -> None:
    JobStore(store_target).close()
    store = JobStore(store_target)
    with store.db.tx() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    store.close()
    with pytest.raises(ConfigError) as caught:
        JobStore(store_target)
    assert "'9999'" in str(caught.value) and "newer bonusjudge" in str(caught.value)
    assert caught.value.field == ("data_dir" if isinstance(store_target, Path) else "jobs_url")


def test_an_unreachable_or_unsupported_postgres_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        JobStore("postgresql://postgres:s3cret-pw@127.0.0.1:1/jobs")
    assert caught.value.field == "jobs_url"
    assert "cannot be opened" in str(caught.value) and "s3cret-pw" not in str(caught.value)
    for url, words in (("postgresql+asyncpg://h/db", "not supported"),
                       ("postgresql://127.0.0.1:5432", "name the database")):
        with pytest.raises(ConfigError, match=words) as caught:
            JobStore(url)
        assert caught.value.field == "jobs_url"


def test_wal_mode_waits_for_a_writer_of_another_process(tmp_path: Path) -> None:
    # SQLite refuses the switch to WAL at once (no busy wait) while another connection writes;
    # the store retries it until that writer is done, as replicas opening a new file need.
    path = tmp_path / "jobs.sqlite3"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    opener = sqlite3.connect(path, isolation_level=None, timeout=0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        opener.execute("PRAGMA journal_mode = WAL")
    commit = threading.Timer(0.3, writer.execute, ("COMMIT",))
    commit.start()
    try:
        _use_wal(opener.cursor())
    finally:
        commit.join()
    assert opener.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    opener.close()
    writer.close()


# A process opening the store as ``bonusjudge serve`` does: imported first, then it waits for
# the signal so that every process opens at the same moment.
_OPENER = """
import logging, pathlib, sys, time
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
from api.jobs import JobStore
pathlib.Path(sys.argv[2]).touch()
while not pathlib.Path(sys.argv[3]).exists():
    time.sleep(0.002)
JobStore(sys.argv[1]).close()
"""


@pytest.mark.process
def test_processes_opening_a_new_database_at_once_migrate_it_once(
    tmp_path: Path, store_target: str | Path
) -> None:
    go = tmp_path / "go"
    opened = []
    for n in range(3):
        ready = tmp_path / f"ready-{n}"
        process = subprocess.Popen(
            [sys.executable, "-c", _OPENER, str(store_target), str(ready), str(go)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=Path(__file__).resolve().parents[3],
        )
        opened.append((process, ready))
    deadline = time.monotonic() + 120
    while not all(ready.exists() for _, ready in opened):
        assert time.monotonic() < deadline, "the processes never got ready"
        assert all(p.poll() is None for p, _ in opened), [p.communicate() for p, _ in opened]
        time.sleep(0.01)
    go.touch()
    logs = []
    for process, _ in opened:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        logs.append(stderr)
    # One process ran the migrations; the others found them done (under the lock).
    assert sum("Running upgrade  -> 0001" in log for log in logs) == 1, logs
    store = JobStore(store_target)
    try:
        assert schema_differences(store) == []
    finally:
        store.close()
