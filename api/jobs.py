"""Grading jobs: a persisted store (SQLite, WAL) and the background runner that grades them.

A job survives a restart. Its items and every result live in ``jobs.sqlite3`` under the service's
data folder; each result is written in its own transaction, and an item with a stored result is
never graded again, so a restarted service resumes exactly where the last one stopped.

Several uvicorn workers may share the database, but only one process runs a given job: a process
*claims* a job by taking its lease (owner token = pid + random suffix, expiry renewed while it
runs). A lease that is not renewed expires, and another worker takes the job over. On a clean
shutdown the runner stops feeding new items, lets the ones in flight finish and be stored (up to
``drain_timeout``), and releases its leases, so the next process starts at once and no judge call
is thrown away.

Tables::

    jobs   id, kind, owner (API-key digest), status, counts, judge overrides + config hash,
           options (kind-specific JSON), lease_owner, lease_expires, next_seq (results are
           numbered in finishing order), bytes (stored size, for the owner's quota),
           request_dict / result_dict (the job's compression dictionaries)
    items  (job_id, idx) -> item id, request JSON or input error, result JSON, seq
           (JSON compressed with the job's dictionaries: ``pack`` / ``unpack``)

Keys share the service fairly: ``JobStore.claim`` gives the next lease to the owner holding the
fewest jobs, a full process hands a slot of the busiest owner over to a waiting one
(``JobManager._make_room``), and each running job has at most its share of the grader's
concurrency in flight. Quotas (``Quota``) are checked in the transaction that stores a job;
finished jobs are deleted after the retention period (``JobManager._purge_expired``).

Job kinds share the store, the leases and the result stream: ``grade`` (this module grades them),
``mcq`` (multiple-choice scoring) and ``calibrate`` (a calibration run writing a report folder;
it has no item rows). The runners of other kinds are registered on the ``JobManager`` by the app
(``JobManager.register``); a process claims only the kinds it has a runner for, so an older
worker sharing the database never runs a job it does not understand.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import sqlite3
import threading
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from api.errors import Conflict, NotFound, QuotaExceeded, UnsupportedMediaType
from api.schemas import ItemError, JobBody, JobState, JobStatus
from core.errors import InputError, JudgeError, field_of
from judge.aggregate import Aggregator, Summary
from judge.config import JudgeConfig, JudgeOverrides, Settings
from judge.engine import TENANT, Grader
from judge.io import chartom_to_request, load_json_line
from judge.types import GradeRequest, GradeResult

log = logging.getLogger("bonusjudge.jobs")

SCHEMA_VERSION = 3
JSONL_TYPES = frozenset(
    {
        "application/x-ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/jsonlines",
    }
)
"""Content types read as one JSON item per line."""

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

_ACTIVE = ("queued", "running")

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

_FINISHED = ("done", "failed", "cancelled")

_PLAIN, _REQUESTS, _RESULTS = 1, 2, 3
"""First byte of a compressed blob: zlib alone, or with the job's request or result dictionary."""

Dicts = Mapping[int, bytes]
"""A job's compression dictionaries by tag (``_REQUESTS``, ``_RESULTS``), as far as it has any."""


def pack(text: str, dicts: Dicts | None = None, tag: int = _PLAIN) -> str | bytes:
    """A request, result or error JSON as stored: compressed when that is smaller.

    The items of one job share their keys and much of their values (a result's provenance is
    the same for every item), so each job keeps one request and one result as a zlib preset
    dictionary (``jobs.request_dict``, ``jobs.result_dict``), and a blob compressed with it is a
    fraction of one compressed alone: what keeps a job of small items within a few times its
    upload. A compressed blob is a ``BLOB`` starting with its tag byte; a text stays ``TEXT``, so
    rows written before compression (schema version 2 and older) read as they are.

    Args:
        text: The JSON text.
        dicts: The job's dictionaries; ``tag``'s is used when present, else plain zlib.
        tag: ``_REQUESTS`` or ``_RESULTS`` to use that dictionary.
    """
    raw = text.encode("utf-8")
    zdict = (dicts or {}).get(tag)
    if zdict is None:
        tag = _PLAIN
        compressor = zlib.compressobj(6)
    else:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, zdict)
    packed = bytes([tag]) + compressor.compress(raw) + compressor.flush()
    return packed if len(packed) < len(raw) else text


def unpack(value: str | bytes, dicts: Dicts | None = None) -> str:
    """The JSON text of a stored blob (text, or compressed by ``pack`` with ``dicts``)."""
    if isinstance(value, str):
        return value
    tag = value[0]
    if tag == _PLAIN:
        return zlib.decompress(value[1:]).decode("utf-8")
    decompressor = zlib.decompressobj(zdict=(dicts or {})[tag])
    return (decompressor.decompress(value[1:]) + decompressor.flush()).decode("utf-8")


def _stored_size(value: str | bytes | None) -> int:
    if value is None:
        return 0
    return len(value) if isinstance(value, bytes) else len(value.encode("utf-8"))


@dataclass(frozen=True)
class Quota:
    """Per-key limits checked when a job is stored (in the same transaction, so across replicas).

    Attributes:
        max_jobs: Queued or running jobs of any kind per key.
        max_queued_items: Unfinished items across a key's queued and running jobs.
        max_stored_bytes: Bytes of items and results a key's jobs keep in the store.
        retry_after: Seconds a caller over the job or item limit is told to wait.
    """

    max_jobs: int
    max_queued_items: int
    max_stored_bytes: int
    retry_after: float = 30.0

    @classmethod
    def from_settings(cls, settings: Settings) -> Quota:
        """The limits configured in ``settings`` (``max_*_per_key``)."""
        return cls(
            max_jobs=settings.max_jobs_per_key,
            max_queued_items=settings.max_queued_items_per_key,
            max_stored_bytes=settings.max_stored_bytes_per_key,
        )

    def check(self, conn: sqlite3.Connection, owner: str, items: int, stored: int) -> None:
        """Refuse a new job of ``items`` units and ``stored`` bytes that would break a limit.

        Raises:
            QuotaExceeded: naming the limit and the key's current use.
        """
        row = conn.execute(
            "SELECT COALESCE(SUM(CASE WHEN status IN (?, ?) THEN 1 ELSE 0 END), 0) AS jobs,"
            " COALESCE(SUM(CASE WHEN status IN (?, ?) THEN MAX(total - done, 0) ELSE 0 END), 0)"
            " AS queued, COALESCE(SUM(bytes), 0) AS stored FROM jobs WHERE owner = ?",
            (*_ACTIVE, *_ACTIVE, owner),
        ).fetchone()
        jobs, queued, used = int(row["jobs"]), int(row["queued"]), int(row["stored"])
        if jobs + 1 > self.max_jobs:
            raise QuotaExceeded(
                f"quota exceeded: at most {self.max_jobs} queued or running jobs per API key, "
                f"and this key has {jobs}; wait for one to finish or cancel one",
                retry_after=self.retry_after,
            )
        if queued + items > self.max_queued_items:
            raise QuotaExceeded(
                f"quota exceeded: at most {self.max_queued_items} unfinished items per API key; "
                f"this key has {queued} queued and the job adds {items}",
                retry_after=self.retry_after, field="items",
            )
        if used + stored > self.max_stored_bytes:
            raise QuotaExceeded(
                f"quota exceeded: at most {self.max_stored_bytes} stored bytes per API key; "
                f"this key's jobs keep {used} and the job needs {stored}; finished jobs are "
                "removed after the retention period",
            )

