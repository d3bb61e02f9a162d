"""Item rows and results in SQL: a job's submitted items, their results, and the result stream.

A result is a row of ``results`` keyed by its item, ``(job_id, idx)``: it is inserted with
``ON CONFLICT DO NOTHING``, so an item's result is written exactly once whatever writers race
(two replicas finishing the same item after a lease takeover): the primary key refuses the
second, which is then not counted. Results are numbered in finishing order (``seq``, unique per
job, from the job's ``next_seq``), and the job's counts (``done``, ``scored``, ``unscored``)
change in the same transaction as the rows they count, with the job's row locked, so counts and
rows agree under concurrent writers, and a result is numbered after every result committed
before it (a reader paging by ``seq`` never sees one appear behind it). On Postgres that
transaction is one statement (``_SAVE_POSTGRES``), committed as it ends: the job's row is locked
for as long as the server takes to insert the rows, never while a client thinks or stops (a
replica paused mid-save holds no other replica's results up). On SQLite the file's write lock
serializes writers. A number a lost race took (two writers of one item: the second inserts
nothing) is skipped, so the results stream counts its offset in lines, not numbers.

An item with a stored result is never graded again, so a restarted service resumes exactly where
the last one stopped. Requests, results and errors are stored compressed with the job's
dictionaries (``codec``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    insert,
    select,
    text,
    update,
)

from api.jobs.codec import REQUESTS, RESULTS, pack, stored_size, unpack
from api.jobs.database import Database, DialectStatements
from api.jobs.schema import INVALID, items, jobs, results
from bonusjudge_client.wire.grading import GradeResult
from bonusjudge_client.wire.schemas import ItemError

_PAGE = 500
"""Rows read at a time by the result iterators."""


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


MAX_LISTED_INVALID = 1_000
"""Invalid items of a job stored one by one, each an error entry of its results (the first, in
input order); the others are only counted (the job's ``invalid``). A row per bad line let a
0.8 MB upload of 100,000 of them write 31.5 MB."""

MAX_ERROR_CHARS = 300
"""Longest message (and field, id) stored for an invalid item; a longer one is cut, ending in
``…`` (a message may quote what was sent: an id, a key)."""


@dataclass(frozen=True)
class RowCosts:
    """Bytes a store takes per row beyond the values it counts (index entries, page slack).

    Measured on each engine with 32-character job ids: what the stored-bytes quota adds so that
    it counts what is written, not the compressed blobs alone.

    Attributes:
        item: An ``items`` row, beyond its item id, request and error.
        entry: An invalid item's ``results`` row (with its two index entries).
        chunk: A ``chunks`` row (with its index entries).
        job: A ``jobs`` row (with its index entries), beyond its request dictionary.
    """

    item: int
    entry: int
    chunk: int
    job: int


SQLITE_ROWS = RowCosts(item=62, entry=155, chunk=110, job=300)
"""``RowCosts`` of the SQLite store (a bad line's item and entry rows took 340 bytes there)."""

POSTGRES_ROWS = RowCosts(item=178, entry=280, chunk=190, job=400)
"""``RowCosts`` of the Postgres store (tuple headers and line pointers weigh more there)."""


@dataclass(frozen=True)
class EncodedItems:
    """A job's items as rows ready to insert, with what they take in the store.

    Attributes:
        batches: ``items`` rows (``job_id, idx, item_id, line, request, error``) in batches:
            one per valid item and per listed invalid one (``MAX_LISTED_INVALID``). Iterated
            once, when the job is stored (read back from disk for a staged upload).
        entries: ``results`` rows of the listed invalid items, finished entries at once (their
            error numbered in the result stream).
        submitted: Items submitted, valid or not.
        valid: The valid items.
        span: One past the index of the last valid item (0 without one): the job's chunks
            cover the indexes below it, since no item after it is to grade.
        rows: ``items`` rows in ``batches``.
        values: Bytes of their item ids, requests and errors, and of the request dictionary.
        request_dict: The job's request dictionary (its first valid request), if any.
        finished: Entries numbered already (the listed invalid items).
    """

    batches: Iterable[Sequence[dict[str, Any]]]
    entries: list[dict[str, Any]]
    submitted: int
    valid: int
    span: int
    rows: int
    values: int
    request_dict: bytes | None
    finished: int

    def stored(self, costs: RowCosts, chunks: int) -> int:
        """Bytes the job takes in a store of ``costs`` once stored with ``chunks`` chunks."""
        return (self.values + self.rows * costs.item + len(self.entries) * costs.entry
                + chunks * costs.chunk + costs.job)


def _cut(text: str | None) -> str | None:
    """``text`` within ``MAX_ERROR_CHARS``."""
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    return text[:MAX_ERROR_CHARS - 1] + "…"


class ItemEncoder:
    """Encodes a job's items one at a time into the rows that store them, counting their bytes.

    The job's first valid request becomes its request dictionary (every request is compressed
    with it). An invalid item is stored compactly: its error (message, field and id cut to
    ``MAX_ERROR_CHARS``) for the first ``MAX_LISTED_INVALID``, nothing past them (counted in
    ``submitted`` only). An upload is encoded as it is read, never held whole
    (``api.jobs.staging``).

    Args:
        job_id: The job the rows belong to.
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.submitted = self.valid = self.span = self.rows = self.values = 0
        self.request_dict: bytes | None = None
        self.entries: list[dict[str, Any]] = []
        self._dicts: dict[int, bytes] = {}

    def add(self, item: JobItem) -> dict[str, Any] | None:
        """Count ``item``; its ``items`` row, or None for an invalid item past the listed ones."""
        self.submitted += 1
        request = error = None
        item_id = item.item_id
        if item.request is not None:
            self.valid += 1
            self.span = item.index + 1
            text = item.request.model_dump_json()
            if self.request_dict is None:
                self.request_dict = text.encode("utf-8")
                self._dicts = {REQUESTS: self.request_dict}
                self.values += len(self.request_dict)
            request = pack(text, self._dicts, REQUESTS)
        else:
            if len(self.entries) >= MAX_LISTED_INVALID:
                return None
            if item.error is not None:
                short = item.error.model_copy(update={
                    "message": _cut(item.error.message), "field": _cut(item.error.field)})
                error = pack(short.model_dump_json())
            item_id = _cut(item_id)
            self.entries.append({"job_id": self.job_id, "idx": item.index,
                                 "seq": len(self.entries) + 1, "status": INVALID,
                                 "result": None, "size": 0})
        self.rows += 1
        self.values += stored_size(item_id) + stored_size(request) + stored_size(error)
        return {"job_id": self.job_id, "idx": item.index, "item_id": item_id,
                "line": item.line, "request": request, "error": error}

    def encoded(self, batches: Iterable[Sequence[dict[str, Any]]]) -> EncodedItems:
        """What was added, its rows being ``batches``."""
        return EncodedItems(
            batches, self.entries, self.submitted, self.valid, self.span, self.rows,
            self.values, self.request_dict, len(self.entries),
        )


def _pending(before: bool) -> Select[tuple[int, str | None, bytes | None]]:
    """The pending-items query: valid items of ``:job`` without a result, in index order.

    Items ``:after < idx`` (and ``< :before`` when ``before``), at most ``:most``.
    """
    finished = select(results.c.idx).where(
        results.c.job_id == items.c.job_id, results.c.idx == items.c.idx
    )
    query = (
        select(items.c.idx, items.c.item_id, items.c.request)
        .where(
            items.c.job_id == bindparam("job", type_=String),
            items.c.idx > bindparam("after", type_=Integer),
            items.c.request.is_not(None),
            ~finished.exists(),
        )
        .order_by(items.c.idx)
        .limit(bindparam("most", type_=Integer))
    )
    return query.where(items.c.idx < bindparam("before", type_=Integer)) if before else query


# Read for every chunk a worker feeds, and the dictionaries with each page read: built once
# (their values are parameters), as the result statements are (``_SaveStatements``).
_PENDING = _pending(before=False)
_PENDING_BEFORE = _pending(before=True)
_DICTS = select(jobs.c.request_dict, jobs.c.result_dict).where(
    jobs.c.id == bindparam("job", type_=String)
)
_RESULT_DICT = select(jobs.c.result_dict).where(jobs.c.id == bindparam("job", type_=String))

_SAVE_POSTGRES = text("""
WITH job AS (
    SELECT next_seq FROM jobs WHERE id = :job FOR UPDATE
), incoming AS (
    SELECT * FROM unnest(
        CAST(:idx AS integer[]), CAST(:status AS text[]), CAST(:result AS bytea[]),
        CAST(:size AS bigint[]), CAST(:scored AS boolean[])
    ) WITH ORDINALITY AS given(idx, status, result, size, scored, ord)
), fresh AS (
    SELECT incoming.*, row_number() OVER (ORDER BY incoming.ord) AS n
    FROM incoming
    JOIN items ON items.job_id = :job AND items.idx = incoming.idx
        AND items.request IS NOT NULL
    WHERE NOT EXISTS (
        SELECT 1 FROM results WHERE results.job_id = :job AND results.idx = incoming.idx
    )
), inserted AS (
    INSERT INTO results (job_id, idx, seq, status, result, size)
    SELECT :job, fresh.idx, job.next_seq + fresh.n, fresh.status, fresh.result, fresh.size
    FROM fresh CROSS JOIN job
    ON CONFLICT (job_id, idx) DO NOTHING
    RETURNING idx, seq, size
), added AS (
    SELECT count(*) AS n, count(*) FILTER (WHERE incoming.scored) AS scored,
        coalesce(sum(inserted.size), 0) AS bytes, max(inserted.seq) AS last
    FROM inserted JOIN incoming ON incoming.idx = inserted.idx
)
UPDATE jobs SET
    next_seq = added.last, done = jobs.done + added.n, scored = jobs.scored + added.scored,
    unscored = jobs.unscored + added.n - added.scored, bytes = jobs.bytes + added.bytes,
    updated_at = CAST(EXTRACT(epoch FROM statement_timestamp()) AS double precision)
FROM added
WHERE jobs.id = :job AND added.n > 0
RETURNING added.n
""")
"""``ItemRows.save_results`` on Postgres, one statement: the job's row is locked first (its
``next_seq`` as the last writer left it), the valid items of the batch without a result are
numbered after it in the batch's order and inserted, and the job's counts grow by what was
inserted. An item another writer stored meanwhile (after this statement's snapshot) is refused
by the primary key and counted nowhere; only its number is skipped. The lock ends with the
statement, which the server commits on its own (``Database.autocommit``)."""


class _SaveStatements(DialectStatements):
    """``ItemRows.save_results``'s statements, built once per dialect and run with parameters.

    Building a statement and computing its cache key cost more CPU than SQLite takes to run it
    (2.7 ms of CPU per one-result transaction when built per call, most of it there); a
    statement object built once reuses its key and its compiled form. They hold no values, so
    every store of a dialect shares them (building them takes a few ms: per store, that was
    a tenth of a test service's start-up).
    """

    def __init__(self, db: Database) -> None:
        job = jobs.c.id == bindparam("job_id")
        self.lock_job = select(jobs.c.next_seq, jobs.c.result_dict).where(job).with_for_update()
        # Only while the job has none: the first writer's result is every writer's dictionary.
        self.set_result_dict = update(jobs).where(job, jobs.c.result_dict.is_(None)).values(
            result_dict=bindparam("new_dict", type_=jobs.c.result_dict.type),
            bytes=jobs.c.bytes + bindparam("dict_size", type_=BigInteger),
        )
        # INSERT ... SELECT from the item: only a valid item of this job gets a result, and the
        # primary key leaves an item that has one alone; a row comes back only when inserted.
        source = select(
            items.c.job_id, items.c.idx, bindparam("new_seq", type_=Integer),
            bindparam("new_status", type_=String),
            bindparam("new_result", type_=results.c.result.type),
            bindparam("new_size", type_=Integer),
        ).where(
            and_(items.c.job_id == bindparam("job_id"), items.c.idx == bindparam("idx"),
                 items.c.request.is_not(None))
        )
        self.insert_result = (
            db.insert(results)
            .from_select(["job_id", "idx", "seq", "status", "result", "size"], source)
            .on_conflict_do_nothing(index_elements=["job_id", "idx"])
            .returning(results.c.idx)
        )
        self.count_results = update(jobs).where(job).values(
            next_seq=bindparam("set_next_seq", type_=Integer),
            done=jobs.c.done + bindparam("add_done", type_=Integer),
            scored=jobs.c.scored + bindparam("add_scored", type_=Integer),
            unscored=jobs.c.unscored + bindparam("add_unscored", type_=Integer),
            bytes=jobs.c.bytes + bindparam("add_bytes", type_=BigInteger),
            updated_at=db.now(),
        )


class ItemRows:
    """The item and result operations of the job store (``JobStore`` exposes them).

    Args:
        db: The jobs database.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._save = _SaveStatements.of(db)

    @property
    def costs(self) -> RowCosts:
        """What a row takes in this store beyond its values (``RowCosts``)."""
        return POSTGRES_ROWS if self.db.postgres else SQLITE_ROWS

    @staticmethod
    def encode(job_id: str, job_items: Iterable[JobItem]) -> EncodedItems:
        """Compress a job's items into rows in memory (``ItemEncoder``'s rules)."""
        encoder = ItemEncoder(job_id)
        rows = [row for row in map(encoder.add, job_items) if row is not None]
        return encoder.encoded([rows])

    @staticmethod
    def insert(conn: Connection, encoded: EncodedItems) -> None:
        """Insert encoded items (and their invalid entries) in the caller's transaction."""
        for batch in encoded.batches:
            if batch:
                conn.execute(insert(items), batch)
        if encoded.entries:
            conn.execute(insert(results), encoded.entries)

    def save_results(self, job_id: str, new: Sequence[tuple[int, str, str, bool]]) -> int:
        """Store several results in one transaction; returns how many were new.

        Args:
            job_id: The job.
            new: ``(index, result JSON, status label, scored)`` per item. An item that
                already has a result (or is not a valid item of the job) is left alone, never
                counted twice.
        """
        if not new:
            return 0
        if self.db.postgres:
            return self._save_postgres(job_id, new)
        sql = self._save
        saved = scored_count = added = 0
        with self.db.tx() as conn:
            # The job's row, locked: result writers of one job take their turns (and numbers).
            row = conn.execute(sql.lock_job, {"job_id": job_id}).first()
            if row is None:
                return 0
            seq = int(row.next_seq)
            result_dict: bytes | None = row.result_dict
            if result_dict is None:
                # The job's first result becomes the dictionary of all its results.
                result_dict = new[0][1].encode("utf-8")
                conn.execute(sql.set_result_dict, {"job_id": job_id, "new_dict": result_dict,
                                                   "dict_size": len(result_dict)})
            dicts = {RESULTS: result_dict}
            for index, payload, status, scored in new:
                stored = pack(payload, dicts, RESULTS)
                size = stored_size(stored)
                inserted = conn.execute(sql.insert_result, {
                    "job_id": job_id, "idx": index, "new_seq": seq + 1, "new_status": status,
                    "new_result": stored, "new_size": size,
                }).first()
                if inserted is not None:
                    seq += 1
                    saved += 1
                    scored_count += int(scored)
                    added += size
            if saved:
                conn.execute(sql.count_results, {
                    "job_id": job_id, "set_next_seq": seq, "add_done": saved,
                    "add_scored": scored_count, "add_unscored": saved - scored_count,
                    "add_bytes": added,
                })
        return saved

    def _save_postgres(self, job_id: str, new: Sequence[tuple[int, str, str, bool]]) -> int:
        """``save_results`` on Postgres: statements that each commit as they end.

        The job's result dictionary is read (set first, when the job has none: the first
        writer's result wins, and a writer that lost reads the winner's), the results are
        compressed with it, and one statement stores and counts them (``_SAVE_POSTGRES``).
        """
        with self.db.autocommit() as conn:
            row = conn.execute(_RESULT_DICT, {"job": job_id}).first()
            if row is None:
                return 0
            result_dict: bytes | None = row.result_dict
            if result_dict is None:
                first = new[0][1].encode("utf-8")
                taken = conn.execute(self._save.set_result_dict, {
                    "job_id": job_id, "new_dict": first, "dict_size": len(first)})
                result_dict = first if taken.rowcount == 1 else conn.execute(
                    _RESULT_DICT, {"job": job_id}).scalar()
            dicts = {RESULTS: result_dict} if result_dict is not None else {}
            packed = [pack(payload, dicts, RESULTS) for _, payload, _, _ in new]
            saved = conn.execute(_SAVE_POSTGRES, {
                "job": job_id,
                "idx": [index for index, _, _, _ in new],
                "status": [status for _, _, status, _ in new],
                "result": packed,
                "size": [stored_size(stored) for stored in packed],
                "scored": [scored for _, _, _, scored in new],
            }).scalar()
        return int(saved or 0)

    def _dicts(self, conn: Connection, job_id: str) -> dict[int, bytes]:
        """The job's compression dictionaries (what ``unpack`` needs to read its blobs)."""
        row = conn.execute(_DICTS, {"job": job_id}).first()
        if row is None:
            return {}
        found = {REQUESTS: row.request_dict, RESULTS: row.result_dict}
        return {tag: bytes(value) for tag, value in found.items() if value is not None}

    def unscored(self, conn: Connection, job_id: str) -> list[tuple[int, list[str], int]]:
        """A job's unscored results, read in the caller's transaction.

        Returns:
            ``(index, the result's "task: reason" entries, stored size)`` per result.
        """
        rows = conn.execute(
            select(results.c.idx, results.c.result, results.c.size)
            .where(results.c.job_id == job_id, results.c.status == "unscored")
            .order_by(results.c.idx)
        ).all()
        dicts = self._dicts(conn, job_id) if rows else {}
        out = []
        for row in rows:
            reasons = json.loads(unpack(row.result, dicts)).get("unscored_reasons") or []
            out.append((int(row.idx), [str(r) for r in reasons], int(row.size)))
        return out

    def item_errors(self, job_id: str) -> list[tuple[int, int | None, str]]:
        """Items rejected at submission: ``(index, line or None, error JSON)`` in input order."""
        query = (
            select(items.c.idx, items.c.line, items.c.error)
            .where(items.c.job_id == job_id, items.c.error.is_not(None))
            .order_by(items.c.idx)
        )
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        return [
            (int(r.idx), None if r.line is None else int(r.line), unpack(r.error)) for r in rows
        ]

    def pending(
        self, job_id: str, after: int, limit: int, before: int | None = None
    ) -> list[tuple[int, str, str]]:
        """Valid items without a result, ``after < index`` (``< before`` when given).

        Returns:
            ``(index, item id, request JSON)`` in index order, at most ``limit``.
        """
        wanted = {"job": job_id, "after": after, "most": limit}
        with self.db.read() as conn:
            if before is None:
                rows = conn.execute(_PENDING, wanted).all()
            else:
                rows = conn.execute(_PENDING_BEFORE, {**wanted, "before": before}).all()
            dicts = self._dicts(conn, job_id) if rows else {}
        return [(int(r.idx), str(r.item_id), unpack(r.request, dicts)) for r in rows]

    def entries(
        self, job_id: str, after_seq: int, up_to: int, limit: int, skip: int = 0
    ) -> list[tuple[int, str]]:
        """Finished entries ``after_seq < seq <= up_to`` in finishing order, as NDJSON lines.

        The first ``skip`` of them are left out: a stream resumed at an offset counts lines,
        and numbers can be missing (a lost race, a result graded again).
        """
        query = (
            select(results.c.seq, results.c.idx, items.c.item_id, results.c.result,
                   items.c.error)
            .join(items, and_(items.c.job_id == results.c.job_id, items.c.idx == results.c.idx))
            .where(results.c.job_id == job_id, results.c.seq > after_seq,
                   results.c.seq <= up_to)
            .order_by(results.c.seq)
            .limit(limit)
        )
        if skip:
            query = query.offset(skip)
        with self.db.read() as conn:
            rows = conn.execute(query).all()
            dicts = self._dicts(conn, job_id) if rows else {}
        # The stored JSON is spliced in as is (once decompressed): no parse and re-dump per line.
        return [
            (
                int(r.seq),
                f'{{"index": {int(r.idx)}, "id": {json.dumps(r.item_id)}, '
                f'"result": {unpack(r.result, dicts) if r.result else "null"}, '
                f'"error": {unpack(r.error, dicts) if r.error else "null"}}}\n',
            )
            for r in rows
        ]

    def results(self, job_id: str) -> Iterator[GradeResult]:
        """Every stored result of a grading job, in finishing order, read in pages."""
        for payload in self.raw_results(job_id):
            yield GradeResult.model_validate_json(payload)

    def raw_results(self, job_id: str) -> Iterator[str]:
        """Every stored result of a job as its JSON text, in finishing order, read in pages."""
        after = 0
        while True:
            query = (
                select(results.c.seq, results.c.result)
                .where(results.c.job_id == job_id, results.c.seq > after,
                       results.c.result.is_not(None))
                .order_by(results.c.seq)
                .limit(_PAGE)
            )
            # A connection per page: none is held while the caller consumes the results.
            with self.db.read() as conn:
                rows = conn.execute(query).all()
                if not rows:
                    return
                dicts = self._dicts(conn, job_id)  # per page: it comes with the first result
            for row in rows:
                yield unpack(row.result, dicts)
            after = int(rows[-1].seq)
