"""The Postgres side of the job store: the URL, the engine, its connection pool and its timeouts.

Several ``bonusjudge serve`` replicas share one Postgres database (``jobs_url``): every
replica answers for every job, a job whose replica dies is taken over when its lease lapses, and
per-key fairness and quotas hold across replicas because their state is in the database. The
driver is psycopg 3; ``postgres://`` and ``postgresql://`` URLs are read as
``postgresql+psycopg://``.

**Nobody waits for long** (``Timeouts``). A replica can stop without closing its connections: a
long GC or VM pause, a CPU-throttled container, a network partition that sends no reset. Each
connection therefore starts with ``lock_timeout`` (a statement waiting for a row lock gives up),
``statement_timeout`` (one that runs too long is cancelled) and
``idle_in_transaction_session_timeout`` (the server ends the session of a client that went
quiet inside a transaction, releasing its locks). The server enforces those; a server that does
not answer at all (frozen itself, or cut off) is the client's to notice: a watchdog thread
(``RoundTripWatchdog``) cuts the socket of a connection that has waited longer than the
statement timeout (and a grace) for one answer, so the call fails with a connection error (503
to an HTTP caller) instead of hanging, and the connection is replaced.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError

from core.errors import ConfigError

DRIVER = "postgresql+psycopg"
"""The SQLAlchemy dialect and driver of the Postgres job store."""

POOL_SIZE = 5
"""Connections a process keeps open: store calls run in ``asyncio.to_thread``'s few threads."""

MAX_OVERFLOW = 10
"""Extra connections under a burst; a process never holds more than 15 (mind max_connections)."""

POOL_TIMEOUT_S = 30.0
"""How long a store call waits for a free connection before failing (503 to an HTTP caller)."""

CONNECT_TIMEOUT_S = 10
"""Longest that opening one connection may take (libpq ``connect_timeout``; less when the
statement timeout is shorter)."""

ROUND_TRIP_GRACE_S = 2.0
"""How much longer than ``statement_timeout`` the client waits for an answer before it cuts the
connection: by then a server that is alive has cancelled the statement itself."""

PAUSE_SLACK_S = 1.0
"""How much later than it asked the watchdog may wake before it takes itself for paused (its
process stopped, or starved of CPU) and gives the connections it watches that time back."""

UNBOUNDED = "bonusjudge_unbounded"
"""Execution option of a connection whose statements the watchdog leaves alone (migrations)."""

_ACCEPTED = ("postgres", "postgresql", DRIVER)


@dataclass(frozen=True)
class Timeouts:
    """How long the job store's Postgres statements may wait, in seconds (settings ``jobs_*``).

    Attributes:
        lock: ``lock_timeout``: a statement waiting this long for a lock (a row another
            connection holds) fails and is retried, rather than waiting on a stopped replica.
        statement: ``statement_timeout``: a statement running this long is cancelled; the
            client cuts a connection whose server has not answered this long (and
            ``ROUND_TRIP_GRACE_S``) after a request.
        idle_in_transaction: ``idle_in_transaction_session_timeout``: the server ends the session
            of a client that sent nothing this long inside a transaction, and its locks go.
    """

    lock: float = 5.0
    statement: float = 30.0
    idle_in_transaction: float = 60.0

    def __post_init__(self) -> None:
        for name in ("lock", "statement", "idle_in_transaction"):
            if not getattr(self, name) > 0:
                raise ValueError(f"the {name} timeout must be more than 0 seconds")

    def options(self) -> str:
        """The libpq ``options`` that set the three timeouts when a connection starts."""
        return " ".join(
            f"-c {name}={max(1, round(seconds * 1000))}"
            for name, seconds in (
                ("lock_timeout", self.lock),
                ("statement_timeout", self.statement),
                ("idle_in_transaction_session_timeout", self.idle_in_transaction),
            )
        )

    @property
    def round_trip(self) -> float:
        """Seconds the client waits for one answer of the server before cutting the connection."""
        return self.statement + ROUND_TRIP_GRACE_S

    @property
    def connect(self) -> int:
        """The ``connect_timeout`` of libpq: whole seconds, at most ``CONNECT_TIMEOUT_S``."""
        return max(2, min(CONNECT_TIMEOUT_S, math.ceil(self.statement)))


