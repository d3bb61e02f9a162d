"""The Postgres side of the job store: the URL, the engine and its connection pool.

Several ``bonusjudge serve`` replicas share one Postgres database (``Settings.jobs_url``): every
replica answers for every job, a job whose replica dies is taken over when its lease lapses, and
per-key fairness and quotas hold across replicas because their state is in the database. The
driver is psycopg 3; ``postgres://`` and ``postgresql://`` URLs are read as
``postgresql+psycopg://``.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import URL, Engine, create_engine, make_url
from sqlalchemy.exc import ArgumentError

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
"""How long opening one connection may take (libpq ``connect_timeout``)."""

_ACCEPTED = ("postgres", "postgresql", DRIVER)


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


def postgres_engine(url: str) -> Engine:
    """An engine on the Postgres database of ``url``, with a pool sized for one service process.

    Connections are checked before use (``pool_pre_ping``), so a database restart or a dropped
    connection costs a reconnect rather than a failed store call, and recycled after 30 minutes
    (a proxy or firewall closing idle connections).

    Raises:
        ConfigError: (``jobs_url``) an invalid URL.
    """
    return create_engine(
        engine_url(url),
        pool_size=POOL_SIZE,
        max_overflow=MAX_OVERFLOW,
        pool_timeout=POOL_TIMEOUT_S,
        pool_pre_ping=True,
        pool_recycle=1800,
        # Errors raised by the store never carry the values of a statement (callers' items).
        hide_parameters=True,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "bonusjudge"},
    )


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_xact_lock`` naming ``name``."""
    digest = hashlib.sha256(f"bonusjudge:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
