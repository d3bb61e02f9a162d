"""The job store's tables, one definition for SQLite and Postgres (SQLAlchemy Core, no ORM).

Tables::

    jobs          id, kind, owner (API-key digest), status, counts, judge overrides + config
                  hash, options (kind-specific JSON), next_seq (the last number given to a
                  finished entry), bytes (stored size, for the owner's quota), request_dict /
                  result_dict (the job's compression dictionaries)
    chunks        (job_id, lo) -> hi, lease_owner, lease_expires, done: the job's items
                  ``lo <= idx < hi``, leased on their own, so every replica works on every
                  running job; a job without item rows (a calibration run) has one chunk
    items         (job_id, idx) -> item id, line, request or input error, as submitted
    results       (job_id, idx) -> seq, status, result: one row per finished entry, written
                  once (the primary key refuses a second one) and numbered in finishing order
                  (``seq``, unique per job); an invalid item's entry has status ``invalid``
    report_files  (job_id, name) -> the bytes of a calibration report's file
    key_spend     (owner, day) -> cost_usd, requests: what an API key's judge calls cost on a
                  UTC day (its budget, ``max_cost_per_key_usd``); a job's own spend is
                  ``jobs.cost_usd``, and ``jobs.paused_until`` keeps a job paused at a budget
                  from being claimed before then

Requests, results and errors are stored compressed with the job's dictionaries
(``codec.pack``), as bytes; rows written by SQLite versions before 4 may hold plain text, which
``Packed`` reads as it is. Times are seconds since the epoch (floats): on Postgres they come
from the database's clock (``Database.now``), so every replica measures leases alike.

This describes the newest revision (``SCHEMA_REVISION``); the migrations in
``api/jobs/migrations/versions`` build it step by step and are never rewritten.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Dialect,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.engine import RowMapping
from sqlalchemy.types import TypeDecorator

SCHEMA_REVISION = "0004"
"""Alembic revision of the schema this code reads and writes (the newest migration)."""

CHUNK_ITEMS = 64
"""Most items in a chunk of a grading job: the unit a replica leases (``chunks``).

Small enough that a dead replica leaves at most a few chunks' worth of items in flight to grade
again; large enough that claims stay rare on big jobs (about one a second per replica with the
embedded matcher, fewer with an LLM judge).
"""

CHUNKS_PER_JOB = 32
"""Chunks a grading job is cut into when it is small enough (``MIN_CHUNK_ITEMS`` and up).

