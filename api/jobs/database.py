"""The job store's database, SQLite or Postgres, behind one small interface (``Database``).

The store's SQL (``store``, ``claims``, ``items``, ``files``) is written once with SQLAlchemy
Core; what differs between the engines is decided here: how a write transaction begins, which
clock times leases, how transactions that must not interleave are serialized, and the dialect's
``INSERT ... ON CONFLICT``.

**One clock.** Lease expiries are compared with "now" inside the statements. On Postgres "now"
is the database server's clock (``statement_timestamp()``), so replicas whose clocks drift
still agree on when a lease lapsed: a replica running fast would otherwise take over live jobs,
and one running slow would leave dead ones waiting. Creation and update times use the same
clock, so "oldest first" is one order across replicas. A SQLite file is shared by processes of
one machine only, which share its clock: there, "now" is this process's ``time.time()``.

**No lock outlives a statement on Postgres.** A replica may stop between two round trips (a GC
or VM pause, a partition): a transaction it left open keeps its row locks, and every replica
needing those rows waits. So the writes that lock rows other replicas need (a job's row, its
chunks) are each one statement in ``autocommit``: the server commits it as it ends, whatever
the client does next. Multi-statement transactions (``tx``) lock only rows nobody else waits
for, and the server's ``idle_in_transaction_session_timeout`` (``api.jobs.postgres.Timeouts``)
ends any that a client abandons.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Self

from sqlalchemy import (
    Connection,
    Engine,
    Float,
    Table,
    bindparam,
    cast,
    extract,
    func,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.sql.elements import ColumnElement

from api.jobs.postgres import UNBOUNDED, RoundTripWatchdog, Timeouts, lock_key, postgres_engine
from api.jobs.sqlite import BEGIN_OPTION, sqlite_engine

STORE_ERRORS: tuple[type[Exception], ...] = (DBAPIError, PoolTimeout)
"""What a failing job store raises: the database refused or failed a statement, or no
connection was free in time. A caller that cannot store answers 503 (``api.errors``)."""

TRANSIENT_STORE_ERRORS: tuple[type[Exception], ...] = (OperationalError, PoolTimeout)
"""Store failures worth retrying: a full disk, a long lock, a lost or exhausted connection."""


def is_transient(exc: BaseException) -> bool:
    """Whether a store failure is worth retrying on a new connection.

    One of ``TRANSIENT_STORE_ERRORS`` (a lock or statement timeout on Postgres is one), or any
    failure that cost the connection: the server ended the session (its
    ``idle_in_transaction_session_timeout`` after a pause of this process, a restart) or the
    watchdog cut it. Postgres reports an ended idle session as an ``InternalError``.
    """
    return isinstance(exc, TRANSIENT_STORE_ERRORS) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )


Insert = sqlite.Insert | postgresql.Insert
"""An ``INSERT`` of either dialect (both have ``on_conflict_do_nothing``)."""


class Database:
    """The job store's engine, with the few things that differ between SQLite and Postgres.

    Args:
        engine: A SQLite (``api.jobs.sqlite.sqlite_engine``) or Postgres
            (``api.jobs.postgres.postgres_engine``) engine.
        path: The SQLite file, or None on Postgres.
        watchdog: The Postgres engine's round-trip watchdog (stopped on ``close``).
    """

    def __init__(
        self, engine: Engine, *, path: Path | None = None,
        watchdog: RoundTripWatchdog | None = None,
    ) -> None:
        self.engine = engine
        self.path = path
        self.watchdog = watchdog
        self.postgres = engine.dialect.name == "postgresql"
        # SQLite: write transactions begin IMMEDIATE (they take the write lock at once).
        self._writer = engine if self.postgres else engine.execution_options(
            **{BEGIN_OPTION: True}
        )
        # Postgres: each statement its own transaction, committed by the server as it ends.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT") if (
            self.postgres) else self._writer

    def describe(self) -> str:
        """The database for a log line or an error message (a URL without its password)."""
        if self.path is not None:
            return str(self.path)
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """A write transaction: committed at the end of the block, rolled back on an error.

        On SQLite it holds the database's write lock from its first statement, so write
        transactions of every process run one at a time. On Postgres (read committed) rows are
        locked where a statement says so (``FOR UPDATE``, ``lock``).
        """
        with self._writer.begin() as conn:
            yield conn

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection whose every statement is a transaction of its own, on Postgres.

        For the writes that lock rows other replicas need: each statement commits as it ends,
        on the server, so no lock outlives it, even if this process stops right after sending
        it. Code in the block must be correct whether its statements commit one by one
        (Postgres) or together: on SQLite the block is one write transaction (the file's write
        lock serializes writers anyway).
        """
        with self._autocommit.begin() as conn:
            yield conn

    def unbounded(self, conn: Connection) -> None:
        """Lift the timeouts for the rest of ``conn``'s transaction (a migration, on Postgres).

        A migration may wait for another replica's (the advisory lock) and rewrite big tables:
        neither the server's timeouts nor the watchdog apply to it.
        """
        if self.postgres:
            conn.execution_options(**{UNBOUNDED: True})
            for setting in ("lock_timeout", "statement_timeout",
                            "idle_in_transaction_session_timeout"):
                conn.exec_driver_sql(f"SET LOCAL {setting} = 0")

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads (its transaction is rolled back when the block ends)."""
        with self.engine.connect() as conn:
            yield conn

    def now(self) -> ColumnElement[float]:
        """"Now" in seconds since the epoch, as an SQL value (the database's clock on Postgres).

        Taken when the statement runs, not when it is built (on SQLite a bound parameter that
        calls ``time.time``), so a statement built once can run many times.
        """
        if self.postgres:
            return cast(extract("epoch", func.statement_timestamp()), Float)
        return bindparam("now", type_=Float, callable_=time.time, unique=True)

    def insert(self, table: Table) -> Insert:
        """An ``INSERT`` into ``table`` with this dialect's ``on_conflict_do_nothing``."""
        return postgresql.insert(table) if self.postgres else sqlite.insert(table)

    def lock(self, conn: Connection, name: str) -> None:
        """Serialize the transactions that lock ``name`` across processes, until they commit.

        Postgres takes a transaction-level advisory lock; a SQLite write transaction holds the
        whole database already.
        """
        if self.postgres:
            conn.execute(select(func.pg_advisory_xact_lock(lock_key(name))))

    def close(self) -> None:
        """Close every pooled connection (connections checked out close when returned)."""
        self.engine.dispose()
        if self.watchdog is not None:
            self.watchdog.close()


def open_database(target: str | Path, timeouts: Timeouts | None = None) -> Database:
    """The database of ``target``: a ``postgresql://`` URL, or the path of a SQLite file.

    Nothing is connected yet (``api.jobs.migrate.upgrade`` connects first). ``timeouts`` apply
    to a Postgres database (the defaults when None); a SQLite file has its busy timeout.

    Raises:
        ConfigError: (``jobs_url``) an invalid Postgres URL.
        RuntimeError: this Python's SQLite library is too old for the store.
    """
    if isinstance(target, str) and target.split("://", 1)[0].split("+", 1)[0] in (
        "postgres", "postgresql"
    ):
        engine, watchdog = postgres_engine(target, timeouts)
        return Database(engine, watchdog=watchdog)
    path = Path(target)
    return Database(sqlite_engine(path), path=path)


class DialectStatements:
    """Statements built once per SQL dialect, shared by every store of that dialect.

    Building a SQLAlchemy statement and computing its cache key cost about as much CPU as SQLite
    takes to run it, so the store's hot statements are built once and run with parameters. They
    hold no values ("now" is ``Database.now``, taken as each runs; the rest are bind
    parameters), so one set serves every ``Database`` of a dialect. A subclass builds its
    statements in ``__init__(db)``; ``of(db)`` returns the set for ``db``'s dialect.
    """

    _built: ClassVar[dict[bool, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._built = {}  # each kind of statements its own table

    def __init__(self, db: Database) -> None:
        """Build the statements for ``db``'s dialect (a subclass's)."""

    @classmethod
    def of(cls, db: Database) -> Self:
        """The statements for ``db``'s dialect (built at the first call)."""
        built: Self | None = cls._built.get(db.postgres)
        if built is None:
            built = cls._built[db.postgres] = cls(db)
        return built
