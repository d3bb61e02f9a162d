"""The jobs database file: SQLite in WAL mode, its tables, connections and transactions.

Tables::

    jobs   id, kind, owner (API-key digest), status, counts, judge overrides + config hash,
           options (kind-specific JSON), lease_owner, lease_expires, next_seq (results are
           numbered in finishing order), bytes (stored size, for the owner's quota),
           request_dict / result_dict (the job's compression dictionaries)
    items  (job_id, idx) -> item id, request JSON or input error, result JSON, seq
           (JSON compressed with the job's dictionaries: ``codec.pack`` / ``codec.unpack``)

Several processes may open the same file; the SQL of the store's operations lives in
``store``, ``claims`` and ``items``, on top of the connections opened here.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

SCHEMA_VERSION = 3
"""``PRAGMA user_version`` of a database written by this code."""

ACTIVE = ("queued", "running")
"""Statuses of unfinished jobs (the ones a lease may hold)."""

FINISHED = ("done", "failed", "cancelled")
"""Statuses of finished jobs (the ones retention deletes)."""

GRADE = "grade"
"""Kind of the grading jobs of ``POST /v1/jobs`` (the kind of rows older than job kinds)."""

_SCHEMA = """
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
"""

# Columns added after version 1; an older database gains them on open (existing jobs: grade;
# their stored bytes count as 0 towards a key's quota until they expire).
_ADDED_COLUMNS = (
    ("kind", "TEXT NOT NULL DEFAULT 'grade'"),
    ("options", "TEXT NOT NULL DEFAULT '{}'"),
    ("bytes", "INTEGER NOT NULL DEFAULT 0"),
    ("request_dict", "BLOB"),
    ("result_dict", "BLOB"),
)

# Created after the columns exist (an older database has no ``owner`` index yet either).
_INDEXES = "CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, status);"


class SqliteDatabase:
    """One SQLite file in WAL mode, safe for several processes; one connection per thread.

    Opening creates the file (private to this user), the tables, and the columns an older
    database lacks. sqlite3 connections must not be shared concurrently, so each thread gets
    its own; ``close`` closes them all.

    Args:
        path: The database file (its folder is created).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Jobs hold every caller's items and results: this user only, whatever the umask. The
        # file exists before SQLite opens it because SQLite gives -wal and -shm its mode.
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        for private, mode in ((self.path.parent, 0o700), (self.path, 0o600),
                              (Path(f"{self.path}-wal"), 0o600), (Path(f"{self.path}-shm"), 0o600)):
            with suppress(OSError):  # absent, or another user's: SQLite reports what matters
                os.chmod(private, mode)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        conn = self.conn()
        conn.executescript(_SCHEMA)
        self._migrate(conn)
        conn.executescript(_INDEXES)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Add the columns an older database lacks (several workers may race to do it).

        Version 3 stores request, result and error JSON compressed (``codec.pack``, with the
        job's dictionaries); rows of older versions stay text, which ``codec.unpack`` reads as
        is, so nothing is rewritten.
        """
        for name, definition in _ADDED_COLUMNS:
            present = {str(r["name"]) for r in conn.execute("PRAGMA table_info(jobs)")}
            if name in present:
                continue
            try:
                conn.execute(f"ALTER TABLE jobs ADD COLUMN {name} {definition}")
            except sqlite3.OperationalError as exc:
                # Another process added it between the check and the ALTER: fine.
                if "duplicate column" not in str(exc).lower():
                    raise

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use), in autocommit mode."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # Autocommit mode: transactions are explicit (BEGIN IMMEDIATE), so a writer takes
            # the lock up front instead of failing to upgrade a read lock under contention.
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA busy_timeout = 10000")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction on this thread's connection: committed, or rolled back on error."""
        conn = self.conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection opened here."""
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
