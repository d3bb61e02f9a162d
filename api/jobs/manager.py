"""The job manager: submit, watch, stream, summarise and cancel jobs of one service process.

Job kinds share the store, the leases and the result stream: ``grade`` (answers graded item by
item), ``mcq`` (multiple-choice scoring) and ``calibrate`` (a calibration run writing a report
folder; it has no item rows). Their runners live in the service layer (``api.services``) and the
app registers them (``JobManager.register``); the manager's ``Worker`` claims and runs them, so
the job store never imports what runs its jobs.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from api.errors import NotFound
from api.jobs.items import EncodedItems, JobItem
from api.jobs.policy import Quota, RetryPolicy
from api.jobs.schema import GRADE, JobRow
from api.jobs.status import grading_summary, job_status
from api.jobs.store import JobStore
from api.jobs.worker import Worker, WorkerSettings
from bonusjudge_client.wire.schemas import JobStatus
from judge.aggregate import Summary
from judge.config import JudgeConfig, JudgeOverrides
from judge.engine import Grader

JobRunner = Callable[["JobManager", str, JobRow], Awaitable[None]]
"""Runs one claimed chunk of a job of a kind: ``runner(manager, job_id, row)``.

It holds the chunk's lease while it runs (the chunk is ``api.jobs.worker.current_chunk()``; a
kind that does not split its work has one chunk, the whole job): it stores results
(``manager.store``), stops feeding work when ``manager.halted(job_id)``, and just returns when
it could not finish, or marks the job done with ``store.complete_if_finished``. An exception
marks the job failed (a ``JudgeError``'s message is shown as the job's ``detail``).
"""


class JobManager:
    """Submits, runs, watches and cancels jobs for one service process.

    Args:
        store: The jobs database.
        grader: The engine that grades.
        worker_settings: How this process claims, runs and purges chunks of jobs (leases,
            polls, drain, chunks at once, retention).

    The cost budgets are not the manager's: the app hands them (``api.budgets.KeyBudgets``) to
    the runners it registers.
    """

    def __init__(
        self,
        store: JobStore,
        grader: Grader,
        *,
        worker_settings: WorkerSettings,
    ) -> None:
        self.store = store
        self.grader = grader
        self.worker = Worker(store, worker_settings)

    def register(
        self, kind: str, runner: JobRunner, *, purge: Callable[[str], None] | None = None,
        yields: bool = False,
    ) -> None:
        """Run jobs of ``kind`` with ``runner`` (this process then claims that kind too).

        ``purge(job_id)``, when given, removes what a job of this kind keeps outside the store
        (a calibration report) once retention deletes the job. ``yields``: the runner stops
        feeding work when ``halted``, so a job of the kind can make room for another key's.
        """
        self.worker.register(kind, functools.partial(runner, self), purge=purge, yields=yields)

    @property
    def token(self) -> str:
        """This process's lease owner token."""
        return self.worker.token

    @property
    def lease_seconds(self) -> float:
        """How long a claim lasts without renewal."""
        return self.worker.settings.lease_seconds

    @property
    def poll_seconds(self) -> float:
        """How often leases are renewed and unclaimed jobs looked for."""
        return self.worker.settings.poll_seconds

    @property
    def stopping(self) -> asyncio.Event:
        """Set when the service shuts down: runners stop feeding new work."""
        return self.worker.stopping

    def share(self, concurrency: int) -> int:
        """Items one running chunk may have in flight: its share of the grader's concurrency."""
        return self.worker.share(concurrency)

    def halted(self, job_id: str) -> bool:
        """Whether a job should stop feeding work (shutdown, or making room for another key)."""
        return self.worker.halted(job_id)

    async def start(self) -> None:
        """Start claiming and running jobs (unfinished ones are picked up at once).

        Jobs paused at a key's day budget may run again: the limit may have been raised since
        (one still over it pauses again before sending anything).
        """
        await asyncio.to_thread(self.store.spend.resume_day_pauses)
        await self.worker.start()

    def begin_stop(self) -> None:
        """A stop signal arrived: stop claiming and feeding now (``stop`` waits for the rest)."""
        self.worker.begin_stop()

    async def stop(self) -> None:
        """Stop feeding items, let in-flight ones finish (bounded), release every lease."""
        await self.worker.stop()

    def abandon(self) -> None:
        """Release every lease held here at once, draining nothing (an immediate exit)."""
        self.worker.abandon()

    # -- API ---------------------------------------------------------------------------------

    async def submit(
        self,
        *,
        owner: str,
        items: Sequence[JobItem] | EncodedItems,
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
        """Store a job and start running (its first chunk) here when this process has room.

        Whatever room is left here, and on other replicas, takes further chunks at once.

        The keyword arguments after ``config`` are those of ``JobStore.create``; ``job_id`` is
        generated unless given (a caller that prepares files under the id first passes it).

        Raises:
            QuotaExceeded: the job would take ``owner`` over a limit of ``quota``.
        """
        job_id = job_id or uuid.uuid4().hex
        run_here = self.worker.has_room(kind)
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
            await self._launch_held(job_id)
        return job_status(row)

    async def _launch_held(self, job_id: str) -> None:
        """Run the chunks of ``job_id`` leased to this process; claim more now if there is room."""
        for chunk in await asyncio.to_thread(self.store.held, job_id, self.token):
            self.worker.launch(chunk)
        self.worker.wake()

    async def row(self, job_id: str, owner: str, kind: str = GRADE) -> JobRow:
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
        # Every other process running a chunk of it sees the cancellation at its next renewal.
        self.worker.cancel(job_id)
        return await self.status(job_id, owner, kind)

    async def retry_unscored(
        self, job_id: str, owner: str, *, retry: RetryPolicy, quota: Quota | None = None
    ) -> JobStatus:
        """Grade a finished job's unscored items again (as the CLI's ``--retry-unscored``).

        Only those ``retry`` re-sends, within its passes and ``owner``'s ``quota``
        (``JobStore.reset_unscored``).

        Raises:
            NotFound: no such grading job for this owner.
            Conflict: the job is not done, or has had its retry passes.
            QuotaExceeded: the items would take ``owner`` over a limit of ``quota``.
        """
        run_here = self.worker.has_room(GRADE)
        reset = await asyncio.to_thread(
            lambda: self.store.reset_unscored(
                job_id, owner, lease_owner=self.token if run_here else None,
                lease_seconds=self.lease_seconds, retry=retry, quota=quota,
            )
        )
        if reset is None:
            raise NotFound(f"no job {job_id!r}")
        if reset and run_here:
            await self._launch_held(job_id)
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

    async def _entry_lines(self, job_id: str, skip: int, up_to: int) -> AsyncIterator[str]:
        # The offset counts lines: numbers may be missing (a lost race, a result graded again),
        # so the first page skips that many entries, and the next ones follow the last number.
        after = 0
        while after < up_to:
            page = await asyncio.to_thread(self.store.entries, job_id, after, up_to, 500, skip)
            skip = 0
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
        return await asyncio.to_thread(grading_summary, self.store, job_id)