GRADE = "grade"
"""Kind of the grading jobs of ``POST /v1/jobs``."""


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


# -- parsing submissions -------------------------------------------------------------------------


@dataclass(frozen=True)
class JobItem:
    """One submitted item after validation: a request to grade, or the reason it cannot be.

    Attributes:
        index: 0-based position in the submission.
        item_id: The item's id (its ``id``, else its 1-based line or position).
        line: 1-based line number for JSONL uploads.
        request: The validated request (a ``GradeRequest`` for grading jobs, the kind's own
            item model otherwise), or None when the item is invalid.
        error: Why the item is invalid, or None.
    """

    index: int
    item_id: str | None
    line: int | None
    request: BaseModel | None
    error: ItemError | None


@dataclass(frozen=True)
class JobUpload:
    """A job submission as read from the request body, before the judge is resolved.

    Attributes:
        raw: ``(line or None, parsed JSON or None, JSON error or None)`` per non-blank item.
        judge: Judge selection carried in the body (JSON ``judge`` or multipart ``judge`` field).
    """

    raw: list[tuple[int | None, Any, str | None]]
    judge: JudgeOverrides | None


def media_type(request: Request) -> str:
    """The request's content type without parameters, lower-cased ("" when absent)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def parse_jsonl(data: bytes, *, field: str) -> list[tuple[int | None, Any, str | None]]:
    """Split a JSONL upload into ``(line, parsed JSON or None, JSON error or None)`` per line.

    Blank lines are skipped; a line that is not JSON is kept with its error, so the caller can
    report it by number and go on with the rest.

    Raises:
        InputError: (``field``) the bytes are not UTF-8 text.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{field}: not UTF-8 text ({exc.reason})", field=field) from None
    out: list[tuple[int | None, Any, str | None]] = []
    # Split on "\n" only: str.splitlines() also breaks at U+2028, \x85 and other characters that
    # JSON allows raw inside strings, which would cut one item into two invalid lines.
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            out.append((number, load_json_line(raw), None))
        except json.JSONDecodeError as exc:
            out.append((number, None, f"line {number}: not valid JSON: {exc.msg}"))
    return out


def _judge_field(value: Any) -> JudgeOverrides | None:
    if value is None or value == "":
        return None
    try:
        return JudgeOverrides.model_validate_json(value if isinstance(value, str) else bytes(value))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_of(("judge", *first["loc"])) if first["type"] != "json_invalid" else "judge"
        raise InputError(f"{field}: {first['msg']}", field=field) from None


async def read_job_upload(request: Request) -> JobUpload:
    """Read a job submission: JSON ``{"items", "judge"}``, a JSONL body, or a multipart ``file``.

    Raises:
        InputError: unreadable JSON, a bad ``judge``, a missing ``file`` (field named).
        UnsupportedMediaType: another content type.
    """
    media = media_type(request)
    if media == "application/json" or media.endswith("+json"):
        try:
            body = JobBody.model_validate_json(await request.body())
        except ValidationError as exc:
            first = exc.errors()[0]
            if first["type"] == "json_invalid":
                raise InputError(f"body: invalid JSON: {first['msg']}", field="body") from None
            field = field_of(first["loc"])
            raise InputError(f"{field}: {first['msg']}", field=field) from None
        return JobUpload([(None, item, None) for item in body.items], body.judge)
    if media in JSONL_TYPES:
        return JobUpload(parse_jsonl(await request.body(), field="body"), None)
    if media == "multipart/form-data":
        form = await request.form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InputError("file: upload the JSONL file in the form field `file`", field="file")
        data = await upload.read()
        return JobUpload(parse_jsonl(data, field="file"), _judge_field(form.get("judge")))
    raise UnsupportedMediaType(
        f"content type {media or '(none)'!r} is not accepted: send application/json, "
        "application/x-ndjson (one item per line) or multipart/form-data with a `file` field",
        field="content-type",
    )


def build_items(
    upload: JobUpload, *, context_window: int | None, settings: Settings
) -> list[JobItem]:
    """Validate every item of an upload; bad ones become error entries, the rest requests.

    Raises:
        InputError: (field ``items``) no items, or more than ``settings.max_job_items``.
    """
    if not upload.raw:
        raise InputError("items: the job has no items", field="items")
    if len(upload.raw) > settings.max_job_items:
        raise InputError(
            f"items: {len(upload.raw)} items exceed the limit of {settings.max_job_items} per job",
            field="items",
        )
    seen: set[str] = set()
    out: list[JobItem] = []
    for index, (line, obj, problem) in enumerate(upload.raw):
        position = line if line is not None else index + 1
        declared = obj.get("id") if isinstance(obj, dict) else None
        declared_id = None if declared is None else str(declared)
        error: ItemError | None = None
        request: GradeRequest | None = None
        if problem is not None:
            error = ItemError(type="invalid_input", message=problem, line=line)
        else:
            try:
                request = check_request(
                    chartom_to_request(obj, context_window, line=line), settings
                )
            except InputError as exc:
                error = ItemError(
                    type="invalid_input", message=with_line(str(exc), line), field=exc.field,
                    line=line,
                )
        item_id = (request.id if request is not None else declared_id) or str(position)
        if request is not None:
            if item_id in seen:
                request = None
                error = ItemError(
                    type="invalid_input", message=with_line(f"id: duplicate id {item_id!r}", line),
                    field="id", line=line,
                )
            seen.add(item_id)
        out.append(JobItem(index, item_id, line, request, error))
    return out


def with_line(message: str, line: int | None) -> str:
    """Prefix ``message`` with its 1-based line number when it came from an uploaded file."""
    return message if line is None or message.startswith("line ") else f"line {line}: {message}"


