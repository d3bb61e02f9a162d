"""The job store: every operation on persisted jobs, behind one class (``JobStore``).

A job survives a restart: its items and every result live in a database, by default the SQLite
file ``jobs.sqlite3`` under the service's data folder, or a Postgres database shared by several
replicas (the ``jobs_url`` setting; ``open_store`` picks). ``JobStore`` is the boundary the rest of
the service talks to (the worker, the job manager, the job runners, the routes' services); it
holds no scheduling policy. Its SQL, written once for both engines with SQLAlchemy Core, is
spread over collaborators on one ``Database``: the jobs themselves (here), the leases on their
chunks (``Claims``), the item rows and results (``ItemRows``), the files kept with a job
(``StoredFiles``) and what judge calls spent, per key and day and per job (``Spend``, used
directly as ``store.spend``). The schema is migrated when the store opens (``api.jobs.migrate``).

Every method is synchronous and short; async callers run them with ``asyncio.to_thread``.
A failing database raises one of ``api.jobs.database.STORE_ERRORS`` (answered 503).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    String,
    bindparam,
    case,
    delete,
    func,
    insert,
    select,
    update,
)

from api.errors import Conflict
from api.jobs.claims import Chunk, Claims, chunk_bounds
from api.jobs.database import STORE_ERRORS, Database, open_database
from api.jobs.files import StoredFiles
from api.jobs.items import EncodedItems, ItemRows, JobItem
from api.jobs.migrate import upgrade
from api.jobs.policy import Quota, RetryPolicy, Usage
from api.jobs.postgres import Timeouts
from api.jobs.schema import (
    ACTIVE,
    CHUNK_ITEMS,
    FINISHED,
    GRADE,
    JobRow,
    chunks,
    items,
    jobs,
    report_files,
    results,
)
from api.jobs.spend import PAUSED, Spend, is_paused, public_status
from api.settings import ServiceSettings
from bonusjudge_client.wire.grading import GradeResult
from bonusjudge_client.wire.schemas import JobState
from core.errors import ConfigError
from judge.config import JudgeConfig, JudgeOverrides

JOBS_DB = "jobs.sqlite3"
"""File name of the SQLite jobs database in the service's data folder (the default store)."""

_MAX_SQL_INT = 2**63 - 1


# A job's row, read for every status poll and by the worker for every job it runs: built once
# (its values are parameters), so each read skips building the statement and its cache key.
_GET = select(jobs).where(jobs.c.id == bindparam("job", type_=String))
_GET_OWNED = _GET.where(jobs.c.owner == bindparam("owned_by", type_=String))


def open_store(settings: ServiceSettings) -> JobStore:
    """The service's job store: Postgres at ``settings.jobs_url``, else ``<data dir>/jobs.sqlite3``.

    A Postgres store has the settings' ``jobs_*`` timeouts.

    Raises:
        ConfigError: the store cannot be opened or migrated (``jobs_url`` or ``data_dir``).
    """
    timeouts = Timeouts(
        lock=settings.jobs_lock_timeout_seconds,
        statement=settings.jobs_statement_timeout_seconds,
        idle_in_transaction=settings.jobs_idle_in_transaction_seconds,
    )
    return JobStore(settings.jobs_url or settings.resolved_data_dir() / JOBS_DB, timeouts=timeouts)


def _findable(key: str) -> bool:
    """Whether a key from a request can name a row (Postgres text never holds NUL)."""
    return "\x00" not in key


def _locked_status(conn: Connection, job_id: str, owner: str) -> Any:
    """The status, kind, options and pause of ``owner``'s job, its row locked (or None)."""
    return conn.execute(
        select(jobs.c.status, jobs.c.kind, jobs.c.options, jobs.c.paused_until)
        .where(jobs.c.id == job_id, jobs.c.owner == owner)
        .with_for_update()
    ).first()


