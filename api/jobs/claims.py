"""Leases in SQL: which process runs which chunk of a job, and the changes only a holder may make.

A job's items are leased in chunks (``chunks``: the items ``lo <= idx < hi`` of a grading job, or
the whole of a job of another kind). A process *claims* a chunk by taking its lease (owner token,
expiry renewed while it runs: the heartbeat), so every replica with room works on every running
job, each on chunks of its own. A lease that is not renewed expires, and another process, on
this machine or another replica, takes the chunk over (reclaims it); a replica that dies loses
only its chunks. Every state change of a running job (start, finish, fail) names the token, and
is made only while the token holds a chunk of the job, so a process that lost its leases changes
nothing; a result is written once per item whoever grades it (``ItemRows.save_results``).

Claiming is one statement per chunk. On Postgres the candidate chunk is locked with
``SELECT ... FOR UPDATE OF chunks SKIP LOCKED`` inside the ``UPDATE`` that takes it: replicas
claiming at the same moment never wait on each other and never take the same chunk (a row another
claimer holds is skipped, and a row it just took is re-checked against the lease condition before
it is locked). On SQLite the transaction holds the file's write lock. Expiries are compared with
the database's "now" (``Database.now``).

Every write here that locks a chunk's or a job's row is a statement of its own, committed as it
ends (``Database.autocommit``): a replica that stops between two round trips (a pause, a
partition) holds no lock, so the others take its chunks over once their leases lapse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import (
    Connection,
    Float,
    FromClause,
    Integer,
    String,
    and_,
    bindparam,
    case,
    false,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from api.jobs.database import Database, DialectStatements
from api.jobs.schema import (
    ACTIVE,
    CHUNK_ITEMS,
    CHUNKS_PER_JOB,
    GRADE,
    MIN_CHUNK_ITEMS,
    chunks,
    items,
    jobs,
    results,
)


class Chunk(NamedTuple):
    """One leased unit of a job: its items ``lo <= idx < hi``.

    Attributes:
        job_id: The job.
        lo: The first item index of the chunk (its key within the job).
        hi: One past the last item index.
    """

    job_id: str
    lo: int
    hi: int


def chunk_bounds(
    kind: str, n_items: int, most: int = CHUNK_ITEMS
) -> list[tuple[int, int]]:
    """The ``(lo, hi)`` chunks of a new job: grading jobs in chunks, other kinds in one.

    A grading job is cut into ``CHUNKS_PER_JOB`` chunks of at least ``MIN_CHUNK_ITEMS`` items
    and at most ``most``: 240 items make 30 chunks of 8, 2,000 make 32 of 63, 100,000 make
    1,563 of 64. Only grading jobs are graded item by item within a chunk's bounds; a job of
    another kind (multiple choice, a calibration run, none of whose runners splits its work) is
    one chunk, leased whole as before. A job without items still has one chunk: its lease.
    """
    size = max(1, min(most, max(MIN_CHUNK_ITEMS, -(-n_items // CHUNKS_PER_JOB))))
    if kind != GRADE or n_items <= size:
        return [(0, max(n_items, 1))]
    return [(lo, min(lo + size, n_items)) for lo in range(0, n_items, size)]


class _ClaimStatements(DialectStatements):
    """The lease statements, built once per dialect and run with parameters.

    Building a statement and computing its cache key took about as much CPU as SQLite takes to
    run it (a claim and its release: 10 ms of CPU, a renewal 0.7 ms), and the worker runs them
    for every chunk and every poll. They hold no values: "now" is taken as each runs
    (``Database.now``), the rest are named parameters (``job``, ``holder``, ``at_lo``,
    ``lease_seconds``, ``kinds``; not column names, which an ``UPDATE`` reserves for its SET
    clause), so every store of a dialect shares them.
    """

    def __init__(self, db: Database) -> None:
        job = bindparam("job", type_=String)
        holder = bindparam("holder", type_=String)
        at_lo = bindparam("at_lo", type_=Integer)
        kinds = bindparam("kinds", type_=String, expanding=True)
        expires = db.now() + bindparam("lease_seconds", type_=Float)
        released = {"lease_owner": None, "lease_expires": 0.0}

        def live(table: FromClause = chunks) -> ColumnElement[bool]:
            """A chunk of ``table`` (``chunks`` or an alias) held by a lease not lapsed."""
            return and_(table.c.lease_owner.is_not(None), table.c.lease_expires >= db.now())

        # An open chunk of an unfinished job of ``kinds`` that nobody holds, or lapsed
        # elsewhere: ``holder``'s own lapsed leases are not claimable (its renewals revive them).
        claimable = and_(
            jobs.c.status.in_(ACTIVE),
            jobs.c.kind.in_(kinds),
            # A job paused at a cost budget waits for its time (``api.jobs.spend``).
            or_(jobs.c.paused_until.is_(None), jobs.c.paused_until <= db.now()),
            chunks.c.done == false(),
            or_(
                chunks.c.lease_owner.is_(None),
                and_(chunks.c.lease_expires < db.now(), chunks.c.lease_owner != holder),
            ),
        )
        with_jobs = chunks.join(jobs, jobs.c.id == chunks.c.job_id)
        self.probe = select(chunks.c.job_id).select_from(with_jobs).where(claimable).limit(1)
        held_chunks, held_jobs = chunks.alias("held_chunks"), jobs.alias("held_jobs")
        held = (
            select(held_jobs.c.owner, func.count().label("n"))
            .select_from(held_chunks.join(held_jobs, held_jobs.c.id == held_chunks.c.job_id))
            .where(live(held_chunks), held_jobs.c.status.in_(ACTIVE))
            .group_by(held_jobs.c.owner)
            .subquery("held")
        )
        pick = (
            select(chunks.c.job_id, chunks.c.lo)
            .select_from(with_jobs.outerjoin(held, held.c.owner == jobs.c.owner))
            .where(claimable)
            .order_by(func.coalesce(held.c.n, 0), jobs.c.created_at, jobs.c.id, chunks.c.lo)
            .limit(1)
            .with_for_update(skip_locked=True, of=chunks)
            .correlate(None)  # its own ``chunks``, not the UPDATE's
        )
        # One statement: the chunk is found, locked and taken, and the lock ends with it.
        self.take = (
            update(chunks).where(tuple_(chunks.c.job_id, chunks.c.lo).in_(pick))
            .values(lease_owner=holder, lease_expires=expires)
            .returning(chunks.c.job_id, chunks.c.lo, chunks.c.hi)
        )
        self.held_by_owner = (
            select(jobs.c.owner, func.count().label("n"))
            .select_from(with_jobs)
            .where(live(), jobs.c.status.in_(ACTIVE))
            .group_by(jobs.c.owner)
        )
        self.waiting_owners = (
            select(jobs.c.owner).distinct()
            .select_from(with_jobs)
            .where(
                jobs.c.status.in_(ACTIVE), jobs.c.kind.in_(kinds), chunks.c.done == false(),
                or_(chunks.c.lease_owner.is_(None), chunks.c.lease_expires < db.now()),
            )
        )
        self.stale_own = (
            select(chunks.c.job_id, chunks.c.lo, chunks.c.hi)
            .select_from(with_jobs)
            .where(
                chunks.c.lease_owner == holder, chunks.c.lease_expires < db.now(),
                chunks.c.done == false(), jobs.c.status.in_(ACTIVE),
            )
            .order_by(jobs.c.created_at, chunks.c.job_id, chunks.c.lo)
        )
        self.held = (
            select(chunks.c.job_id, chunks.c.lo, chunks.c.hi)
            .where(chunks.c.job_id == job, chunks.c.lease_owner == holder,
                   chunks.c.done == false())
            .order_by(chunks.c.lo)
        )
        # ``chunks`` rows of the job while it is unfinished (a subquery on ``jobs``).
        active_job = chunks.c.job_id.in_(
            select(jobs.c.id).where(jobs.c.id == job, jobs.c.status.in_(ACTIVE))
        )
        renewable = (chunks.c.job_id == job, chunks.c.lease_owner == holder,
                     chunks.c.done == false(), active_job)
        self.renew_all = update(chunks).where(*renewable).values(lease_expires=expires)
        self.renew_one = (
            update(chunks).where(*renewable, chunks.c.lo == at_lo).values(lease_expires=expires)
        )
        # The job, still active, with a chunk leased to ``holder``.
        holds = select(chunks.c.lo).where(
            chunks.c.job_id == jobs.c.id, chunks.c.lease_owner == holder
        ).exists()
        held_job = and_(jobs.c.id == job, jobs.c.status.in_(ACTIVE), holds)
        now = db.now()  # one value for both columns: the run starts when it is last updated
        running = and_(jobs.c.status == "running", jobs.c.run_started_at.is_not(None))
        self.start_run = update(jobs).where(held_job).values(
            status="running",
            run_started_at=case((running, jobs.c.run_started_at), else_=now),
            run_start_done=case((running, jobs.c.run_start_done), else_=jobs.c.done),
            updated_at=now,
        )
        self.set_progress = update(jobs).where(held_job).values(
            done=bindparam("set_done", type_=Integer),
            scored=bindparam("set_scored", type_=Integer),
            unscored=bindparam("set_unscored", type_=Integer),
            updated_at=db.now(),
        )
        pending = (
            select(items.c.idx)
            .where(
                items.c.job_id == chunks.c.job_id, items.c.idx >= chunks.c.lo,
                items.c.idx < chunks.c.hi, items.c.request.is_not(None),
                ~select(results.c.idx).where(
                    results.c.job_id == items.c.job_id, results.c.idx == items.c.idx
                ).exists(),
            )
            .exists()
        )
        self.finish_chunk = (
            update(chunks)
            .where(chunks.c.job_id == job, chunks.c.lo == at_lo, chunks.c.lease_owner == holder,
                   ~pending)
            .values(done=True, **released)
        )
        self.complete = (
            update(jobs).where(held_job, jobs.c.done >= jobs.c.total)
            .values(status="done", updated_at=db.now())
        )
        self.all_done = update(chunks).where(chunks.c.job_id == job).values(done=True, **released)
        self.fail = update(jobs).where(held_job).values(
            status="failed", detail=bindparam("why", type_=String), updated_at=db.now()
        )
        self.clear = update(chunks).where(chunks.c.job_id == job).values(**released)
        mine = (chunks.c.job_id == job, chunks.c.lease_owner == holder)
        self.release_all = update(chunks).where(*mine).values(**released)
        self.release_one = update(chunks).where(*mine, chunks.c.lo == at_lo).values(**released)
        # The job's chunks, locked and read as they are now (``FOR UPDATE`` waits for a claim
        # under way and returns the row it wrote; a claim after it skips them): a job nobody
        # holds a live lease on goes back to queued, and never while a replica has just taken
        # one of its chunks. One statement, so the locks end with it.
        leases = (
            select(chunks.c.lease_owner, chunks.c.lease_expires)
            .where(chunks.c.job_id == job)
            .with_for_update()
            .cte("leases")
            .prefix_with("MATERIALIZED", dialect="postgresql")
        )
        held_now = select(leases.c.lease_owner).where(
            leases.c.lease_owner.is_not(None), leases.c.lease_expires >= db.now()
        ).exists()
        self.requeue = (
            update(jobs).where(jobs.c.id == job, jobs.c.status == "running", ~held_now)
            .values(status="queued")
        )


class Claims:
    """The lease operations of the job store (``JobStore`` exposes them).

    Args:
        db: The jobs database.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._sql = _ClaimStatements.of(db)

    # -- claiming ------------------------------------------------------------------------------

    def claim(
        self, token: str, lease_seconds: float, limit: int, kinds: Sequence[str] = (GRADE,)
    ) -> list[Chunk]:
        """Take the leases of up to ``limit`` open chunks nobody holds, fairly across owners.

        Each lease goes to a chunk of the owner with the fewest chunks held right now (a live
        lease, in any process), of its oldest job first among equals, lowest items first: a key
        with one small job is not queued behind every chunk of a key that submitted a big one,
        and every replica with room takes chunks of the same running jobs. The counts are read
        in the claiming transaction, so the order holds across processes and replicas sharing
        the database.

        A chunk whose lease ``token`` itself holds is never claimed again, even when that lease
        has lapsed (an event loop blocked for a while): its runner is still alive here, and the
        next renewal revives the lease. Only jobs of ``kinds`` are claimed.
        """
        claimed: list[Chunk] = []
        if not kinds or limit <= 0:
            return claimed
        sql = self._sql
        wanted = {"holder": token, "kinds": list(kinds)}
        # A plain read first: an idle poll takes no lock at all.
        with self.db.read() as conn:
            if conn.execute(sql.probe, wanted).first() is None:
                return claimed
        for _ in range(limit):
            with self.db.autocommit() as conn:
                row = conn.execute(sql.take, {**wanted, "lease_seconds": lease_seconds}).first()
            if row is None:
                break
            claimed.append(Chunk(str(row.job_id), int(row.lo), int(row.hi)))
        return claimed

    def insert_chunks(
        self, conn: Connection, job_id: str, bounds: Sequence[tuple[int, int]], *,
        lease_owner: str | None, lease_seconds: float, done: bool,
    ) -> None:
        """Insert a new job's chunks in the caller's transaction; the first leased to the holder.

        Args:
            conn: The transaction storing the job.
            job_id: The job.
            bounds: ``(lo, hi)`` of each chunk (``chunk_bounds``).
            lease_owner: Token of the process that runs the job's first chunk at once, or None.
            lease_seconds: Length of that lease.
            done: The job is finished already (every item invalid): its chunks are done.
        """
        expires = self.db.now() + lease_seconds if lease_owner else 0.0
        rows = [
            {"job_id": job_id, "lo": lo, "hi": hi, "done": done,
             "lease_owner": lease_owner if n == 0 else None}
            for n, (lo, hi) in enumerate(bounds)
        ]
        conn.execute(insert(chunks), rows)
        if lease_owner:
            conn.execute(
                update(chunks).where(chunks.c.job_id == job_id, chunks.c.lo == bounds[0][0])
                .values(lease_expires=expires)
            )

    def reopen(
        self, conn: Connection, job_id: str, indexes: Sequence[int], *,
        lease_owner: str | None, lease_seconds: float,
    ) -> None:
        """Open the chunks holding ``indexes`` again (``retry-unscored``), in the caller's tx.

        Every lease on the job is cleared; the first reopened chunk goes to ``lease_owner``
        when given.
        """
        bounds = conn.execute(
            select(chunks.c.lo, chunks.c.hi).where(chunks.c.job_id == job_id)
            .order_by(chunks.c.lo)
        ).all()
        wanted = sorted(indexes)
        reopened = [
            int(row.lo) for row in bounds
            if any(row.lo <= idx < row.hi for idx in wanted)
        ]
        conn.execute(
            update(chunks).where(chunks.c.job_id == job_id)
            .values(lease_owner=None, lease_expires=0.0)
        )
        if not reopened:
            return
        conn.execute(
            update(chunks).where(chunks.c.job_id == job_id, chunks.c.lo.in_(reopened))
            .values(done=False)
        )
        if lease_owner:
            conn.execute(
                update(chunks).where(chunks.c.job_id == job_id, chunks.c.lo == reopened[0])
                .values(lease_owner=lease_owner, lease_expires=self.db.now() + lease_seconds)
            )

    def clear(self, conn: Connection, job_id: str) -> None:
        """Drop every lease on the job's chunks, in the caller's transaction (a finished job)."""
        conn.execute(self._sql.clear, {"job": job_id})

    # -- what is held --------------------------------------------------------------------------

    def held_by_owner(self) -> dict[str, int]:
        """Chunks held by a live lease (running somewhere), per owner."""
        with self.db.read() as conn:
            return {str(r.owner): int(r.n) for r in conn.execute(self._sql.held_by_owner)}

    def waiting_owners(self, kinds: Sequence[str]) -> set[str]:
        """Owners with an open chunk of a job of ``kinds`` that nobody holds (waiting)."""
        if not kinds:
            return set()
        with self.db.read() as conn:
            found = conn.execute(self._sql.waiting_owners, {"kinds": list(kinds)}).scalars()
            return {str(owner) for owner in found}

    def stale_own(self, token: str) -> list[Chunk]:
        """Open chunks of active jobs leased to ``token`` whose lease has lapsed (oldest first)."""
        with self.db.read() as conn:
            rows = conn.execute(self._sql.stale_own, {"holder": token})
            return [Chunk(str(r.job_id), int(r.lo), int(r.hi)) for r in rows]

    def held(self, job_id: str, token: str) -> list[Chunk]:
        """The open chunks of ``job_id`` leased to ``token`` (lapsed or not), lowest first."""
        with self.db.read() as conn:
            rows = conn.execute(self._sql.held, {"job": job_id, "holder": token})
            return [Chunk(str(r.job_id), int(r.lo), int(r.hi)) for r in rows]

    def holders(self, job_id: str) -> dict[str, int]:
        """Who holds a lease on the job's chunks (lapsed or not): token -> chunks held."""
        query = (
            select(chunks.c.lease_owner, func.count().label("n"))
            .where(chunks.c.job_id == job_id, chunks.c.lease_owner.is_not(None))
            .group_by(chunks.c.lease_owner)
        )
        with self.db.read() as conn:
            return {str(r.lease_owner): int(r.n) for r in conn.execute(query)}

    # -- the holder's changes ------------------------------------------------------------------

    def renew(
        self, job_id: str, token: str, lease_seconds: float, lo: int | None = None
    ) -> bool:
        """Extend ``token``'s leases on the job (its chunk at ``lo``, or all it holds).

        False when none is held any more (taken over, finished) or the job is no longer active
        (cancelled, failed, done): the holder stops.
        """
        sql = self._sql
        with self.db.autocommit() as conn:
            if lo is None:
                result = conn.execute(sql.renew_all, {
                    "job": job_id, "holder": token, "lease_seconds": lease_seconds})
            else:
                result = conn.execute(sql.renew_one, {
                    "job": job_id, "holder": token, "lease_seconds": lease_seconds,
                    "at_lo": lo})
        return result.rowcount >= 1

    def start_run(self, job_id: str, token: str) -> bool:
        """Mark a job ``token`` holds a chunk of running; a queued job's run starts now.

        The run's start (time and items done then) is kept while the job stays running, however
        many replicas join it, so its rate and ETA count every replica's results.
        """
        with self.db.autocommit() as conn:
            result = conn.execute(self._sql.start_run, {"job": job_id, "holder": token})
        return result.rowcount == 1

    def set_progress(self, job_id: str, token: str, done: int, scored: int) -> bool:
        """Record the progress of a job without item rows (a calibration run) run here.

        ``done`` units are finished, ``scored`` of them scored. False when the lease is lost.
        """
        with self.db.autocommit() as conn:
            result = conn.execute(self._sql.set_progress, {
                "job": job_id, "holder": token, "set_done": done, "set_scored": scored,
                "set_unscored": max(done - scored, 0)})
        return result.rowcount == 1

    def finish_chunk(self, job_id: str, lo: int, token: str) -> bool:
        """Mark ``token``'s chunk done and drop its lease, if none of its items lacks a result.

        False when items of the chunk are still to grade, or the lease is not ``token``'s.
        """
        with self.db.autocommit() as conn:
            result = conn.execute(self._sql.finish_chunk,
                                  {"job": job_id, "at_lo": lo, "holder": token})
        return result.rowcount == 1

    def complete_if_finished(self, job_id: str, token: str) -> bool:
        """Mark a running job done when every valid item has a result (any holder may).

        Then its chunks are marked done, in a statement of its own on Postgres: a process that
        stops in between leaves chunks of a finished job open, which nothing claims or renews.
        """
        with self.db.autocommit() as conn:
            result = conn.execute(self._sql.complete, {"job": job_id, "holder": token})
            if result.rowcount == 1:
                conn.execute(self._sql.all_done, {"job": job_id})
        return result.rowcount == 1

    def fail(self, job_id: str, token: str, detail: str) -> None:
        """Mark a job this process runs (a chunk of) as failed: every replica stops it.

        Its leases are dropped after (another statement on Postgres: a lease left on a failed
        job renews nothing, so its holders stop all the same).
        """
        with self.db.autocommit() as conn:
            # Postgres text cannot hold NUL; a message quoting one keeps the rest.
            result = conn.execute(self._sql.fail, {
                "job": job_id, "holder": token, "why": detail.replace("\x00", "\\x00")})
            if result.rowcount == 1:
                self.clear(conn, job_id)

    def release(self, job_id: str, token: str, lo: int | None = None) -> None:
        """Give up ``token``'s lease on a chunk (``lo``), or on all its chunks of the job.

        A running job nobody else holds a live lease on goes back to ``queued`` for the next
        process, and never while another holder has just taken one of its chunks (``requeue``
        reads the chunks locked).
        """
        sql = self._sql
        job = {"job": job_id}
        with self.db.autocommit() as conn:
            if lo is None:
                conn.execute(sql.release_all, {**job, "holder": token})
            else:
                conn.execute(sql.release_one, {**job, "holder": token, "at_lo": lo})
            conn.execute(sql.requeue, job)