def check_request(request: GradeRequest, settings: Settings) -> GradeRequest:
    """Apply the service's own limits to a valid request.

    Raises:
        InputError: (field ``bonus_points``) more points than ``settings.max_bonus_points``.
    """
    points = request.bonus_points
    if points is not None and len(points) > settings.max_bonus_points:
        raise InputError(
            f"bonus_points: {len(points)} points exceed the limit of "
            f"{settings.max_bonus_points} per item",
            field="bonus_points",
        )
    return request


# -- the store -----------------------------------------------------------------------------------


class JobStore:
    """The jobs database: one SQLite file in WAL mode, safe for several processes.

    Every method is synchronous and short; async callers run them with ``asyncio.to_thread``.
    Each thread gets its own connection (sqlite3 connections must not be shared concurrently).

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
        conn = self._conn()
        conn.executescript(_SCHEMA)
        self._migrate(conn)
        conn.executescript(_INDEXES)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Add the columns an older database lacks (several workers may race to do it).

        Version 3 stores request, result and error JSON compressed (``pack``, with the job's
        dictionaries); rows of older versions stay text, which ``unpack`` reads as is, so
        nothing is rewritten.
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

    def _conn(self) -> sqlite3.Connection:
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
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection this store opened."""
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    # -- writes ------------------------------------------------------------------------------

    def create(
        self,
        *,
        job_id: str,
        owner: str,
        items: Sequence[JobItem],
        overrides: JudgeOverrides | None,
        config: JudgeConfig | None,
        lease_owner: str | None,
        lease_seconds: float,
        kind: str = GRADE,
        options: Mapping[str, Any] | None = None,
        total: int | None = None,
        model: str | None = None,
        config_hash: str | None = None,
        quota: Quota | None = None,
    ) -> None:
        """Store a new job and its items; invalid items are recorded as finished entries.

        Args:
            job_id: The new job's id.
            owner: The API-key digest that owns it.
            items: Its items (none for a ``calibrate`` job).
            overrides: The judge selection of a grading job (stored to rebuild its config).
            config: The judge configuration; gives ``model`` and ``config_hash`` unless those are
                given.
            lease_owner: Token of the process that runs it at once, or None to leave it queued.
            lease_seconds: Length of that lease.
            kind: The job kind (``grade``, ``mcq``, ``calibrate``).
            options: Kind-specific options, stored as JSON.
            total: Units of work when the job has no item rows (default: the valid items).
            model: The judge model shown in the status (default ``config.model``).
            config_hash: The configuration hash shown in the status (default ``config``'s).
            quota: The owner's limits, checked in the storing transaction (none when None).

        Raises:
            QuotaExceeded: the job would take the owner over a limit of ``quota``.
        """
        now = time.time()
        valid = sum(1 for item in items if item.request is not None)
        if total is not None:
            valid = total
        shown_model = model if model is not None else (config.model if config else "")
        shown_hash = config_hash if config_hash is not None else (
            config.config_hash() if config else ""
        )
        invalid = len(items) - valid
        status: JobState = "queued" if valid else "done"
        holder = lease_owner if valid else None
        seq = 0
        rows: list[tuple[Any, ...]] = []
        stored = 0
        first = next((item.request for item in items if item.request is not None), None)
        request_dict = first.model_dump_json().encode("utf-8") if first is not None else None
        dicts = {_REQUESTS: request_dict} if request_dict is not None else {}
        stored += len(request_dict or b"")
        for item in items:
            if item.request is not None:
                request = pack(item.request.model_dump_json(), dicts, _REQUESTS)
                stored += _stored_size(request)
                rows.append((job_id, item.index, item.item_id, item.line, request, None, None))
            else:
                seq += 1
                error = pack(item.error.model_dump_json()) if item.error is not None else None
                stored += _stored_size(error)
                rows.append((job_id, item.index, item.item_id, item.line, None, error, seq))
        overrides_json = overrides.model_dump_json(exclude_none=True) if overrides else "{}"
        with self._tx() as conn:
            if quota is not None:
                quota.check(conn, owner, valid, stored)
            conn.execute(
                "INSERT INTO jobs (id, kind, options, owner, status, total, invalid, next_seq,"
                " overrides, model, config_hash, created_at, updated_at, lease_owner,"
                " lease_expires, bytes, request_dict) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, kind, json.dumps(dict(options or {})), owner, status, valid, invalid,
                 seq, overrides_json, shown_model, shown_hash, now, now, holder,
                 now + lease_seconds if holder else 0.0, stored, request_dict),
            )
            conn.executemany(
                "INSERT INTO items (job_id, idx, item_id, line, request, error, seq)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def claim(
        self, token: str, lease_seconds: float, limit: int, kinds: Sequence[str] = (GRADE,)
    ) -> list[str]:
        """Take the leases of up to ``limit`` unfinished jobs nobody holds, fairly across owners.

        Each lease goes to a job of the owner with the fewest jobs held right now (a live lease,
        in any process), oldest first among equals: a key with one small job is not queued
        behind every job of a key that submitted many. The counts are read in the claiming
        transaction, so the order holds across processes sharing the database.

        A job whose lease ``token`` itself holds is never claimed again, even when that lease
        has lapsed (an event loop blocked for a while): its runner is still alive here, and the
        next renewal revives the lease. Only jobs of ``kinds`` are claimed.
        """
        claimed: list[str] = []
        if not kinds:
            return claimed
        marks = ", ".join("?" for _ in kinds)
        claimable = (
            "SELECT id FROM jobs AS j WHERE status IN (?, ?) AND (lease_owner IS NULL OR"
            f" (lease_expires < ? AND lease_owner != ?)) AND kind IN ({marks})"
        )
        # A plain read first: an idle poll takes no write lock.
        if self._conn().execute(
            f"{claimable} LIMIT 1", (*_ACTIVE, time.time(), token, *kinds)
        ).fetchone() is None:
            return claimed
        for _ in range(limit):
            now = time.time()
            with self._tx() as conn:
                row = conn.execute(
                    f"{claimable} ORDER BY (SELECT COUNT(*) FROM jobs AS r WHERE"
                    " r.owner = j.owner AND r.status IN (?, ?) AND r.lease_owner IS NOT NULL"
                    " AND r.lease_expires >= ?), created_at LIMIT 1",
                    (*_ACTIVE, now, token, *kinds, *_ACTIVE, now),
                ).fetchone()
                if row is None:
                    break
                conn.execute(
                    "UPDATE jobs SET lease_owner = ?, lease_expires = ? WHERE id = ?",
                    (token, now + lease_seconds, row["id"]),
                )
            claimed.append(str(row["id"]))
        return claimed

    def held_by_owner(self) -> dict[str, int]:
        """Jobs held by a live lease (running somewhere), per owner."""
        rows = self._conn().execute(
            "SELECT owner, COUNT(*) AS n FROM jobs WHERE status IN (?, ?) AND lease_owner IS NOT"
            " NULL AND lease_expires >= ? GROUP BY owner",
            (*_ACTIVE, time.time()),
        ).fetchall()
        return {str(r["owner"]): int(r["n"]) for r in rows}

    def waiting_owners(self, kinds: Sequence[str]) -> set[str]:
        """Owners with a job of ``kinds`` that nobody holds (waiting to be claimed)."""
        if not kinds:
            return set()
        marks = ", ".join("?" for _ in kinds)
        rows = self._conn().execute(
            "SELECT DISTINCT owner FROM jobs WHERE status IN (?, ?) AND (lease_owner IS NULL OR"
            f" lease_expires < ?) AND kind IN ({marks})",
            (*_ACTIVE, time.time(), *kinds),
        ).fetchall()
        return {str(r["owner"]) for r in rows}

    def purge(self, before: float, limit: int = 200) -> list[tuple[str, str]]:
        """Delete up to ``limit`` finished jobs last changed before ``before``, with their items.

        Returns:
            ``(job id, kind)`` of each job deleted (the caller removes files kept beside them).
        """
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT id, kind FROM jobs WHERE status IN (?, ?, ?) AND updated_at < ?"
                " ORDER BY updated_at LIMIT ?",
                (*_FINISHED, before, limit),
            ).fetchall()
            for row in rows:
                conn.execute("DELETE FROM items WHERE job_id = ?", (row["id"],))
                conn.execute("DELETE FROM jobs WHERE id = ?", (row["id"],))
        return [(str(r["id"]), str(r["kind"])) for r in rows]

    def stale_own(self, token: str) -> list[str]:
        """Active jobs leased to ``token`` whose lease has lapsed (oldest first)."""
        rows = self._conn().execute(
            "SELECT id FROM jobs WHERE lease_owner = ? AND lease_expires < ? AND status IN (?, ?)"
            " ORDER BY created_at",
            (token, time.time(), *_ACTIVE),
        ).fetchall()
        return [str(r["id"]) for r in rows]

    def renew(self, job_id: str, token: str, lease_seconds: float) -> bool:
        """Extend a lease this process holds; False when lost or the job is no longer active."""
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET lease_expires = ? WHERE id = ? AND lease_owner = ? AND"
                " status IN (?, ?)",
                (time.time() + lease_seconds, job_id, token, *_ACTIVE),
            )
        return cursor.rowcount == 1

    def start_run(self, job_id: str, token: str) -> bool:
        """Mark a claimed job running and note where this run started (for the rate)."""
        now = time.time()
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET status = 'running', run_started_at = ?, run_start_done = done,"
                " updated_at = ? WHERE id = ? AND lease_owner = ? AND status IN (?, ?)",
                (now, now, job_id, token, *_ACTIVE),
            )
        return cursor.rowcount == 1

    def save_result(self, job_id: str, index: int, result: GradeResult) -> bool:
        """Store one item's result in its own transaction; False if it already had one."""
        return self.save_results(
            job_id, [(index, result.model_dump_json(), result.status, result.status == "scored")]
        ) == 1

    def save_results(
        self, job_id: str, results: Sequence[tuple[int, str, str, bool]]
    ) -> int:
        """Store several results in one transaction; returns how many were new.

        Args:
            job_id: The job.
            results: ``(index, result JSON, status label, scored)`` per item. An item that
                already has a result is left alone (never counted twice).
        """
        if not results:
            return 0
        saved = 0
        scored_count = 0
        added = 0
        with self._tx() as conn:
            row = conn.execute(
                "SELECT next_seq, result_dict FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
            if row is None:
                return 0
            seq = int(row["next_seq"])
            result_dict: bytes | None = row["result_dict"]
            if result_dict is None:
                # The job's first result becomes the dictionary of all its results.
                result_dict = results[0][1].encode("utf-8")
                conn.execute(
                    "UPDATE jobs SET result_dict = ?, bytes = bytes + ? WHERE id = ?",
                    (result_dict, len(result_dict), job_id),
                )
            dicts = {_RESULTS: result_dict}
            for index, payload, status, scored in results:
                stored = pack(payload, dicts, _RESULTS)
                cursor = conn.execute(
                    "UPDATE items SET result = ?, status = ?, seq = ? WHERE job_id = ? AND"
                    " idx = ? AND result IS NULL AND request IS NOT NULL",
                    (stored, status, seq + 1, job_id, index),
                )
                if cursor.rowcount == 1:
                    seq += 1
                    saved += 1
                    scored_count += int(scored)
                    added += _stored_size(stored)
            if saved:
                conn.execute(
                    "UPDATE jobs SET next_seq = ?, done = done + ?, scored = scored + ?,"
                    " unscored = unscored + ?, bytes = bytes + ?, updated_at = ? WHERE id = ?",
                    (seq, saved, scored_count, saved - scored_count, added, time.time(), job_id),
                )
        return saved

    def complete_if_finished(self, job_id: str, token: str) -> bool:
        """Mark a running job done when every valid item has a result."""
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET status = 'done', lease_owner = NULL, lease_expires = 0,"
                " updated_at = ? WHERE id = ? AND lease_owner = ? AND status IN (?, ?)"
                " AND done >= total",
                (time.time(), job_id, token, *_ACTIVE),
            )
        return cursor.rowcount == 1

    def fail(self, job_id: str, token: str, detail: str) -> None:
        """Mark a job this process runs as failed."""
        with self._tx() as conn:
            conn.execute(
                "UPDATE jobs SET status = 'failed', detail = ?, lease_owner = NULL,"
                " lease_expires = 0, updated_at = ? WHERE id = ? AND lease_owner = ? AND"
                " status IN (?, ?)",
                (detail, time.time(), job_id, token, *_ACTIVE),
            )

    def release(self, job_id: str, token: str) -> None:
        """Give up a lease; an unfinished job goes back to ``queued`` for the next process."""
        with self._tx() as conn:
            conn.execute(
                "UPDATE jobs SET lease_owner = NULL, lease_expires = 0, status = CASE WHEN"
                " status = 'running' THEN 'queued' ELSE status END WHERE id = ? AND"
                " lease_owner = ?",
                (job_id, token),
            )

    def reset_unscored(
        self, job_id: str, owner: str, *, lease_owner: str | None, lease_seconds: float
    ) -> int | None:
        """Put a finished grading job's unscored items back in the queue; returns how many.

        Their stored results are removed (the results stream then holds them only once they
        are graded again) and the job is queued again, leased to ``lease_owner`` when given.
        None when there is no such grading job of ``owner``.

        Raises:
            Conflict: the job is not ``done`` (still running, cancelled or failed).
        """
        now = time.time()
        with self._tx() as conn:
            row = conn.execute(
                "SELECT status, kind FROM jobs WHERE id = ? AND owner = ?", (job_id, owner)
            ).fetchone()
            if row is None or row["kind"] != GRADE:
                return None
            if row["status"] != "done":
                raise Conflict(
                    f"job {job_id} is {row['status']}: only a finished (done) job's unscored "
                    "items can be graded again",
                    field="job_id",
                )
            freed = conn.execute(
                "SELECT COALESCE(SUM(LENGTH(CAST(result AS BLOB))), 0) AS n FROM items WHERE"
                " job_id = ? AND status = 'unscored' AND request IS NOT NULL",
                (job_id,),
            ).fetchone()["n"]
            reset = conn.execute(
                "UPDATE items SET result = NULL, status = NULL, seq = NULL WHERE job_id = ? AND"
                " status = 'unscored' AND request IS NOT NULL",
                (job_id,),
            ).rowcount
            if reset:
                conn.execute(
                    "UPDATE jobs SET status = 'queued', detail = NULL, done = done - ?,"
                    " unscored = unscored - ?, bytes = MAX(bytes - ?, 0), lease_owner = ?,"
                    " lease_expires = ?, updated_at = ? WHERE id = ?",
                    (reset, reset, int(freed), lease_owner,
                     now + lease_seconds if lease_owner else 0.0, now, job_id),
                )
        return reset

    def set_progress(self, job_id: str, token: str, done: int, scored: int) -> bool:
        """Record the progress of a job without item rows (a calibration run) run here.

        ``done`` units are finished, ``scored`` of them scored. False when the lease is lost.
        """
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET done = ?, scored = ?, unscored = ?, updated_at = ? WHERE id = ?"
                " AND lease_owner = ? AND status IN (?, ?)",
                (done, scored, max(done - scored, 0), time.time(), job_id, token, *_ACTIVE),
            )
        return cursor.rowcount == 1

    def cancel(self, job_id: str, owner: str, kind: str | None = None) -> bool:
        """Cancel an active job of ``owner``; False when unknown. Finished results are kept."""
        with self._tx() as conn:
            row = conn.execute(
                "SELECT status, kind FROM jobs WHERE id = ? AND owner = ?", (job_id, owner)
            ).fetchone()
            if row is not None and kind is not None and row["kind"] != kind:
                row = None
            if row is None:
                return False
            if row["status"] in _ACTIVE:
                conn.execute(
                    "UPDATE jobs SET status = 'cancelled', detail = 'cancelled by request',"
                    " lease_owner = NULL, lease_expires = 0, updated_at = ? WHERE id = ?",
                    (time.time(), job_id),
                )
        return True

    # -- reads -------------------------------------------------------------------------------

    def get(
        self, job_id: str, owner: str | None = None, kind: str | None = None
    ) -> sqlite3.Row | None:
        """The job's row (restricted to ``owner`` and to ``kind`` unless None)."""
        conn = self._conn()
        if owner is None:
            row: sqlite3.Row | None = conn.execute(
                "SELECT * FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT * FROM jobs WHERE id = ? AND owner = ?", (job_id, owner)
            ).fetchone()
        if row is not None and kind is not None and row["kind"] != kind:
            return None  # another kind's job is not visible through this route family
        return row

    def list_jobs(
        self,
        owner: str,
        kind: str,
        status: str | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[sqlite3.Row]:
        """Jobs of ``owner`` and ``kind`` (optionally of one status), newest first.

        Args:
            owner: The caller's identity; other owners' jobs are never returned.
            kind: The job kind (``GRADE``, ...).
            status: Only jobs in this status, when given.
            limit: At most this many rows (all when None).
            offset: Skip this many rows of the newest-first order first.
        """
        query = "SELECT * FROM jobs WHERE owner = ? AND kind = ?"
        params: list[Any] = [owner, kind]
        if status is not None:
            query += " AND status = ?"
            params.append(status)
        # The id orders jobs created in the same instant, or two pages could repeat or skip one.
        query += " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
        # SQLite integers are 64-bit; past that, any offset is beyond the last job anyway.
        params += [-1 if limit is None else min(limit, 2**63 - 1), min(offset, 2**63 - 1)]
        return self._conn().execute(query, params).fetchall()

    def _dicts(self, job_id: str) -> dict[int, bytes]:
        """The job's compression dictionaries (what ``unpack`` needs to read its blobs)."""
        row = self._conn().execute(
            "SELECT request_dict, result_dict FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if row is None:
            return {}
        found = {_REQUESTS: row["request_dict"], _RESULTS: row["result_dict"]}
        return {tag: bytes(value) for tag, value in found.items() if value is not None}

    def item_errors(self, job_id: str) -> list[tuple[int, int | None, str]]:
        """Items rejected at submission: ``(index, line or None, error JSON)`` in input order."""
        rows = self._conn().execute(
            "SELECT idx, line, error FROM items WHERE job_id = ? AND error IS NOT NULL"
            " ORDER BY idx",
            (job_id,),
        ).fetchall()
        return [
            (int(r["idx"]), None if r["line"] is None else int(r["line"]), unpack(r["error"]))
            for r in rows
        ]

    def pending(self, job_id: str, after: int, limit: int) -> list[tuple[int, str, str]]:
        """Valid items without a result, with index above ``after``: (index, item id, JSON)."""
        rows = self._conn().execute(
            "SELECT idx, item_id, request FROM items WHERE job_id = ? AND idx > ? AND"
            " result IS NULL AND request IS NOT NULL ORDER BY idx LIMIT ?",
            (job_id, after, limit),
        ).fetchall()
        dicts = self._dicts(job_id) if rows else {}
        return [(int(r["idx"]), str(r["item_id"]), unpack(r["request"], dicts)) for r in rows]

    def entries(self, job_id: str, after_seq: int, up_to: int, limit: int) -> list[tuple[int, str]]:
        """Finished entries ``after_seq < seq <= up_to`` in finishing order, as NDJSON lines."""
        rows = self._conn().execute(
            "SELECT seq, idx, item_id, result, error FROM items WHERE job_id = ? AND seq > ?"
            " AND seq <= ? ORDER BY seq LIMIT ?",
            (job_id, after_seq, up_to, limit),
        ).fetchall()
        dicts = self._dicts(job_id) if rows else {}
        # The stored JSON is spliced in as is (once decompressed): no parse and re-dump per line.
        return [
            (
                int(r["seq"]),
                f'{{"index": {int(r["idx"])}, "id": {json.dumps(r["item_id"])}, '
                f'"result": {unpack(r["result"], dicts) if r["result"] else "null"}, '
                f'"error": {unpack(r["error"], dicts) if r["error"] else "null"}}}\n',
            )
            for r in rows
        ]

    def results(self, job_id: str) -> Iterator[GradeResult]:
        """Every stored result of a job, in finishing order, read in pages."""
        for payload in self.raw_results(job_id):
            yield GradeResult.model_validate_json(payload)

    def raw_results(self, job_id: str) -> Iterator[str]:
        """Every stored result of a job as its JSON text, in finishing order, read in pages."""
        after = 0
        while True:
            rows = self._conn().execute(
                "SELECT seq, result FROM items WHERE job_id = ? AND seq > ? AND result IS NOT NULL"
                " ORDER BY seq LIMIT 500",
                (job_id, after),
            ).fetchall()
            if not rows:
                return
            dicts = self._dicts(job_id)  # per page: the result dictionary comes with a result
            for row in rows:
                yield unpack(row["result"], dicts)
            after = int(rows[-1]["seq"])

    def status_counts(self) -> dict[str, int]:
        """Number of jobs per status (for the Prometheus gauge)."""
        rows = self._conn().execute("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status")
        return {str(r["status"]): int(r["n"]) for r in rows}


def job_status(row: sqlite3.Row, *, now: float | None = None) -> JobStatus:
    """The public status of a job row, with the current run's rate and the ETA."""
    now = time.time() if now is None else now
    rate: float | None = None
    eta: float | None = None
    started = row["run_started_at"]
    graded = int(row["done"]) - int(row["run_start_done"])
    if row["status"] == "running" and started is not None and graded > 0 and now > started:
        rate = graded / (now - started)
        eta = round((int(row["total"]) - int(row["done"])) / rate, 2)
        rate = round(rate, 3)
    return JobStatus(
        id=row["id"],
        kind=row["kind"],
        status=row["status"],
        total=row["total"],
        done=row["done"],
        scored=row["scored"],
        unscored=row["unscored"],
        invalid=row["invalid"],
        rate_per_s=rate,
        eta_s=eta,
        created_at=_utc(row["created_at"]),
        updated_at=_utc(row["updated_at"]),
        judge=row["model"],
        config_hash=row["config_hash"],
        detail=row["detail"],
    )


def _summarize(store: JobStore, job_id: str) -> Summary:
    aggregator = Aggregator()
    counters = {"judge_calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0}
    cost = 0.0
    for result in store.results(job_id):
        aggregator.add(result)
        for call in result.provenance.calls:
            if call.cached:
                counters["cache_hits"] += 1
            else:
                counters["judge_calls"] += call.attempts
            counters["prompt_tokens"] += call.prompt_tokens or 0
            counters["completion_tokens"] += call.completion_tokens or 0
            cost += call.cost_usd or 0.0
    return aggregator.summary(**counters, cost_usd=round(cost, 6) if cost else None)


# -- the runner ----------------------------------------------------------------------------------

_T = TypeVar("_T")

_STORE_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Waits between attempts of a store write that failed (a full disk, a long lock)."""


async def _store_retry(fn: Callable[..., _T], *args: Any) -> _T:
    """Run a store call in a thread, retrying it when the database fails for a while.

    Raises:
        sqlite3.Error: the last failure, once the retries are spent.
    """
    for delay in (*_STORE_RETRY_DELAYS, None):
        try:
            return await asyncio.to_thread(fn, *args)
        except sqlite3.OperationalError:
            if delay is None:
                raise
            log.warning("job store: %s failed; retrying in %.1f s", fn.__name__, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover

JobRunner = Callable[["JobManager", str, sqlite3.Row], Awaitable[None]]
"""Runs one claimed job of a kind: ``runner(manager, job_id, row)``.

It holds the job's lease while it runs: it stores results (``manager.store``), stops feeding work
when ``manager.stopping`` is set, and leaves the job ``queued`` (just returning) when it could not
finish, or marks it done with ``store.complete_if_finished``. An exception marks the job failed
(a ``JudgeError``'s message is shown as the job's ``detail``).
"""


class JobManager:
    """Submits, runs, watches and cancels jobs for one service process.

    Args:
        store: The jobs database.
        grader: The engine that grades.
        lease_seconds: How long a claim lasts without renewal; a crashed process's jobs are
            taken over this long after its last renewal.
        poll_seconds: How often leases are renewed and unclaimed jobs looked for.
        drain_timeout: On shutdown, how long in-flight items may take to finish and be stored.
        max_running: Jobs one process runs at once (they share the grader's concurrency; each
            grading job has at most its share of it in flight, so a newly started job's items
            are graded at once rather than queued behind the others').
        retention_seconds: Finished jobs (items, results, files) are deleted this long after
            they last changed; 0 keeps them.
        purge_seconds: How often the poll loop looks for expired jobs.
    """

    def __init__(
        self,
        store: JobStore,
        grader: Grader,
        *,
        lease_seconds: float = 30.0,
        poll_seconds: float = 1.0,
        drain_timeout: float = 30.0,
        max_running: int = 4,
        retention_seconds: float = 0.0,
        purge_seconds: float = 300.0,
    ) -> None:
        if lease_seconds <= 2 * poll_seconds:
            raise ValueError("lease_seconds must exceed twice poll_seconds, or leases lapse")
        self.store = store
        self.grader = grader
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.drain_timeout = drain_timeout
        self.max_running = max_running
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        self._runners: dict[str, JobRunner] = {GRADE: JobManager._run_grade}
        self._purgers: dict[str, Callable[[str], None]] = {}
        self.retention_seconds = retention_seconds
        self.purge_seconds = purge_seconds
        self._last_purge = float("-inf")
        # Jobs running here: (owner, kind), and the grading jobs asked to make room for others.
        self._running: dict[str, tuple[str, str]] = {}
        self._yielding: set[str] = set()

    def register(
        self, kind: str, runner: JobRunner, *, purge: Callable[[str], None] | None = None
    ) -> None:
        """Run jobs of ``kind`` with ``runner`` (this process then claims that kind too).

        ``purge(job_id)``, when given, removes what a job of this kind keeps outside the store
        (a calibration report) once retention deletes the job.
        """
        self._runners[kind] = runner
        if purge is not None:
            self._purgers[kind] = purge

    @property
    def stopping(self) -> asyncio.Event:
        """Set when the service shuts down: runners stop feeding new work."""
        return self._stopping

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the claim/renew loop (it picks up unfinished jobs at once)."""
        self._stopping = asyncio.Event()
        self._poller = asyncio.create_task(self._poll(), name="bonusjudge-jobs-poll")

    async def stop(self) -> None:
        """Stop feeding items, let in-flight ones finish (bounded), release every lease."""
        self._stopping.set()
        if self._poller is not None:
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        tasks = list(self._tasks.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.drain_timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def _poll(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._tick()
            except Exception:
                log.exception("job lease renewal or claim failed")
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self.poll_seconds)

    async def _tick(self) -> None:
        for job_id, task in list(self._tasks.items()):
            held = await asyncio.to_thread(self.store.renew, job_id, self.token, self.lease_seconds)
            if not held and not task.done():
                log.info("job %s: lease lost or job cancelled; stopping it here", job_id)
                task.cancel()
        if not self._stopping.is_set():
            # Jobs this process holds but no longer runs (a release that failed on a full disk):
            # take them up again, rather than leaving them "running" until a restart.
            for job_id in await asyncio.to_thread(self.store.stale_own, self.token):
                running = self._tasks.get(job_id)
                if running is not None and not running.done():
                    continue  # still running here; its next renewal revives the lease
                if len(self._tasks) < self.max_running and await asyncio.to_thread(
                    self.store.renew, job_id, self.token, self.lease_seconds
                ):
                    log.info("job %s: reclaiming this process's lapsed lease", job_id)
                    self._launch(job_id)
        free = self.max_running - len(self._tasks)
        if free > 0 and not self._stopping.is_set():
            claimed = await asyncio.to_thread(
                self.store.claim, self.token, self.lease_seconds, free, tuple(self._runners)
            )
            for job_id in claimed:
                self._launch(job_id)
        elif not self._stopping.is_set():
            await self._make_room()
        await self._purge_expired()

    async def _make_room(self) -> None:
        """When full and another owner waits with fewer jobs held, hand one slot over.

        The grading job (run here) of the owner holding the most jobs stops feeding items, lets
        its in-flight ones finish and be stored, and goes back to the queue, where the fair
        claim order gives the slot to the waiting owner. One at a time, and only while that
        owner holds at least two jobs more than the waiting one, so shares even out without
        jobs changing hands back and forth.
        """
        if self._yielding & set(self._tasks):
            return  # one hand-over at a time
        waiting = await asyncio.to_thread(self.store.waiting_owners, tuple(self._runners))
        if not waiting:
            return
        held = await asyncio.to_thread(self.store.held_by_owner)
        fewest = min(held.get(owner, 0) for owner in waiting)
        candidates = [
            (held.get(owner, 0), job_id)
            for job_id, (owner, kind) in self._running.items()
            if kind == GRADE and job_id in self._tasks and job_id not in self._yielding
            and held.get(owner, 0) >= fewest + 2
        ]
        if candidates:
            _, job_id = max(candidates)
            log.info("job %s: making room for another API key's job", job_id)
            self._yielding.add(job_id)

    async def _purge_expired(self) -> None:
        """Delete finished jobs past the retention period (at most every ``purge_seconds``)."""
        now = time.monotonic()
        if self.retention_seconds <= 0 or now - self._last_purge < self.purge_seconds:
            return
        self._last_purge = now
        before = time.time() - self.retention_seconds
        while True:
            purged = await asyncio.to_thread(self.store.purge, before)
            for job_id, kind in purged:
                purge = self._purgers.get(kind)
                if purge is not None:
                    try:
                        await asyncio.to_thread(purge, job_id)
                    except OSError:
                        log.exception("job %s: could not remove its files", job_id)
            if purged:
                log.info("retention: deleted %d finished job(s)", len(purged))
            if len(purged) < 200:
                return

    def _launch(self, job_id: str) -> None:
        running = self._tasks.get(job_id)
        if running is not None and not running.done():
            return  # one runner per job per process, whatever the database says
        name = f"bonusjudge-job-{job_id}"
        self._tasks[job_id] = asyncio.create_task(self._run(job_id), name=name)

    # -- API ---------------------------------------------------------------------------------

    async def submit(
        self,
        *,
        owner: str,
        items: Sequence[JobItem],
        overrides: JudgeOverrides | None,
        config: JudgeConfig | None,
        kind: str = GRADE,
        options: Mapping[str, Any] | None = None,
        total: int | None = None,
        model: str | None = None,
        config_hash: str | None = None,
        job_id: str | None = None,
        quota: Quota | None = None,
    ) -> JobStatus:
        """Store a job and start running it here when this process has room.

        The keyword arguments after ``config`` are those of ``JobStore.create``; ``job_id`` is
        generated unless given (a caller that prepares files under the id first passes it).

        Raises:
            QuotaExceeded: the job would take ``owner`` over a limit of ``quota``.
        """
        job_id = job_id or uuid.uuid4().hex
        run_here = (
            not self._stopping.is_set()
            and len(self._tasks) < self.max_running
            and kind in self._runners
        )
        await asyncio.to_thread(
            lambda: self.store.create(
                job_id=job_id, owner=owner, items=items, overrides=overrides, config=config,
                lease_owner=self.token if run_here else None, lease_seconds=self.lease_seconds,
                kind=kind, options=options, total=total, model=model, config_hash=config_hash,
                quota=quota,
            )
        )
        row = await asyncio.to_thread(self.store.get, job_id)
        assert row is not None
        if run_here and row["status"] == "queued":
            self._launch(job_id)
        return job_status(row)

    async def row(self, job_id: str, owner: str, kind: str = GRADE) -> sqlite3.Row:
        """The job's database row.

        Raises:
            NotFound: no such job of this kind for this owner.
        """
        row = await asyncio.to_thread(self.store.get, job_id, owner, kind)
        if row is None:
            raise NotFound(f"no job {job_id!r}")
        return row

    async def status(self, job_id: str, owner: str, kind: str = GRADE) -> JobStatus:
        """The job's status.

        Raises:
            NotFound: no such job of this kind for this owner.
        """
        return job_status(await self.row(job_id, owner, kind))

    async def cancel(self, job_id: str, owner: str, kind: str = GRADE) -> JobStatus:
        """Cancel a job (a no-op on a finished one); finished results are kept.

        Raises:
            NotFound: no such job of this kind for this owner.
        """
        if not await asyncio.to_thread(self.store.cancel, job_id, owner, kind):
            raise NotFound(f"no job {job_id!r}")
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()
        # Another worker running it sees the cancellation when it next renews its lease.
        return await self.status(job_id, owner, kind)

    async def retry_unscored(self, job_id: str, owner: str) -> JobStatus:
        """Grade a finished job's unscored items again (as the CLI's ``--retry-unscored``).

        Raises:
            NotFound: no such grading job for this owner.
            Conflict: the job is not done.
        """
        run_here = not self._stopping.is_set() and len(self._tasks) < self.max_running
        reset = await asyncio.to_thread(
            lambda: self.store.reset_unscored(
                job_id, owner, lease_owner=self.token if run_here else None,
                lease_seconds=self.lease_seconds,
            )
        )
        if reset is None:
            raise NotFound(f"no job {job_id!r}")
        if reset and run_here:
            self._launch(job_id)
        return await self.status(job_id, owner)

    async def entries(
        self, job_id: str, owner: str, offset: int, kind: str = GRADE
    ) -> AsyncIterator[str]:
        """NDJSON lines of the entries finished so far, skipping the first ``offset``.

        Raises:
            NotFound: no such job of this kind for this owner (raised before the first line).
        """
        row = await self.row(job_id, owner, kind)
        # A snapshot: the stream ends at what was finished when it was requested.
        return self._entry_lines(job_id, offset, int(row["next_seq"]))

    async def _entry_lines(self, job_id: str, after: int, up_to: int) -> AsyncIterator[str]:
        while after < up_to:
            page = await asyncio.to_thread(self.store.entries, job_id, after, up_to, 500)
            if not page:
                return
            for seq, line in page:
                yield line
                after = seq

    async def summary(self, job_id: str, owner: str) -> Summary:
        """Aggregates over the results stored so far.

        Raises:
            NotFound: no such job for this owner.
        """
        await self.status(job_id, owner)
        return await asyncio.to_thread(_summarize, self.store, job_id)

    # -- running one job ---------------------------------------------------------------------

    async def _run(self, job_id: str) -> None:
        try:
            row = await asyncio.to_thread(self.store.get, job_id)
            runner = self._runners.get(row["kind"]) if row is not None else None
            if row is not None and runner is not None:
                self._running[job_id] = (str(row["owner"]), str(row["kind"]))
                # This task's judge calls are made for the job's owner (its own context copy).
                TENANT.set(str(row["owner"]))
                await runner(self, job_id, row)
        except asyncio.CancelledError:
            log.info("job %s: stopped in this process", job_id)
            raise
        except sqlite3.Error:
            # The store itself failed (a full disk): not the job's fault. It is released below
            # (or, if even that fails, its lease lapses and this process reclaims it), so it
            # goes on once the store works again.
            log.exception("job %s: the job store failed; the job will be retried", job_id)
        except Exception as exc:
            log.exception("job %s failed", job_id)
            detail = str(exc) if isinstance(exc, JudgeError) else (
                f"grading stopped by an unexpected {type(exc).__name__}; see the service log"
            )
            with suppress(sqlite3.Error):  # if even this fails, the lease lapses and is reclaimed
                await _store_retry(self.store.fail, job_id, self.token, detail)
        finally:
            if self._tasks.get(job_id) is asyncio.current_task():
                del self._tasks[job_id]
                self._running.pop(job_id, None)
                self._yielding.discard(job_id)
            try:
                # Synchronous on purpose: it must run even while this task is being cancelled.
                self.store.release(job_id, self.token)
            except sqlite3.Error:
                log.exception("job %s: could not release its lease", job_id)

    @staticmethod
    async def _run_grade(manager: JobManager, job_id: str, row: sqlite3.Row) -> None:
        await manager._grade_job(job_id, row)

    async def _grade_job(self, job_id: str, row: sqlite3.Row) -> None:
        config = self.grader.resolve(JudgeOverrides.model_validate_json(row["overrides"]))
        if config.config_hash() != row["config_hash"]:
            # Mixing two judge configurations in one job would make its aggregates meaningless.
            await asyncio.to_thread(
                self.store.fail, job_id, self.token,
                f"the judge settings changed since the job was created (config hash "
                f"{row['config_hash']} -> {config.config_hash()}); submit it again",
            )
            return
        # Wait for the warm-up (the same serialized loader): a job resumed at start-up would
        # otherwise make its first heavy imports while the start-up thread is making them.
        await self.grader.prepare(config)
        if not await asyncio.to_thread(self.store.start_run, job_id, self.token):
            return
        await self._grade_items(job_id, config)
        await _store_retry(self.store.complete_if_finished, job_id, self.token)

    def share(self, concurrency: int) -> int:
        """Items one job may have in flight: its share of the grader's concurrency.

        Jobs running here share the grader's semaphore; were each to queue as many items as it
        can, a job started later would wait behind all of theirs. With at most its share in
        flight, each job gets about the same number of slots whenever one frees up.
        """
        return max(1, math.ceil(concurrency / max(1, len(self._tasks))))

    def halted(self, job_id: str) -> bool:
        """Whether a job should stop feeding work (shutdown, or making room for another key)."""
        return self._stopping.is_set() or job_id in self._yielding

    async def _grade_items(self, job_id: str, config: JudgeConfig) -> None:
        """Grade a job's pending items, at most ``share`` in flight, storing each result."""
        pending: dict[asyncio.Task[GradeResult], int] = {}
        page: list[tuple[int, str, str]] = []
        after = -1
        exhausted = False

        async def fill() -> None:
            nonlocal page, after, exhausted
            while (
                not exhausted and not self.halted(job_id)
                and len(pending) < self.share(config.concurrency)
            ):
                if not page:
                    page = await asyncio.to_thread(self.store.pending, job_id, after, 256)
                    page.reverse()  # popped from the end, in index order
                    if not page:
                        exhausted = True
                        return
                index, item_id, payload = page.pop()
                after = index
                request = GradeRequest.model_validate_json(payload)
                task = asyncio.ensure_future(
                    self.grader.grade(request, config=config, item_id=item_id)
                )
                pending[task] = index

        try:
            await fill()
            while pending:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                finished = [(pending.pop(task), task) for task in done]
                await fill()  # the freed slots work while the results are stored
                for index, task in finished:
                    await _store_retry(self.store.save_result, job_id, index, task.result())
                await fill()
        finally:
            for task in pending:
                task.cancel()
