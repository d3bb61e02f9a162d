"""Leases in SQL: which process runs which job, and the changes only the lease holder may make.

A process *claims* a job by taking its lease (owner token, expiry renewed while it runs). A lease
that is not renewed expires, and another process takes the job over. Every state change of a
running job (start, finish, fail, release) names the token, so a process that lost its lease
changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from api.jobs.sqlite import ACTIVE, GRADE, SqliteDatabase


class Claims:
    """The lease operations of the job store (``JobStore`` exposes them).

    Args:
        db: The jobs database.
    """

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

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
        if self.db.conn().execute(
            f"{claimable} LIMIT 1", (*ACTIVE, time.time(), token, *kinds)
        ).fetchone() is None:
            return claimed
        for _ in range(limit):
            now = time.time()
            with self.db.tx() as conn:
                row = conn.execute(
                    f"{claimable} ORDER BY (SELECT COUNT(*) FROM jobs AS r WHERE"
                    " r.owner = j.owner AND r.status IN (?, ?) AND r.lease_owner IS NOT NULL"
                    " AND r.lease_expires >= ?), created_at LIMIT 1",
                    (*ACTIVE, now, token, *kinds, *ACTIVE, now),
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
        rows = self.db.conn().execute(
            "SELECT owner, COUNT(*) AS n FROM jobs WHERE status IN (?, ?) AND lease_owner IS NOT"
            " NULL AND lease_expires >= ? GROUP BY owner",
            (*ACTIVE, time.time()),
        ).fetchall()
        return {str(r["owner"]): int(r["n"]) for r in rows}

    def waiting_owners(self, kinds: Sequence[str]) -> set[str]:
        """Owners with a job of ``kinds`` that nobody holds (waiting to be claimed)."""
        if not kinds:
            return set()
        marks = ", ".join("?" for _ in kinds)
        rows = self.db.conn().execute(
            "SELECT DISTINCT owner FROM jobs WHERE status IN (?, ?) AND (lease_owner IS NULL OR"
            f" lease_expires < ?) AND kind IN ({marks})",
            (*ACTIVE, time.time(), *kinds),
        ).fetchall()
        return {str(r["owner"]) for r in rows}

    def stale_own(self, token: str) -> list[str]:
        """Active jobs leased to ``token`` whose lease has lapsed (oldest first)."""
        rows = self.db.conn().execute(
            "SELECT id FROM jobs WHERE lease_owner = ? AND lease_expires < ? AND status IN (?, ?)"
            " ORDER BY created_at",
            (token, time.time(), *ACTIVE),
        ).fetchall()
        return [str(r["id"]) for r in rows]

    def renew(self, job_id: str, token: str, lease_seconds: float) -> bool:
        """Extend a lease this process holds; False when lost or the job is no longer active."""
        with self.db.tx() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET lease_expires = ? WHERE id = ? AND lease_owner = ? AND"
                " status IN (?, ?)",
                (time.time() + lease_seconds, job_id, token, *ACTIVE),
            )
        return cursor.rowcount == 1

    def start_run(self, job_id: str, token: str) -> bool:
        """Mark a claimed job running and note where this run started (for the rate)."""
        now = time.time()
        with self.db.tx() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET status = 'running', run_started_at = ?, run_start_done = done,"
                " updated_at = ? WHERE id = ? AND lease_owner = ? AND status IN (?, ?)",
                (now, now, job_id, token, *ACTIVE),
            )
        return cursor.rowcount == 1

    def set_progress(self, job_id: str, token: str, done: int, scored: int) -> bool:
        """Record the progress of a job without item rows (a calibration run) run here.

        ``done`` units are finished, ``scored`` of them scored. False when the lease is lost.
        """
        with self.db.tx() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET done = ?, scored = ?, unscored = ?, updated_at = ? WHERE id = ?"
                " AND lease_owner = ? AND status IN (?, ?)",
                (done, scored, max(done - scored, 0), time.time(), job_id, token, *ACTIVE),
            )
        return cursor.rowcount == 1

    def complete_if_finished(self, job_id: str, token: str) -> bool:
        """Mark a running job done when every valid item has a result."""
        with self.db.tx() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET status = 'done', lease_owner = NULL, lease_expires = 0,"
                " updated_at = ? WHERE id = ? AND lease_owner = ? AND status IN (?, ?)"
                " AND done >= total",
                (time.time(), job_id, token, *ACTIVE),
            )
        return cursor.rowcount == 1

    def fail(self, job_id: str, token: str, detail: str) -> None:
        """Mark a job this process runs as failed."""
        with self.db.tx() as conn:
            conn.execute(
                "UPDATE jobs SET status = 'failed', detail = ?, lease_owner = NULL,"
                " lease_expires = 0, updated_at = ? WHERE id = ? AND lease_owner = ? AND"
                " status IN (?, ?)",
                (detail, time.time(), job_id, token, *ACTIVE),
            )

    def release(self, job_id: str, token: str) -> None:
        """Give up a lease; an unfinished job goes back to ``queued`` for the next process."""
        with self.db.tx() as conn:
            conn.execute(
                "UPDATE jobs SET lease_owner = NULL, lease_expires = 0, status = CASE WHEN"
                " status = 'running' THEN 'queued' ELSE status END WHERE id = ? AND"
                " lease_owner = ?",
                (job_id, token),
            )