class JobStore:
    """The jobs database: a SQLite file (one machine) or a Postgres database (many replicas).

    Opening connects, and migrates the schema to this code's (once, whoever opens first).

    Args:
        target: The SQLite file (its folder is created), or a ``postgresql://`` URL.
        chunk_items: Most items in a chunk of a new grading job (the unit a process leases).
        timeouts: A Postgres store's lock, statement and idle-in-transaction timeouts (the
            defaults when None).

    Raises:
        ConfigError: the database cannot be reached, opened or migrated; ``jobs_url`` (a URL)
            or ``data_dir`` (a file) is named, and no password is shown.
    """

    def __init__(
        self, target: str | Path, *, chunk_items: int = CHUNK_ITEMS,
        timeouts: Timeouts | None = None,
    ) -> None:
        if chunk_items < 1:
            raise ValueError("chunk_items must be at least 1")
        self.chunk_items = chunk_items
        field = "jobs_url" if isinstance(target, str) and "://" in target else "data_dir"
        try:
            self.db: Database = open_database(target, timeouts)
        except RuntimeError as exc:
            raise ConfigError(f"the job store cannot be opened: {exc}", field=field) from exc
        try:
            upgrade(self.db)
        except STORE_ERRORS as exc:
            self.db.close()
            raise ConfigError(
                f"the job store {self.db.describe()} cannot be opened: {_reason(exc)}",
                field=field,
            ) from exc
        except BaseException:
            self.db.close()
            raise
        self.claims = Claims(self.db)
        self.items = ItemRows(self.db)
        self.files = StoredFiles(self.db)
        self.spend = Spend(self.db)

    @property
    def path(self) -> Path | None:
        """The SQLite file, or None for a Postgres store."""
        return self.db.path

    def describe(self) -> str:
        """Where the jobs are kept, for a log line (a URL without its password, or the file)."""
        return self.db.describe()

    def close(self) -> None:
        """Close every connection this store opened."""
        self.db.close()

    # -- jobs ----------------------------------------------------------------------------------

    def create(
        self,
        *,
        job_id: str,
        owner: str,
        items: Sequence[JobItem] | EncodedItems,
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
            items: Its items (none for a ``calibrate`` job), or the rows of an upload encoded
                as it was read (``api.jobs.staging``), inserted batch by batch.
            overrides: The judge selection of a grading job (stored to rebuild its config).
            config: The judge configuration; gives ``model`` and ``config_hash`` unless those are
                given.
            lease_owner: Token of the process that runs its first chunk at once, or None to
                leave it queued.
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
        encoded = items if isinstance(items, EncodedItems) else ItemRows.encode(job_id, items)
        valid = encoded.valid
        if total is not None:
            valid = total
        shown_model = model if model is not None else (config.model if config else "")
        shown_hash = config_hash if config_hash is not None else (
            config.config_hash() if config else ""
        )
        status: JobState = "queued" if valid else "done"
        holder = lease_owner if valid else None
        # Chunks up to the last valid item: the invalid ones after it have nothing to grade.
        bounds = chunk_bounds(kind, encoded.span, self.chunk_items)
        # What is written, rows and index entries included, not the compressed values alone.
        stored = encoded.stored(self.items.costs, len(bounds))
        overrides_json = overrides.model_dump_json(exclude_none=True) if overrides else "{}"
        now = self.db.now()
        with self.db.tx() as conn:
            if quota is not None:
                # One owner's submissions take turns, on every replica: the usage read here
                # cannot change before this job is stored (SQLite's write lock does the same).
                self.db.lock(conn, f"quota:{owner}")
                quota.check(self._usage(conn, owner), valid, stored)
            conn.execute(
                insert(jobs).values(
                    id=job_id, kind=kind, options=json.dumps(dict(options or {})), owner=owner,
                    status=status, total=valid, invalid=encoded.submitted - valid,
                    next_seq=encoded.finished, overrides=overrides_json, model=shown_model,
                    config_hash=shown_hash, created_at=now, updated_at=now, bytes=stored,
                    request_dict=encoded.request_dict,
                )
            )
            ItemRows.insert(conn, encoded)
            self.claims.insert_chunks(
                conn, job_id, bounds,
                lease_owner=holder, lease_seconds=lease_seconds, done=not valid,
            )

    @staticmethod
    def _usage(conn: Connection, owner: str) -> Usage:
        """What ``owner`` holds now, read in the caller's transaction (for its quota)."""
        active = jobs.c.status.in_(ACTIVE)
        left = jobs.c.total - jobs.c.done
        row = conn.execute(
            select(
                func.coalesce(func.sum(case((active, 1), else_=0)), 0).label("jobs"),
                func.coalesce(
                    func.sum(case((active & (left > 0), left), else_=0)), 0
                ).label("queued"),
                func.coalesce(func.sum(jobs.c.bytes), 0).label("stored"),
            ).where(jobs.c.owner == owner)
        ).one()
        return Usage(jobs=int(row.jobs), queued=int(row.queued), stored=int(row.stored))

    def cancel(self, job_id: str, owner: str, kind: str | None = None) -> bool:
        """Cancel an active job of ``owner``; False when unknown. Finished results are kept.

        Every lease on its chunks goes with it: each process running one finds out at its next
        renewal and stops.
        """
        if not _findable(job_id):
            return False
        mine = [jobs.c.id == job_id, jobs.c.owner == owner]
        if kind is not None:
            mine.append(jobs.c.kind == kind)
        # Statements that commit as they end (Postgres): the job's row is never held locked
        # between two round trips, where a pause of this process would hold up its runners.
        with self.db.autocommit() as conn:
            stopped = conn.execute(
                update(jobs).where(*mine, jobs.c.status.in_(ACTIVE)).values(
                    status="cancelled", detail="cancelled by request", updated_at=self.db.now(),
                ).returning(jobs.c.id)
            ).first()
            if stopped is not None:
                self.claims.clear(conn, job_id)  # its holders see it at their next renewal anyway
                return True
            return conn.execute(select(jobs.c.id).where(*mine)).first() is not None

    def reset_unscored(
        self,
        job_id: str,
        owner: str,
        *,
        lease_owner: str | None,
        lease_seconds: float,
        retry: RetryPolicy,
        quota: Quota | None = None,
    ) -> int | None:
        """Put a finished grading job's unscored items back in the queue; returns how many.

        Only the items ``retry`` re-sends go back (a refusal stays, unless included); their
        stored results are removed (the results stream then holds them only once they are
        graded again) and the job is queued again, as one more of its retry passes: the chunks
        holding them open again, the first leased to ``lease_owner`` when given. The items
        left out are named in the job's ``detail``.
        None when there is no such grading job of ``owner``.

        Raises:
            Conflict: the job is not ``done`` (still running, cancelled or failed), or has had
                its ``retry.max_passes`` passes.
            QuotaExceeded: queueing the items again would take ``owner`` over ``quota`` (the
                job counts as an active job again, its items as unfinished ones).
        """
        if not _findable(job_id):
            return None
        with self.db.tx() as conn:
            if quota is not None:
                # The same turn-taking as ``create``: the usage read here holds until commit.
                self.db.lock(conn, f"quota:{owner}")
            row = _locked_status(conn, job_id, owner)
            if row is None or row.kind != GRADE:
                return None
            if row.status != "done":
                shown = PAUSED if is_paused(row._mapping, time.time()) else row.status
                raise Conflict(
                    f"job {job_id} is {shown}: only a finished (done) job's unscored "
                    "items can be graded again",
                    field="job_id",
                )
            options = json.loads(row.options or "{}")
            passes = int(options.get("retry_passes", 0))
            unscored = self.items.unscored(conn, job_id)
            chosen = [(idx, size) for idx, reasons, size in unscored if retry.resends(reasons)]
            kept = len(unscored) - len(chosen)
            detail = (
                f"{kept} unscored item(s) not graded again: the judge answered their prompts "
                "(a refusal or an unusable answer); name the reasons in `include` to re-send them"
                if kept else None
            )
            if not chosen:
                if kept:
                    conn.execute(update(jobs).where(jobs.c.id == job_id).values(detail=detail))
                return 0
            retry.check(job_id, passes)
            if quota is not None:
                quota.check(self._usage(conn, owner), len(chosen), 0)
            indexes = [idx for idx, _ in chosen]
            freed = sum(size for _, size in chosen)
            reset = conn.execute(
                delete(results).where(results.c.job_id == job_id, results.c.idx.in_(indexes))
            ).rowcount
            now = self.db.now()
            conn.execute(
                update(jobs).where(jobs.c.id == job_id).values(
                    status="queued", detail=detail, done=jobs.c.done - reset,
                    unscored=jobs.c.unscored - reset,
                    bytes=case((jobs.c.bytes > freed, jobs.c.bytes - freed), else_=0),
                    options=json.dumps({**options, "retry_passes": passes + 1}),
                    updated_at=now,
                )
            )
            self.claims.reopen(conn, job_id, indexes, lease_owner=lease_owner,
                               lease_seconds=lease_seconds)
        return int(reset)

    def purge(self, before: float, limit: int = 200) -> list[tuple[str, str]]:
        """Delete up to ``limit`` finished jobs last changed before ``before``, with their rows.

        Their items, results and files go too. Replicas purging at once take different jobs
        (``SKIP LOCKED`` on Postgres).

        Returns:
            ``(job id, kind)`` of each job deleted (the caller removes files kept beside them).
        """
        with self.db.tx() as conn:
            rows = conn.execute(
                select(jobs.c.id, jobs.c.kind)
                .where(jobs.c.status.in_(FINISHED), jobs.c.updated_at < before)
                .order_by(jobs.c.updated_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            ).all()
            ids = [str(row.id) for row in rows]
            if ids:
                conn.execute(delete(results).where(results.c.job_id.in_(ids)))
                conn.execute(delete(items).where(items.c.job_id.in_(ids)))
                conn.execute(delete(report_files).where(report_files.c.job_id.in_(ids)))
                conn.execute(delete(chunks).where(chunks.c.job_id.in_(ids)))
                conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
        return [(str(row.id), str(row.kind)) for row in rows]

    def get(self, job_id: str, owner: str | None = None, kind: str | None = None) -> JobRow | None:
        """The job's row (restricted to ``owner`` and to ``kind`` unless None)."""
        if not _findable(job_id):
            return None
        with self.db.read() as conn:
            if owner is None:
                found = conn.execute(_GET, {"job": job_id})
            else:
                found = conn.execute(_GET_OWNED, {"job": job_id, "owned_by": owner})
            row = found.mappings().first()
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
    ) -> list[JobRow]:
        """Jobs of ``owner`` and ``kind`` (optionally of one status), newest first.

        Args:
            owner: The caller's identity; other owners' jobs are never returned.
            kind: The job kind (``GRADE``, ...).
            status: Only jobs in this status, when given.
            limit: At most this many rows (all when None).
            offset: Skip this many rows of the newest-first order first.
        """
        query = select(jobs).where(jobs.c.owner == owner, jobs.c.kind == kind)
        if status is not None:
            # The status callers see: a paused job is not "queued" or "running" to them.
            query = query.where(public_status(self.db) == status)
        # The id orders jobs created in the same instant, or two pages could repeat or skip one.
        query = query.order_by(jobs.c.created_at.desc(), jobs.c.id.desc())
        # SQL integers are 64-bit; past that, any offset is beyond the last job anyway.
        if limit is not None:
            query = query.limit(min(limit, _MAX_SQL_INT))
        if offset:
            query = query.offset(min(offset, _MAX_SQL_INT))
        with self.db.read() as conn:
            return list(conn.execute(query).mappings().all())

    def status_counts(self, owner: str | None = None) -> dict[str, int]:
        """Jobs per status as callers see it (``paused`` apart): all, or ``owner``'s only.

        All for the Prometheus gauge, ``owner``'s for its ``/v1/usage``.
        """
        status = public_status(self.db).label("status")
        query = select(status, func.count().label("n")).group_by(status)
        if owner is not None:
            query = query.where(jobs.c.owner == owner)
        with self.db.read() as conn:
            return {str(r.status): int(r.n) for r in conn.execute(query)}

    # -- leases on chunks (``Claims``) ----------------------------------------------------------

    def claim(
        self, token: str, lease_seconds: float, limit: int, kinds: Sequence[str] = (GRADE,)
    ) -> list[Chunk]:
        """Take up to ``limit`` free chunks of jobs of ``kinds``, fairly across owners."""
        return self.claims.claim(token, lease_seconds, limit, kinds)

    def held_by_owner(self) -> dict[str, int]:
        """Chunks held by a live lease (running somewhere), per owner."""
        return self.claims.held_by_owner()

    def waiting_owners(self, kinds: Sequence[str]) -> set[str]:
        """Owners with an open chunk of a job of ``kinds`` that nobody holds (waiting)."""
        return self.claims.waiting_owners(kinds)

    def stale_own(self, token: str) -> list[Chunk]:
        """Open chunks of active jobs leased to ``token`` whose lease has lapsed (oldest first)."""
        return self.claims.stale_own(token)

    def held(self, job_id: str, token: str) -> list[Chunk]:
        """The open chunks of ``job_id`` leased to ``token`` (lapsed or not), lowest first."""
        return self.claims.held(job_id, token)

    def holders(self, job_id: str) -> dict[str, int]:
        """Who holds a lease on the job's chunks (lapsed or not): token -> chunks held."""
        return self.claims.holders(job_id)

    def renew(
        self, job_id: str, token: str, lease_seconds: float, lo: int | None = None
    ) -> bool:
        """Extend ``token``'s leases on the job (chunk ``lo``, or all); False when none is left."""
        return self.claims.renew(job_id, token, lease_seconds, lo)

    def start_run(self, job_id: str, token: str) -> bool:
        """Mark a job ``token`` holds a chunk of running (a queued job's run starts now)."""
        return self.claims.start_run(job_id, token)

    def set_progress(self, job_id: str, token: str, done: int, scored: int) -> bool:
        """Record the progress of a job without item rows run here; False when the lease is lost."""
        return self.claims.set_progress(job_id, token, done, scored)

    def finish_chunk(self, job_id: str, lo: int, token: str) -> bool:
        """Mark ``token``'s chunk done if each of its items has a result (``Claims``'s)."""
        return self.claims.finish_chunk(job_id, lo, token)

    def complete_if_finished(self, job_id: str, token: str) -> bool:
        """Mark a running job done when every valid item has a result."""
        return self.claims.complete_if_finished(job_id, token)

    def fail(self, job_id: str, token: str, detail: str) -> None:
        """Mark a job this process runs (a chunk of) as failed."""
        self.claims.fail(job_id, token, detail)

    def release(self, job_id: str, token: str, lo: int | None = None) -> None:
        """Give up ``token``'s lease on chunk ``lo`` (or all its chunks of the job)."""
        self.claims.release(job_id, token, lo)

    # -- items and results (``ItemRows``) --------------------------------------------------------

    def save_grades(self, job_id: str, grades: Sequence[tuple[int, GradeResult]]) -> int:
        """Store items' ``(index, result)`` in one transaction; how many were new."""
        return self.save_results(job_id, [
            (index, result.model_dump_json(), result.status, result.status == "scored")
            for index, result in grades
        ])

    def save_results(self, job_id: str, results: Sequence[tuple[int, str, str, bool]]) -> int:
        """Store several ``(index, result JSON, status, scored)`` at once; how many were new."""
        return self.items.save_results(job_id, results)

    def item_errors(self, job_id: str) -> list[tuple[int, int | None, str]]:
        """Items rejected at submission: ``(index, line or None, error JSON)`` in input order."""
        return self.items.item_errors(job_id)

    def pending(
        self, job_id: str, after: int, limit: int, before: int | None = None
    ) -> list[tuple[int, str, str]]:
        """Valid items without a result, ``after < index < before``: (index, item id, JSON)."""
        return self.items.pending(job_id, after, limit, before)

    def entries(
        self, job_id: str, after_seq: int, up_to: int, limit: int, skip: int = 0
    ) -> list[tuple[int, str]]:
        """Finished entries ``after_seq < seq <= up_to`` in finishing order, as NDJSON lines.

        The first ``skip`` are left out (a stream resumed at an offset of that many lines).
        """
        return self.items.entries(job_id, after_seq, up_to, limit, skip)

    def results(self, job_id: str) -> Iterator[GradeResult]:
        """Every stored result of a grading job, in finishing order, read in pages."""
        return self.items.results(job_id)

    def raw_results(self, job_id: str) -> Iterator[str]:
        """Every stored result of a job as its JSON text, in finishing order, read in pages."""
        return self.items.raw_results(job_id)

    # -- files kept with a job (``StoredFiles``) -------------------------------------------------

    def put_files(self, job_id: str, files: Mapping[str, bytes]) -> None:
        """Keep ``files`` (name -> content) with a job, replacing those of the same names.

        Raises:
            ValueError: a file is over ``api.jobs.files.MAX_FILE_BYTES`` (nothing is stored).
        """
        self.files.put(job_id, files)

    def read_file(self, job_id: str, name: str) -> bytes | None:
        """A file kept with a job, or None when it has none of that name."""
        if not (_findable(job_id) and _findable(name)):
            return None
        return self.files.read(job_id, name)

    def file_names(self, job_id: str) -> list[str]:
        """The names of the files kept with a job, sorted."""
        return self.files.names(job_id) if _findable(job_id) else []

    def delete_files(self, job_id: str) -> None:
        """Remove the files kept with a job (one that was not stored after all)."""
        self.files.delete(job_id)


def _reason(exc: BaseException) -> str:
    """The driver's first line about a store failure (no SQL, no parameters, no password)."""
    original = getattr(exc, "orig", None) or exc
    lines = str(original).strip().splitlines()
    return lines[0] if lines else type(original).__name__