class RoundTripWatchdog:
    """Cuts the connections whose server has not answered for ``limit`` seconds.

    A connection is *armed* when the pool hands it out and before each statement, commit and
    rollback (its deadline moves to ``limit`` seconds from then), and disarmed when it goes back.
    A thread wakes at the earliest deadline and shuts down the socket of each connection past
    it: the thread blocked on that connection's answer gets a connection error at once, and the
    pool replaces the connection. A server that answers never meets it: its own
    ``statement_timeout`` ends a statement first.

    Args:
        limit: Seconds one round trip may take (``Timeouts.round_trip``).
    """

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.cuts = 0
        """Connections cut so far (for tests and logs)."""
        self._armed: dict[int, tuple[float, Any]] = {}
        self._cut: set[int] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self, dbapi_connection: Any) -> None:
        """Give ``dbapi_connection`` ``limit`` seconds from now to answer."""
        with self._changed:
            self._cut.discard(id(dbapi_connection))
            first = not self._armed
            self._armed[id(dbapi_connection)] = (time.monotonic() + self.limit, dbapi_connection)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._watch, name="bonusjudge-store-watchdog", daemon=True
                )
                self._thread.start()
            elif first:
                self._changed.notify()  # the thread sleeps without a deadline while none is armed

    def disarm(self, dbapi_connection: Any) -> None:
        """Leave ``dbapi_connection`` alone (back in the pool, or running unbounded)."""
        with self._changed:
            self._armed.pop(id(dbapi_connection), None)

    def was_cut(self, dbapi_connection: Any) -> bool:
        """Whether this watchdog cut ``dbapi_connection`` since it was last armed."""
        with self._changed:
            return id(dbapi_connection) in self._cut

    def close(self) -> None:
        """Stop the thread (the engine is disposed of)."""
        with self._changed:
            self._closed = True
            self._armed.clear()
            self._changed.notify()

    def _watch(self) -> None:
        woken_by: float | None = None  # when the last wait was to end at the latest
        while True:
            with self._changed:
                if self._closed:
                    return
                now = time.monotonic()
                if woken_by is not None and now - woken_by > PAUSE_SLACK_S:
                    # This process was stopped (a pause, the very thing guarded against here) or
                    # starved: that time was not the server's. Answers that came meanwhile wait
                    # in the sockets, so each connection gets its time again.
                    late_by = now - woken_by
                    self._armed = {key: (due + late_by, conn)
                                   for key, (due, conn) in self._armed.items()}
                woken_by = None
                late = [(key, conn) for key, (due, conn) in self._armed.items() if due <= now]
                for key, _ in late:
                    del self._armed[key]
                    self._cut.add(key)
                if not late:
                    upcoming = min((due for due, _ in self._armed.values()), default=None)
                    if upcoming is not None:
                        woken_by = upcoming
                    self._changed.wait(None if upcoming is None else upcoming - now)
                    continue
            for _, conn in late:
                self.cuts += 1
                _shut_down(conn)


def _shut_down(dbapi_connection: Any) -> None:
    """Shut down a psycopg connection's socket, from another thread than the one using it."""
    try:
        fd = dbapi_connection.pgconn.socket
    except Exception:  # closed already: nothing waits on it
        return
    try:
        # A duplicate of the descriptor: shutting it down ends the connection for every holder,
        # closing it leaves psycopg's own descriptor to psycopg.
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


