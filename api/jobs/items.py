"""Item rows in SQL: a job's submitted items, their results, and the result stream.

Each result is written in its own transaction (or a page of them in one), numbered in finishing
order (``seq``); an item with a stored result is never graded again, so a restarted service
resumes exactly where the last one stopped. Requests, results and errors are stored compressed
with the job's dictionaries (``codec``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from api.jobs.codec import REQUESTS, RESULTS, pack, stored_size, unpack
from api.jobs.sqlite import SqliteDatabase
from api.schemas import ItemError
from judge.types import GradeResult


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
class EncodedItems:
    """A job's items as rows ready to insert, with what they cost in the store.

    Attributes:
        rows: ``(job_id, idx, item_id, line, request, error, seq)`` per item; an invalid item
            is a finished entry at once (its error numbered in the result stream).
        stored: Bytes the rows and the request dictionary take.
        request_dict: The job's request dictionary (its first valid request), if any.
        finished: Entries numbered already (the invalid items).
    """

    rows: list[tuple[Any, ...]]
    stored: int
    request_dict: bytes | None
    finished: int


class ItemRows:
    """The item and result operations of the job store (``JobStore`` exposes them).

    Args:
        db: The jobs database.
    """

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    @staticmethod
    def encode(job_id: str, items: Sequence[JobItem]) -> EncodedItems:
        """Compress a job's items into rows (its first valid request is the dictionary)."""
        first = next((item.request for item in items if item.request is not None), None)
        request_dict = first.model_dump_json().encode("utf-8") if first is not None else None
        dicts = {REQUESTS: request_dict} if request_dict is not None else {}
        stored = len(request_dict or b"")
        seq = 0
        rows: list[tuple[Any, ...]] = []
        for item in items:
            if item.request is not None:
                request = pack(item.request.model_dump_json(), dicts, REQUESTS)
                stored += stored_size(request)
                rows.append((job_id, item.index, item.item_id, item.line, request, None, None))
            else:
                seq += 1
                error = pack(item.error.model_dump_json()) if item.error is not None else None
                stored += stored_size(error)
                rows.append((job_id, item.index, item.item_id, item.line, None, error, seq))
        return EncodedItems(rows, stored, request_dict, seq)

    @staticmethod
    def insert(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert encoded rows in the caller's transaction."""
        conn.executemany(
            "INSERT INTO items (job_id, idx, item_id, line, request, error, seq)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def save_results(self, job_id: str, results: Sequence[tuple[int, str, str, bool]]) -> int:
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
        with self.db.tx() as conn:
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
            dicts = {RESULTS: result_dict}
            for index, payload, status, scored in results:
                stored = pack(payload, dicts, RESULTS)
                cursor = conn.execute(
                    "UPDATE items SET result = ?, status = ?, seq = ? WHERE job_id = ? AND"
                    " idx = ? AND result IS NULL AND request IS NOT NULL",
                    (stored, status, seq + 1, job_id, index),
                )
                if cursor.rowcount == 1:
                    seq += 1
                    saved += 1
                    scored_count += int(scored)
                    added += stored_size(stored)
            if saved:
                conn.execute(
                    "UPDATE jobs SET next_seq = ?, done = done + ?, scored = scored + ?,"
                    " unscored = unscored + ?, bytes = bytes + ?, updated_at = ? WHERE id = ?",
                    (seq, saved, scored_count, saved - scored_count, added, time.time(), job_id),
                )
        return saved

    def _dicts(self, job_id: str) -> dict[int, bytes]:
        """The job's compression dictionaries (what ``unpack`` needs to read its blobs)."""
        row = self.db.conn().execute(
            "SELECT request_dict, result_dict FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if row is None:
            return {}
        found = {REQUESTS: row["request_dict"], RESULTS: row["result_dict"]}
        return {tag: bytes(value) for tag, value in found.items() if value is not None}

    def item_errors(self, job_id: str) -> list[tuple[int, int | None, str]]:
        """Items rejected at submission: ``(index, line or None, error JSON)`` in input order."""
        rows = self.db.conn().execute(
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
        rows = self.db.conn().execute(
            "SELECT idx, item_id, request FROM items WHERE job_id = ? AND idx > ? AND"
            " result IS NULL AND request IS NOT NULL ORDER BY idx LIMIT ?",
            (job_id, after, limit),
        ).fetchall()
        dicts = self._dicts(job_id) if rows else {}
        return [(int(r["idx"]), str(r["item_id"]), unpack(r["request"], dicts)) for r in rows]

    def entries(self, job_id: str, after_seq: int, up_to: int, limit: int) -> list[tuple[int, str]]:
        """Finished entries ``after_seq < seq <= up_to`` in finishing order, as NDJSON lines."""
        rows = self.db.conn().execute(
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
        """Every stored result of a grading job, in finishing order, read in pages."""
        for payload in self.raw_results(job_id):
            yield GradeResult.model_validate_json(payload)

    def raw_results(self, job_id: str) -> Iterator[str]:
        """Every stored result of a job as its JSON text, in finishing order, read in pages."""
        after = 0
        while True:
            rows = self.db.conn().execute(
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
