"""What judge calls spend, in the store: per API key and UTC day, per job, and budget pauses.

A key's budget (``ServiceSettings.max_cost_per_key_usd``) and a job's own ``max_cost`` are counted
here, not in one process's memory, so they survive a restart and every replica sharing the
database sees one figure: the service adds what its settled requests cost (``add``, in batches)
and reads the totals back. A job that reached a budget is *paused*: ``paused_until`` keeps its
chunks from being claimed before then (the next UTC midnight for a key's day; ``FOREVER`` for
the job's own ``max_cost``), while its stored status (queued or running: it is still active, for
the quotas and the leases) and its items stay as they were. What callers see is its public
status, ``paused`` until then (``public_status``, ``is_paused``), ``queued`` again after.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, case, select, text, update
from sqlalchemy.sql.elements import ColumnElement

from api.jobs.database import Database
from api.jobs.schema import ACTIVE, JobRow, jobs, key_spend

FOREVER = 1e18
"""``paused_until`` of a job paused at its own ``max_cost``: nothing but a new job resumes it."""

PAUSED = "paused"
"""The public status of an active job paused at a cost budget (never stored in ``status``)."""

_ADD_POSTGRES = text("""
WITH keyed AS (
    INSERT INTO key_spend (owner, day, cost_usd, requests)
    SELECT * FROM unnest(
        CAST(:owners AS text[]), CAST(:days AS text[]), CAST(:costs AS double precision[]),
        CAST(:requests AS bigint[])
    )
    ON CONFLICT (owner, day) DO UPDATE SET
        cost_usd = key_spend.cost_usd + excluded.cost_usd,
        requests = key_spend.requests + excluded.requests
    RETURNING owner, day, cost_usd
), charged AS (
    UPDATE jobs SET cost_usd = jobs.cost_usd + given.cost
    FROM unnest(CAST(:job_ids AS text[]), CAST(:job_costs AS double precision[]))
        AS given(id, cost)
    WHERE jobs.id = given.id
    RETURNING jobs.id, jobs.cost_usd
)
SELECT owner AS id, day, cost_usd FROM keyed
UNION ALL SELECT id, NULL, cost_usd FROM charged
""")
"""``Spend.add`` on Postgres, one statement (committed as it ends): the rows of the keys' days and
of the jobs are locked only while the server adds to them, never between two round trips."""


def is_paused(row: JobRow, now: float) -> bool:
    """Whether the job of ``row`` is paused at ``now``: active, and not claimable before later.

    A pause whose time has come (the next UTC midnight passed, or a restart set it to 0) is
    over: the job is queued again, though its runner clears ``paused_until`` only as it starts.
    """
    until = row["paused_until"]
    return row["status"] in ACTIVE and until is not None and float(until) > now


def public_status(db: Database) -> ColumnElement[str]:
    """The status callers see, as SQL: the stored one, or ``paused`` (as ``is_paused`` says)."""
    paused = and_(
        jobs.c.status.in_(ACTIVE), jobs.c.paused_until.is_not(None),
        jobs.c.paused_until > db.now(),
    )
    return case((paused, PAUSED), else_=jobs.c.status)


def utc_day(now: float) -> str:
    """The UTC date of the epoch time ``now``, as ``key_spend.day`` holds it (``YYYY-MM-DD``)."""
    return datetime.fromtimestamp(now, tz=UTC).date().isoformat()


def next_midnight(now: float) -> float:
    """The epoch time of the UTC midnight after ``now``: when a key's day budget opens again."""
    day = datetime.fromtimestamp(now, tz=UTC).date() + timedelta(days=1)
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