def engine_url(url: str) -> URL:
    """The SQLAlchemy URL of a ``jobs_url``, with psycopg 3 as its driver.

    Raises:
        ConfigError: (``jobs_url``) not a URL, or a Postgres URL naming another driver.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(
            "jobs_url: not a database URL; expected postgresql://user:password@host:port/db",
            field="jobs_url",
        ) from exc
    if parsed.drivername not in _ACCEPTED:
        raise ConfigError(
            f"jobs_url: the {parsed.drivername!r} driver is not supported; use postgresql:// "
            f"(psycopg 3)",
            field="jobs_url",
        )
    if not parsed.database:
        raise ConfigError("jobs_url: name the database (postgresql://host/DATABASE)",
                          field="jobs_url")
    return parsed.set(drivername=DRIVER)


def postgres_engine(url: str, timeouts: Timeouts | None = None) -> tuple[Engine, RoundTripWatchdog]:
    """An engine on the Postgres database of ``url``, with a pool sized for one service process.

    Every connection starts with ``timeouts`` set, and is watched by the returned watchdog
    while it is checked out. A pooled connection is checked before use (a ``;`` round trip,
    itself watched), so a database restart or a dropped connection costs a reconnect rather
    than a failed store call; connections are recycled after 30 minutes (a proxy or firewall
    closing idle connections).

    Raises:
        ConfigError: (``jobs_url``) an invalid URL.
    """
    timeouts = timeouts or Timeouts()
    engine = create_engine(
        engine_url(url),
        pool_size=POOL_SIZE,
        max_overflow=MAX_OVERFLOW,
        pool_timeout=POOL_TIMEOUT_S,
        pool_recycle=1800,
        # Errors raised by the store never carry the values of a statement (callers' items).
        hide_parameters=True,
        connect_args={"connect_timeout": timeouts.connect, "application_name": "bonusjudge",
                      "options": timeouts.options()},
    )
    watchdog = RoundTripWatchdog(timeouts.round_trip)
    _watch(engine, watchdog)
    return engine, watchdog


def _watch(engine: Engine, watchdog: RoundTripWatchdog) -> None:
    """Arm ``watchdog`` around every round trip of ``engine``'s connections, and ping on checkout.

    SQLAlchemy's own pre-ping runs before any checkout hook, where nothing could bound it: a
    frozen server would hold the calling thread for as long as it stays frozen. This ping runs
    armed; a ping the watchdog cut means the server is not answering, and fails the call at
    once (retrying with a new connection would only wait again).
    """

    @event.listens_for(engine, "connect")
    def _fresh(dbapi_connection: Any, record: Any) -> None:
        record.info["bonusjudge_fresh"] = True  # just opened: nothing to check

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        watchdog.arm(dbapi_connection)
        if record.info.pop("bonusjudge_fresh", False):
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            if watchdog.was_cut(dbapi_connection):
                raise
            raise DisconnectionError("the pooled connection was closed") from exc

    def _rearm(conn: Connection, *args: Any) -> None:
        if conn.invalidated:
            return  # its connection is gone (asking for it would open another)
        dbapi_connection = conn.connection.dbapi_connection
        if conn.get_execution_options().get(UNBOUNDED):
            watchdog.disarm(dbapi_connection)
        else:
            watchdog.arm(dbapi_connection)

    event.listen(engine, "before_cursor_execute", _rearm)
    event.listen(engine, "commit", _rearm)
    event.listen(engine, "rollback", _rearm)

    def _disarm(dbapi_connection: Any, *args: Any) -> None:
        if dbapi_connection is not None:
            watchdog.disarm(dbapi_connection)

    @event.listens_for(engine, "reset")
    def _reset(dbapi_connection: Any, *args: Any) -> None:
        watchdog.arm(dbapi_connection)  # the rollback of a connection going back to the pool

    event.listen(engine, "checkin", _disarm)
    event.listen(engine, "close", _disarm)
    event.listen(engine, "invalidate", _disarm)


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_xact_lock`` naming ``name``."""
    digest = hashlib.sha256(f"bonusjudge:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