A replica takes up to ``max_running`` chunks at once (4 by default), so a job of only a few
chunks would be taken whole by the first replica with room, as before; 32 feed eight replicas.
"""

MIN_CHUNK_ITEMS = 8
"""Fewest items in a chunk of a grading job (the last chunk excepted): a claim per 8 items."""

ACTIVE = ("queued", "running")
"""Statuses of unfinished jobs (the ones a lease may hold)."""

FINISHED = ("done", "failed", "cancelled")
"""Statuses of finished jobs (the ones retention deletes)."""

GRADE = "grade"
"""Kind of the grading jobs of ``POST /v1/jobs`` (the kind of rows older than job kinds)."""

INVALID = "invalid"
"""``results.status`` of an item rejected at submission (its entry carries the item's error)."""

JobRow = RowMapping
"""A row of ``jobs`` as the store returns it: read its columns by name, ``row["status"]``."""


class Packed(TypeDecorator[Any]):
    """A stored request, result or error: bytes (``codec.pack``), or text in old SQLite rows.

    Text is written as UTF-8 bytes, so Postgres keeps one type (``bytea``); SQLite returns the
    text of rows written before version 4 as ``str``, which ``codec.unpack`` reads as is.
    """

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> bytes | None:
        """Text as UTF-8 bytes; bytes unchanged."""
        return value.encode("utf-8") if isinstance(value, str) else value

    def process_result_value(self, value: Any, dialect: Dialect) -> bytes | str | None:
        """Bytes (``memoryview`` made ``bytes``), or the text of an old SQLite row."""
        return bytes(value) if isinstance(value, memoryview) else value


metadata = MetaData()
"""Every table of the job store."""

jobs = Table(
    "jobs",
    metadata,
    Column("id", Text, primary_key=True),
    Column("kind", Text, nullable=False, server_default=GRADE),
    Column("options", Text, nullable=False, server_default="{}"),
    Column("owner", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("total", Integer, nullable=False),
    Column("invalid", Integer, nullable=False),
    Column("done", Integer, nullable=False, server_default=text("0")),
    Column("scored", Integer, nullable=False, server_default=text("0")),
    Column("unscored", Integer, nullable=False, server_default=text("0")),
    Column("next_seq", Integer, nullable=False, server_default=text("0")),
    Column("overrides", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("config_hash", Text, nullable=False),
    Column("detail", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("run_started_at", Float),
    Column("run_start_done", Integer, nullable=False, server_default=text("0")),
    Column("bytes", BigInteger, nullable=False, server_default=text("0")),
    Column("request_dict", LargeBinary),
    Column("result_dict", LargeBinary),
    Column("cost_usd", Float, nullable=False, server_default=text("0")),
    Column("paused_until", Float),
    Index("jobs_claimable", "status", "created_at"),
    Index("jobs_by_owner", "owner", "status"),
)
"""One row per job (any kind)."""


def _job_table(name: str, key: Column[Any], *columns: Any, **options: Any) -> Table:
    """A table of a job's entries, keyed ``(job_id, key)``: its items, results or files.

    Args:
        name: The table's name.
        key: The column that tells one entry of a job from another (part of the primary key).
        *columns: The entry's other columns and the table's constraints.
        **options: Table options (``sqlite_with_rowid``).
    """
    job_id = Column("job_id", Text, primary_key=True)
    return Table(name, metadata, job_id, key, *columns, **options)


items = _job_table(
    "items",
    Column("idx", Integer, primary_key=True),
    Column("item_id", Text),
    Column("line", Integer),
    Column("request", Packed),
    Column("error", Packed),
    # Small rows read by key: SQLite keeps them in the primary key's b-tree (as version 3 did).
    sqlite_with_rowid=False,
)
"""A job's submitted items (never changed after the job is stored)."""

results = _job_table(
    "results",
    Column("idx", Integer, primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("status", Text, nullable=False),
    Column("result", Packed),
    Column("size", BigInteger, nullable=False, server_default=text("0")),
    ForeignKeyConstraint(
        ["job_id", "idx"], ["items.job_id", "items.idx"], name="results_item",
        ondelete="CASCADE",
    ),
    UniqueConstraint("job_id", "seq", name="results_seq"),
)
"""One row per finished entry: written once (primary key), numbered once (``results_seq``)."""

report_files = _job_table(
    "report_files",
    Column("name", Text, primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("data", LargeBinary, nullable=False),
)
"""The files of a calibration run (its report, plots, mappings, uploaded set), by name."""

chunks = _job_table(
    "chunks",
    Column("lo", Integer, primary_key=True),
    Column("hi", Integer, nullable=False),
    Column("lease_owner", Text),
    Column("lease_expires", Float, nullable=False, server_default=text("0")),
    Column("done", Boolean, nullable=False, server_default=false()),
    ForeignKeyConstraint(["job_id"], ["jobs.id"], name="chunks_job", ondelete="CASCADE"),
    Index("chunks_by_lease", "lease_owner"),
)
"""The leases: one row per chunk of a job's items (``lo <= idx < hi``), each with its own holder.

A chunk is ``done`` once none of its items is left without a result; a job is finished by
whoever stores its last result (``Claims.complete_if_finished``), not by its chunks.
"""

key_spend = Table(
    "key_spend",
    metadata,
    Column("owner", Text, primary_key=True),
    Column("day", Text, primary_key=True),
    Column("cost_usd", Float, nullable=False, server_default=text("0")),
    Column("requests", BigInteger, nullable=False, server_default=text("0")),
)
"""What an API key's judge calls cost per UTC day (``day`` is ``YYYY-MM-DD``), added to as they
settle: the key's budget, kept across restarts and shared by replicas."""