class Spend:
    """The spend operations of the job store (``JobStore`` exposes them).

    Args:
        db: The jobs database.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(
        self,
        keys: Mapping[tuple[str, str], tuple[float, int]],
        job_costs: Mapping[str, float],
    ) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
        """Add spend in one transaction; the totals after it.

        Args:
            keys: ``(owner, day) -> (USD, requests)`` to add to the key's day.
            job_costs: ``job id -> USD`` to add to the job's ``cost_usd``.

        Returns:
            ``(owner, day) -> USD`` spent that day in all (every replica's additions), and
            ``job id -> USD`` its calls cost in all (a deleted job is left out).
        """
        totals: dict[tuple[str, str], float] = {}
        job_totals: dict[str, float] = {}
        if self.db.postgres:
            ordered = sorted(keys.items())
            jobs_ordered = sorted(job_costs.items())
            with self.db.autocommit() as conn:
                rows = conn.execute(_ADD_POSTGRES, {
                    "owners": [owner for (owner, _), _ in ordered],
                    "days": [day for (_, day), _ in ordered],
                    "costs": [cost for _, (cost, _) in ordered],
                    "requests": [requests for _, (_, requests) in ordered],
                    "job_ids": [job_id for job_id, _ in jobs_ordered],
                    "job_costs": [cost for _, cost in jobs_ordered],
                }).all()
            for row in rows:
                if row.day is None:
                    job_totals[str(row.id)] = float(row.cost_usd)
                else:
                    totals[(str(row.id), str(row.day))] = float(row.cost_usd)
            return totals, job_totals
        with self.db.tx() as conn:
            for (owner, day), (cost, requests) in sorted(keys.items()):
                # An upsert adds atomically on both engines: concurrent replicas never lose one.
                statement = self.db.insert(key_spend).values(
                    owner=owner, day=day, cost_usd=cost, requests=requests
                )
                conn.execute(statement.on_conflict_do_update(
                    index_elements=[key_spend.c.owner, key_spend.c.day],
                    set_={
                        "cost_usd": key_spend.c.cost_usd + statement.excluded.cost_usd,
                        "requests": key_spend.c.requests + statement.excluded.requests,
                    },
                ))
                totals[(owner, day)] = float(conn.execute(
                    select(key_spend.c.cost_usd)
                    .where(key_spend.c.owner == owner, key_spend.c.day == day)
                ).scalar_one())
            for job_id, cost in sorted(job_costs.items()):
                conn.execute(
                    update(jobs).where(jobs.c.id == job_id)
                    .values(cost_usd=jobs.c.cost_usd + cost)
                )
                total = conn.execute(
                    select(jobs.c.cost_usd).where(jobs.c.id == job_id)
                ).scalar_one_or_none()
                if total is not None:
                    job_totals[job_id] = float(total)
        return totals, job_totals

    def key_day(self, owner: str, day: str) -> tuple[float, int]:
        """``(USD, requests)`` the key's judge calls cost on ``day`` so far."""
        with self.db.read() as conn:
            row = conn.execute(
                select(key_spend.c.cost_usd, key_spend.c.requests)
                .where(key_spend.c.owner == owner, key_spend.c.day == day)
            ).first()
        return (0.0, 0) if row is None else (float(row.cost_usd), int(row.requests))

    def pause(self, job_id: str, until: float, detail: str) -> bool:
        """Keep an active job from being claimed before ``until``, saying why in its ``detail``.

        False when the job is no longer active (cancelled, failed or done meanwhile).
        """
        with self.db.autocommit() as conn:
            done = conn.execute(
                update(jobs).where(jobs.c.id == job_id, jobs.c.status.in_(ACTIVE))
                .values(paused_until=until, detail=detail, updated_at=self.db.now())
            )
        return done.rowcount == 1

    def unpause(self, job_id: str) -> None:
        """The job runs again: clear its pause and the pause's ``detail`` (if it had one)."""
        with self.db.autocommit() as conn:
            conn.execute(
                update(jobs).where(jobs.c.id == job_id, jobs.c.paused_until.is_not(None))
                .values(paused_until=None, detail=None, updated_at=self.db.now())
            )

    def resume_day_pauses(self) -> int:
        """Let every job paused at a key's day budget be claimed now; how many there were.

        At start-up: the limit may have been raised, and a job still over it pauses again at
        its first request (nothing is sent). Jobs paused at their own ``max_cost`` stay paused.
        """
        with self.db.tx() as conn:
            done = conn.execute(
                # 0, not null: claimable at once, and its runner clears the pause's detail.
                update(jobs).where(jobs.c.paused_until < FOREVER).values(paused_until=0.0)
            )
        return int(done.rowcount)
