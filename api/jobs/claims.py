"""Leases in SQL: which process runs which job, and the changes only the lease holder may make.

A process *claims* a job by taking its lease (owner token, expiry renewed while it runs: the
heartbeat). A lease that is not renewed expires, and another process, on this machine or another
replica, takes the job over (reclaims it). Every state change of a running job (start, finish,
fail, release) names the token, so a process that lost its lease changes nothing.

Claiming is one short transaction per job. On Postgres the candidate row is locked with
``SELECT ... FOR UPDATE SKIP LOCKED``: replicas claiming at the same moment never wait on each
other and never take the same job (a row another claimer holds is skipped, and a row it just
took is re-checked against the lease condition before it is locked). On SQLite the transaction
holds the file's write lock. Expiries are compared with the database's "now" (``Database.now``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import FromClause, and_, case, func, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from api.jobs.database import Database
from api.jobs.schema import ACTIVE, GRADE, jobs


class Claims:
    """The lease operations of the job store (``JobStore`` exposes them).

    Args:
        db: The jobs database.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def _live(self, table: FromClause = jobs) -> ColumnElement[bool]:
        """A job of ``table`` (``jobs`` or an alias of it) held by a lease that has not lapsed."""
        return and_(
            table.c.status.in_(ACTIVE),
            table.c.lease_owner.is_not(None),
            table.c.lease_expires >= self.db.now(),
        )

    def _claimable(self, token: str, kinds: Sequence[str]) -> ColumnElement[bool]:
        """An unfinished job of ``kinds`` that nobody holds, or whose lease lapsed elsewhere.

        ``token``'s own lapsed leases are not claimable: its renewals revive them instead.
        """
        return and_(
            jobs.c.status.in_(ACTIVE),
            or_(
                jobs.c.lease_owner.is_(None),
                and_(jobs.c.lease_expires < self.db.now(), jobs.c.lease_owner != token),
            ),
            jobs.c.kind.in_(list(kinds)),
        )

    def claim(
        self, token: str, lease_seconds: float, limit: int, kinds: Sequence[str] = (GRADE,)
    ) -> list[str]:
        """Take the leases of up to ``limit`` unfinished jobs nobody holds, fairly across owners.

        Each lease goes to a job of the owner with the fewest jobs held right now (a live lease,
        in any process), oldest first among equals: a key with one small job is not queued
        behind every job of a key that submitted many. The counts are read in the claiming
        transaction, so the order holds across processes and replicas sharing the database.

        A job whose lease ``token`` itself holds is never claimed again, even when that lease
        has lapsed (an event loop blocked for a while): its runner is still alive here, and the
        next renewal revives the lease. Only jobs of ``kinds`` are claimed.
        """
        claimed: list[str] = []
        if not kinds or limit <= 0:
            return claimed
        # A plain read first: an idle poll takes no lock at all.
        with self.db.read() as conn:
            probe = select(jobs.c.id).where(self._claimable(token, kinds)).limit(1)
            if conn.execute(probe).first() is None:
                return claimed
        held = jobs.alias("held")
        for _ in range(limit):
            held_by_owner = (
                select(func.count())
                .select_from(held)
                .where(held.c.owner == jobs.c.owner, self._live(held))
                .scalar_subquery()
            )
            pick = (
                select(jobs.c.id)
                .where(self._claimable(token, kinds))
                .order_by(held_by_owner, jobs.c.created_at)
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            with self.db.tx() as conn:
                job_id = conn.execute(pick).scalar()
                if job_id is None:
                    break
                conn.execute(
                    update(jobs)
                    .where(jobs.c.id == job_id)
                    .values(lease_owner=token, lease_expires=self.db.now() + lease_seconds)
                )
            claimed.append(str(job_id))
        return claimed

    def held_by_owner(self) -> dict[str, int]:
        """Jobs held by a live lease (running somewhere), per owner."""
        query = (
            select(jobs.c.owner, func.count().label("n")).where(self._live()).group_by(jobs.c.owner)
        )
        with self.db.read() as conn:
            return {str(r.owner): int(r.n) for r in conn.execute(query)}

    def waiting_owners(self, kinds: Sequence[str]) -> set[str]:
        """Owners with a job of ``kinds`` that nobody holds (waiting to be claimed)."""
        if not kinds:
            return set()
        query = select(jobs.c.owner).distinct().where(
            jobs.c.status.in_(ACTIVE),
            or_(jobs.c.lease_owner.is_(None), jobs.c.lease_expires < self.db.now()),
            jobs.c.kind.in_(list(kinds)),
        )
        with self.db.read() as conn:
            return {str(owner) for owner in conn.execute(query).scalars()}

    def stale_own(self, token: str) -> list[str]:
        """Active jobs leased to ``token`` whose lease has lapsed (oldest first)."""
        query = (
            select(jobs.c.id)
            .where(
                jobs.c.lease_owner == token,
                jobs.c.lease_expires < self.db.now(),
                jobs.c.status.in_(ACTIVE),
            )
            .order_by(jobs.c.created_at)
        )
        with self.db.read() as conn:
            return [str(job_id) for job_id in conn.execute(query).scalars()]

    def _held(self, job_id: str, token: str) -> ColumnElement[bool]:
        """The job ``job_id``, still active and leased to ``token``."""
        return and_(jobs.c.id == job_id, jobs.c.lease_owner == token, jobs.c.status.in_(ACTIVE))

    def renew(self, job_id: str, token: str, lease_seconds: float) -> bool:
        """Extend a lease this process holds; False when lost or the job is no longer active."""
        with self.db.tx() as conn:
            result = conn.execute(
                update(jobs)
                .where(self._held(job_id, token))
                .values(lease_expires=self.db.now() + lease_seconds)
            )
        return result.rowcount == 1

    def start_run(self, job_id: str, token: str) -> bool:
        """Mark a claimed job running and note where this run started (for the rate)."""
        now = self.db.now()
        with self.db.tx() as conn:
            result = conn.execute(
                update(jobs)
                .where(self._held(job_id, token))
                .values(status="running", run_started_at=now, run_start_done=jobs.c.done,
                        updated_at=now)
            )
        return result.rowcount == 1

    def set_progress(self, job_id: str, token: str, done: int, scored: int) -> bool:
        """Record the progress of a job without item rows (a calibration run) run here.

        ``done`` units are finished, ``scored`` of them scored. False when the lease is lost.
        """
        with self.db.tx() as conn:
            result = conn.execute(
                update(jobs)
                .where(self._held(job_id, token))
                .values(done=done, scored=scored, unscored=max(done - scored, 0),
                        updated_at=self.db.now())
            )
        return result.rowcount == 1

    def complete_if_finished(self, job_id: str, token: str) -> bool:
        """Mark a running job done when every valid item has a result."""
        with self.db.tx() as conn:
            result = conn.execute(
                update(jobs)
                .where(self._held(job_id, token), jobs.c.done >= jobs.c.total)
                .values(status="done", lease_owner=None, lease_expires=0.0,
                        updated_at=self.db.now())
            )
        return result.rowcount == 1

    def fail(self, job_id: str, token: str, detail: str) -> None:
        """Mark a job this process runs as failed."""
        with self.db.tx() as conn:
            conn.execute(
                update(jobs)
                .where(self._held(job_id, token))
                # Postgres text cannot hold NUL; a message quoting one keeps the rest.
                .values(status="failed", detail=detail.replace("\x00", "\\x00"),
                        lease_owner=None, lease_expires=0.0, updated_at=self.db.now())
            )

    def release(self, job_id: str, token: str) -> None:
        """Give up a lease; an unfinished job goes back to ``queued`` for the next process."""
        with self.db.tx() as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.lease_owner == token)
                .values(
                    lease_owner=None, lease_expires=0.0,
                    status=case((jobs.c.status == "running", "queued"), else_=jobs.c.status),
                )
            )
