"""The job store: every operation on persisted jobs, behind one class (``JobStore``).

A job survives a restart: its items and every result live in ``jobs.sqlite3`` under the
service's data folder. ``JobStore`` is the boundary the rest of the service talks to (the worker,
the job manager, the job runners, the routes' services); it holds no scheduling policy. Its SQL
is spread over three collaborators on one ``SqliteDatabase``: the jobs themselves (here), the
leases (``Claims``) and the item rows (``ItemRows``).

Every method is synchronous and short; async callers run them with ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from api.errors import Conflict
from api.jobs.claims import Claims
from api.jobs.items import ItemRows, JobItem
from api.jobs.policy import Quota, Usage
from api.jobs.sqlite import ACTIVE, FINISHED, GRADE, SqliteDatabase
from api.schemas import JobState
from judge.config import JudgeConfig, JudgeOverrides
from judge.types import GradeResult


class JobStore:
    """The jobs database: one SQLite file in WAL mode, safe for several processes.

    Args:
        path: The database file (its folder is created).
    """

    def __init__(self, path: str | Path) -> None:
        self.db = SqliteDatabase(path)
        self.claims = Claims(self.db)
        self.items = ItemRows(self.db)

    @property
    def path(self) -> Path:
        """The database file."""
        return self.db.path

    def _conn(self) -> sqlite3.Connection:
        return self.db.conn()

    def close(self) -> None:
        """Close every connection this store opened."""
        self.db.close()

    # -- jobs ----------------------------------------------------------------------------------

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
        encoded = ItemRows.encode(job_id, items)
        overrides_json = overrides.model_dump_json(exclude_none=True) if overrides else "{}"
        with self.db.tx() as conn:
            if quota is not None:
                quota.check(self._usage(conn, owner), valid, encoded.stored)
            conn.execute(
                "INSERT INTO jobs (id, kind, options, owner, status, total, invalid, next_seq,"
                " overrides, model, config_hash, created_at, updated_at, lease_owner,"
                " lease_expires, bytes, request_dict) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, kind, json.dumps(dict(options or {})), owner, status, valid, invalid,
                 encoded.finished, overrides_json, shown_model, shown_hash, now, now, holder,
                 now + lease_seconds if holder else 0.0, encoded.stored, encoded.request_dict),
            )
            ItemRows.insert(conn, encoded.rows)

    @staticmethod
    def _usage(conn: sqlite3.Connection, owner: str) -> Usage:
        """What ``owner`` holds now, read in the caller's transaction (for its quota)."""
        row = conn.execute(
            "SELECT COALESCE(SUM(CASE WHEN status IN (?, ?) THEN 1 ELSE 0 END), 0) AS jobs,"
            " COALESCE(SUM(CASE WHEN status IN (?, ?) THEN MAX(total - done, 0) ELSE 0 END), 0)"
            " AS queued, COALESCE(SUM(bytes), 0) AS stored FROM jobs WHERE owner = ?",
            (*ACTIVE, *ACTIVE, owner),
        ).fetchone()
        return Usage(jobs=int(row["jobs"]), queued=int(row["queued"]), stored=int(row["stored"]))

    def cancel(self, job_id: str, owner: str, kind: str | None = None) -> bool:
        """Cancel an active job of ``owner``; False when unknown. Finished results are kept."""
        with self.db.tx() as conn:
            row = conn.execute(
                "SELECT status, kind FROM jobs WHERE id = ? AND owner = ?", (job_id, owner)
            ).fetchone()
            if row is not None and kind is not None and row["kind"] != kind:
                row = None
            if row is None:
                return False
            if row["status"] in ACTIVE:
                conn.execute(
                    "UPDATE jobs SET status = 'cancelled', detail = 'cancelled by request',"
                    " lease_owner = NULL, lease_expires = 0, updated_at = ? WHERE id = ?",
                    (time.time(), job_id),
                )
        return True

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
        with self.db.tx() as conn:
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

    def purge(self, before: float, limit: int = 200) -> list[tuple[str, str]]:
        """Delete up to ``limit`` finished jobs last changed before ``before``, with their items.

        Returns:
            ``(job id, kind)`` of each job deleted (the caller removes files kept beside them).
        """
        with self.db.tx() as conn:
            rows = conn.execute(
                "SELECT id, kind FROM jobs WHERE status IN (?, ?, ?) AND updated_at < ?"
                " ORDER BY updated_at LIMIT ?",
                (*FINISHED, before, limit),
            ).fetchall()
            for row in rows:
                conn.execute("DELETE FROM items WHERE job_id = ?", (row["id"],))
                conn.execute("DELETE FROM jobs WHERE id = ?", (row["id"],))
        return [(str(r["id"]), str(r["kind"])) for r in rows]

    def get(
        self, job_id: str, owner: str | None = None, kind: str | None = None
    ) -> sqlite3.Row | None:
        """The job's row (restricted to ``owner`` and to ``kind`` unless None)."""
        conn = self.db.conn()
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
        return self.db.conn().execute(query, params).fetchall()

    def status_counts(self) -> dict[str, int]:
        """Number of jobs per status (for the Prometheus gauge)."""
        rows = self.db.conn().execute("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status")
        return {str(r["status"]): int(r["n"]) for r in rows}

    # -- leases (``Claims``) -------------------------------------------------------------------

    def claim(
        self, token: str, lease_seconds: float, limit: int, kinds: Sequence[str] = (GRADE,)
    ) -> list[str]:
        """Take up to ``limit`` free jobs of ``kinds``, fairly across owners (``Claims.claim``)."""
        return self.claims.claim(token, lease_seconds, limit, kinds)

    def held_by_owner(self) -> dict[str, int]:
        """Jobs held by a live lease (running somewhere), per owner."""
        return self.claims.held_by_owner()

    def waiting_owners(self, kinds: Sequence[str]) -> set[str]:
        """Owners with a job of ``kinds`` that nobody holds (waiting to be claimed)."""
        return self.claims.waiting_owners(kinds)

    def stale_own(self, token: str) -> list[str]:
        """Active jobs leased to ``token`` whose lease has lapsed (oldest first)."""
        return self.claims.stale_own(token)

    def renew(self, job_id: str, token: str, lease_seconds: float) -> bool:
        """Extend a lease this process holds; False when lost or the job is no longer active."""
        return self.claims.renew(job_id, token, lease_seconds)

    def start_run(self, job_id: str, token: str) -> bool:
        """Mark a claimed job running and note where this run started (for the rate)."""
        return self.claims.start_run(job_id, token)

    def set_progress(self, job_id: str, token: str, done: int, scored: int) -> bool:
        """Record the progress of a job without item rows run here; False when the lease is lost."""
        return self.claims.set_progress(job_id, token, done, scored)

    def complete_if_finished(self, job_id: str, token: str) -> bool:
        """Mark a running job done when every valid item has a result."""
        return self.claims.complete_if_finished(job_id, token)

    def fail(self, job_id: str, token: str, detail: str) -> None:
        """Mark a job this process runs as failed."""
        self.claims.fail(job_id, token, detail)

    def release(self, job_id: str, token: str) -> None:
        """Give up a lease; an unfinished job goes back to ``queued`` for the next process."""
        self.claims.release(job_id, token)

    # -- items and results (``ItemRows``) --------------------------------------------------------

    def save_result(self, job_id: str, index: int, result: GradeResult) -> bool:
        """Store one item's result in its own transaction; False if it already had one."""
        return self.save_results(
            job_id, [(index, result.model_dump_json(), result.status, result.status == "scored")]
        ) == 1

    def save_results(self, job_id: str, results: Sequence[tuple[int, str, str, bool]]) -> int:
        """Store several ``(index, result JSON, status, scored)`` at once; how many were new."""
        return self.items.save_results(job_id, results)

    def item_errors(self, job_id: str) -> list[tuple[int, int | None, str]]:
        """Items rejected at submission: ``(index, line or None, error JSON)`` in input order."""
        return self.items.item_errors(job_id)

    def pending(self, job_id: str, after: int, limit: int) -> list[tuple[int, str, str]]:
        """Valid items without a result, with index above ``after``: (index, item id, JSON)."""
        return self.items.pending(job_id, after, limit)

    def entries(self, job_id: str, after_seq: int, up_to: int, limit: int) -> list[tuple[int, str]]:
        """Finished entries ``after_seq < seq <= up_to`` in finishing order, as NDJSON lines."""
        return self.items.entries(job_id, after_seq, up_to, limit)

    def results(self, job_id: str) -> Iterator[GradeResult]:
        """Every stored result of a grading job, in finishing order, read in pages."""
        return self.items.results(job_id)

    def raw_results(self, job_id: str) -> Iterator[str]:
        """Every stored result of a job as its JSON text, in finishing order, read in pages."""
        return self.items.raw_results(job_id)
