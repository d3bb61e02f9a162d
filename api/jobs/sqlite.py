"""The SQLite side of the job store: the file, its connections, and databases older than Alembic.

The default store is one SQLite file under the service's data folder, in WAL mode, safe for
several processes on one machine. Its engine (``sqlite_engine``) keeps what the store relied on
before SQLAlchemy: the file is private to this user (0600, folder 0700) whatever the umask, a
writer waits up to 10 s for the lock (``busy_timeout``), and a write transaction takes the lock
when it begins (``BEGIN IMMEDIATE``) instead of failing to upgrade a read lock under contention.

A database written before the store moved to Alembic (``PRAGMA user_version`` 1, 2 or 3) has no
``alembic_version`` table; ``bring_to_version_3`` gives it what version 3 had (tables, columns,
indexes), after which it is stamped with the first revision, which is version 3, and upgraded
like any other (``api.jobs.migrate``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event

BEGIN_OPTION = "bonusjudge_sqlite_begin"
"""Execution option naming how a transaction begins: ``IMMEDIATE`` for writers (else deferred)."""

MIN_SQLITE = (3, 35, 0)
"""Oldest SQLite library the store runs on (``ALTER TABLE ... DROP COLUMN``, ``RETURNING``)."""

BUSY_TIMEOUT_S = 10.0
"""How long a connection waits for another process's write lock before failing."""

# -- before Alembic: the schema of version 3 ------------------------------------------------------

LEGACY_TABLES = (
    """CREATE TABLE IF NOT EXISTS jobs (
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
)""",
    """CREATE TABLE IF NOT EXISTS items (
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
) WITHOUT ROWID""",
)
"""Version 3's tables, as its code created them (a version-1 file has no ``items`` yet)."""

LEGACY_ADDED_COLUMNS = (
    ("kind", "TEXT NOT NULL DEFAULT 'grade'"),
    ("options", "TEXT NOT NULL DEFAULT '{}'"),
    ("bytes", "INTEGER NOT NULL DEFAULT 0"),
    ("request_dict", "BLOB"),
    ("result_dict", "BLOB"),
)
"""Columns of ``jobs`` added by versions 2 and 3 (existing jobs: grade, 0 bytes, no dictionary)."""

LEGACY_INDEXES = (
    "CREATE INDEX IF NOT EXISTS jobs_claimable ON jobs (status, created_at)",
    "CREATE INDEX IF NOT EXISTS items_by_seq ON items (job_id, seq) WHERE seq IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, status)",
)
"""Version 3's indexes (created after the columns they cover exist)."""


def bring_to_version_3(conn: Connection) -> None:
    """Give a database written before Alembic everything version 3 had, in the caller's transaction.

    Nothing is rewritten: version 3 stores new request, result and error JSON compressed, and
    rows of older versions stay text, which ``codec.unpack`` reads as is.
    """
    for statement in LEGACY_TABLES:
        conn.exec_driver_sql(statement)
    present = {str(row[1]) for row in conn.exec_driver_sql("PRAGMA table_info(jobs)")}
    for name, definition in LEGACY_ADDED_COLUMNS:
        if name not in present:
            conn.exec_driver_sql(f"ALTER TABLE jobs ADD COLUMN {name} {definition}")
    for statement in LEGACY_INDEXES:
        conn.exec_driver_sql(statement)


# -- the file and its engine ----------------------------------------------------------------------


def make_private(path: Path) -> None:
    """Create the database file (and its folder) readable by this user only, whatever the umask.

    Jobs hold every caller's items and results. The file exists before SQLite opens it because
    SQLite gives ``-wal`` and ``-shm`` the database's mode; files an older version left readable
    to others are made private here too.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for private, mode in ((path.parent, 0o700), (path, 0o600),
                          (Path(f"{path}-wal"), 0o600), (Path(f"{path}-shm"), 0o600)):
        with suppress(OSError):  # absent, or another user's: SQLite reports what matters
            os.chmod(private, mode)


def sqlite_engine(path: Path) -> Engine:
    """An engine on the SQLite file ``path`` (created private), in WAL mode, for many threads.

    Connections come from a pool (one per thread at a time; sqlite3 connections are not shared
    concurrently). sqlite3's own transaction handling is off: the engine emits ``BEGIN`` itself,
    ``BEGIN IMMEDIATE`` on connections carrying ``BEGIN_OPTION`` (the store's write
    transactions), so a reader never takes the write lock and a writer takes it up front.

    Raises:
        RuntimeError: the SQLite library is older than ``MIN_SQLITE``.
    """
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise RuntimeError(
            f"the job store needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer; this Python "
            f"has {sqlite3.sqlite_version}"
        )
    make_private(path)
    engine = create_engine(
        f"sqlite+pysqlite:///{path}",
        connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False},
        # A connection per thread in use, as before the pool: store calls run in
        # ``asyncio.to_thread`` (up to 32 threads) and calibration threads; a SQLite connection
        # costs a file handle, so none of them waits for one.
        pool_size=5,
        max_overflow=35,
        # Errors raised by the store never carry the values of a statement (callers' items).
        hide_parameters=True,
    )

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # Autocommit at the driver: the "begin" hook below emits BEGIN, so transactions are
        # exactly SQLAlchemy's (sqlite3's legacy mode would skip BEGIN before SELECT and DDL).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            _use_wal(cursor)
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        mode = "IMMEDIATE" if conn.get_execution_options().get(BEGIN_OPTION) else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def _use_wal(cursor: sqlite3.Cursor) -> None:
    """Put the database file in WAL mode, waiting while another process does the same.

    WAL mode is a property of the file, so a connection that finds it set has nothing to do.
    Setting it needs an exclusive lock, and SQLite answers "database is locked" at once, without
    the busy timeout, when that could deadlock: processes opening a new file together (replicas
    of ``bonusjudge serve`` started at once) each hold a read lock while asking. So a busy
    answer is retried, the mode read again first, until :data:`BUSY_TIMEOUT_S` has passed.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
