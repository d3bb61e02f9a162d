"""This process's side of the leases: claim chunks of jobs, renew them, run them, hand them back.

Several processes (uvicorn workers, replicas) share the database, and each runs chunks of the
running jobs (``api.jobs.claims``): a chunk is run by the one process holding its lease (owner
token = pid + random suffix, renewed every poll while it runs), so a big job is graded by every
process with room at once. A lease that is not renewed expires, and another process takes the
chunk over. On a clean shutdown the worker stops feeding new items, lets the ones in flight
finish and be stored (up to ``drain_timeout``), and releases its leases, so the next process
starts at once and no judge call is thrown away.

The worker runs the kinds it has a runner for (``register``), and claims only those, so an older
process sharing the database never runs a job it does not understand. Finished jobs past the
retention period are deleted here too (with their files, by the kind's purger).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from api.jobs import policy
from api.jobs.claims import Chunk
from api.jobs.database import STORE_ERRORS, is_transient
from api.jobs.schema import JobRow
from api.jobs.store import JobStore
from core.errors import JudgeError
from judge.engine import TENANT

log = logging.getLogger("bonusjudge.jobs")

_T = TypeVar("_T")

STORE_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Longest waits between attempts of a store write that failed (a full disk, a lock held too
long, a connection cut); each wait is drawn between half of its value and all of it."""

Run = Callable[[str, JobRow], Awaitable[None]]
"""Runs one claimed chunk of a job: ``run(job_id, row)`` (see ``api.jobs.manager.JobRunner``);
the chunk is ``current_chunk()``."""

_CHUNK: ContextVar[Chunk | None] = ContextVar("bonusjudge_job_chunk", default=None)


def current_chunk() -> Chunk | None:
    """The chunk the calling job runner runs (set by the worker for each runner task).

    A runner's signature stays ``(manager, job_id, row)`` for every kind; the one that splits
    its work (grading) reads its bounds here, as judge calls read their tenant from ``TENANT``.
    """
    return _CHUNK.get()


def _store_wait(state: RetryCallState) -> float:
    """The wait before retry number ``attempt_number`` of a store call (``STORE_RETRY_DELAYS``).

    Drawn at random between half the listed delay and all of it, so replicas whose statements
    failed together (a lock timeout behind one stopped replica) do not all come back at once.
    """
    # tenacity asks for the wait before it checks the stop: past the last delay, no retry comes.
    delay = STORE_RETRY_DELAYS[min(state.attempt_number, len(STORE_RETRY_DELAYS)) - 1]
    return delay * random.uniform(0.5, 1.0)


def _log_store_retry(state: RetryCallState) -> None:
    fn = state.args[0] if state.args else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    failure = state.outcome.exception() if state.outcome is not None else None
    log.warning("job store: %s failed (%s); retrying in %.1f s",
                getattr(fn, "__name__", "a call"), type(failure).__name__, wait)


async def store_retry(fn: Callable[..., _T], *args: Any) -> _T:
    """Run a store call in a thread, retrying it when the database fails for a while.

    The one retry policy of the job store's writes, on tenacity as the judge calls' is: a
    transient failure (``is_transient``: a full disk, a lock or statement timeout, a connection
    the server or the watchdog cut) is tried again after ``STORE_RETRY_DELAYS``, each attempt
    on a connection of its own, so a call whose transaction was cut starts afresh.

    Raises:
        Exception: the last failure (one of ``STORE_ERRORS``), once the retries are spent.
    """
    retrying = AsyncRetrying(
        retry=retry_if_exception(is_transient),
        wait=_store_wait,
        stop=stop_after_attempt(len(STORE_RETRY_DELAYS) + 1),
        before_sleep=_log_store_retry,
        reraise=True,
    )
    result: _T = await retrying(asyncio.to_thread, fn, *args)
    return result


@dataclass(frozen=True)
class WorkerSettings:
    """How a process's worker claims, runs and purges chunks of jobs.

    Raises:
        ValueError: ``lease_seconds`` is not more than twice ``poll_seconds``.
    """

    lease_seconds: float = 30.0
    """How long a claim lasts without renewal; a crashed process's chunks are taken over by
    another this long after its last renewal."""
    poll_seconds: float = 1.0
    """How often leases are renewed and unclaimed chunks looked for (and at once whenever a
    chunk ends here)."""
    drain_timeout: float = 30.0
    """On shutdown, how long running chunks may take to wind down (their in-flight items to
    finish and be stored)."""
    max_running: int = 4
    """Chunks this process runs at once, of one job or several (they share the grader's
    concurrency; each has at most its share of it in flight, so a newly started job's items are
    graded at once rather than queued behind the others')."""
    retention_seconds: float = 0.0
    """Finished jobs (items, results, files) are deleted this long after they last changed; 0
    keeps them."""
    purge_seconds: float = 300.0
    """How often the poll loop looks for expired jobs."""

    def __post_init__(self) -> None:
        if self.lease_seconds <= 2 * self.poll_seconds:
            raise ValueError("lease_seconds must exceed twice poll_seconds, or leases lapse")


class Worker:
    """Claims, renews, runs and releases this process's chunks of jobs; purges expired jobs.

    Args:
        store: The jobs database.
        settings: Its leases, polls, drain, running chunks and retention.
    """

    def __init__(self, store: JobStore, settings: WorkerSettings) -> None:
        self.store = store
        self.settings = settings
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._drain_deadline: float | None = None
        self._poller: asyncio.Task[None] | None = None
        self._tasks: dict[Chunk, asyncio.Task[None]] = {}
        self._runs: dict[str, Run] = {}
        self._purgers: dict[str, Callable[[str], None]] = {}
        self._yielding_kinds: set[str] = set()
        self._last_purge = float("-inf")
        # Chunks running here: (owner, kind), and the ones asked to make room for other owners.
        self._running: dict[Chunk, tuple[str, str]] = {}
        self._yielding: set[Chunk] = set()

    def register(
        self, kind: str, run: Run, *, purge: Callable[[str], None] | None = None,
        yields: bool = False,
    ) -> None:
        """Run (and claim) jobs of ``kind`` with ``run``.

        Args:
            kind: The job kind.
            run: Runs one claimed job of the kind.
            purge: Removes what a job of the kind keeps outside the store, once retention
                deletes the job.
            yields: The kind's runner stops feeding work when ``halted``, so its jobs can be
                handed over to another owner's.
        """
        self._runs[kind] = run
        if purge is not None:
            self._purgers[kind] = purge
        if yields:
            self._yielding_kinds.add(kind)

    def has_room(self, kind: str) -> bool:
        """Whether a chunk of a new job of ``kind`` can start here now (else it waits)."""
        return (
            not self.stopping.is_set() and len(self._tasks) < self.settings.max_running
            and kind in self._runs
        )

    def share(self, concurrency: int) -> int:
        """Items one chunk may have in flight here (``policy.share`` over the running chunks)."""
        return policy.share(concurrency, len(self._tasks))

    def halted(self, job_id: str) -> bool:
        """Whether the calling runner should stop feeding work (shutdown, or making room).

        A runner's own chunk (``current_chunk``) is asked; called from elsewhere, whether any
        chunk of the job here is.
        """
        if self.stopping.is_set():
            return True
        chunk = current_chunk()
        if chunk is not None and chunk.job_id == job_id:
            return chunk in self._yielding
        return any(held.job_id == job_id for held in self._yielding)

    def cancel(self, job_id: str) -> None:
        """Stop the job's runners here (other processes see it at their next renewal)."""
        for chunk, task in list(self._tasks.items()):
            if chunk.job_id == job_id:
                task.cancel()

    def wake(self) -> None:
        """Renew and claim now rather than at the next poll (a job was stored, a chunk ended)."""
        self._wake.set()

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the claim/renew loop (it picks up unfinished jobs at once)."""
        self.stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._drain_deadline = None
        self._poller = asyncio.create_task(self._poll(), name="bonusjudge-jobs-poll")

    def begin_stop(self) -> None:
        """Stop claiming jobs and feeding items now; the drain's ``drain_timeout`` starts here.

        Called when a stop signal arrives, before the HTTP server has finished its own last
        requests, so both wind down within one grace period; ``stop`` then waits for the rest.
        """
        if self._drain_deadline is None:
            self._drain_deadline = time.monotonic() + self.settings.drain_timeout
        self.stopping.set()
        self._wake.set()

    async def stop(self) -> None:
        """Stop feeding items, let in-flight ones finish (bounded), release every lease.

        In-flight items have until ``drain_timeout`` after ``begin_stop`` (or after this call);
        a job still running then is cancelled, and each job's lease is released as its runner
        ends, so another process (or the next start) takes it up at once.
        """
        self.begin_stop()
        if self._poller is not None:
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        tasks = list(self._tasks.values())
        if tasks:
            left = max(0.0, (self._drain_deadline or 0.0) - time.monotonic())
            _, late = await asyncio.wait(tasks, timeout=left) if left else (set(), set(tasks))
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    def abandon(self) -> None:
        """Hand back the lease of every chunk running here, now (synchronous; any thread).

        The immediate exit's path (a second stop signal): nothing is drained. Results stored so
        far are kept, items in flight are graded again by whichever process takes the chunk (an
        item is stored once, whoever finishes it), and nobody waits for the lease to expire.
        """
        for chunk in list(self._tasks):
            try:
                self.store.release(chunk.job_id, self.token, chunk.lo)
            except STORE_ERRORS:
                log.exception("job %s: could not release its lease", chunk.job_id)

    async def _poll(self) -> None:
        while not self.stopping.is_set():
            self._wake.clear()
            try:
                await self._tick()
            except Exception:
                log.exception("job lease renewal or claim failed")
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.poll_seconds)

    async def _tick(self) -> None:
        lease, most = self.settings.lease_seconds, self.settings.max_running
        for chunk, task in list(self._tasks.items()):
            held = await asyncio.to_thread(
                self.store.renew, chunk.job_id, self.token, lease, chunk.lo
            )
            if not held and not task.done():
                log.info("job %s: lease lost or job stopped; stopping its items %d-%d here",
                         chunk.job_id, chunk.lo, chunk.hi - 1)
                task.cancel()
        if not self.stopping.is_set():
            # Chunks this process holds but no longer runs (a release that failed on a full
            # disk): take them up again, rather than leaving them held until a restart.
            for chunk in await asyncio.to_thread(self.store.stale_own, self.token):
                running = self._tasks.get(chunk)
                if running is not None and not running.done():
                    continue  # still running here; its next renewal revives the lease
                if len(self._tasks) < most and await asyncio.to_thread(
                    self.store.renew, chunk.job_id, self.token, lease, chunk.lo
                ):
                    log.info("job %s: reclaiming this process's lapsed lease", chunk.job_id)
                    self.launch(chunk)
        free = most - len(self._tasks)
        if free > 0 and not self.stopping.is_set():
            claimed = await asyncio.to_thread(
                self.store.claim, self.token, lease, free, tuple(self._runs)
            )
            for chunk in claimed:
                self.launch(chunk)
        elif not self.stopping.is_set():
            await self._make_room()
        await self._purge_expired()

    async def _make_room(self) -> None:
        """When full and another owner waits with fewer chunks held, hand one slot over.

        The chosen chunk (``policy.make_room``) stops feeding items, lets its in-flight ones
        finish and be stored, and goes back to the queue. One hand-over at a time.
        """
        if self._yielding & set(self._tasks):
            return  # one hand-over at a time
        waiting = await asyncio.to_thread(self.store.waiting_owners, tuple(self._runs))
        if not waiting:
            return
        held = await asyncio.to_thread(self.store.held_by_owner)
        candidates = {
            chunk: owner
            for chunk, (owner, kind) in self._running.items()
            if kind in self._yielding_kinds and chunk in self._tasks
            and chunk not in self._yielding
        }
        chosen = policy.make_room(candidates, waiting, held)
        if chosen is not None:
            log.info("job %s: making room for another API key's job", chosen.job_id)
            self._yielding.add(chosen)

    async def _purge_expired(self) -> None:
        """Delete finished jobs past the retention period (at most every ``purge_seconds``)."""
        now = time.monotonic()
        settings = self.settings
        if settings.retention_seconds <= 0 or now - self._last_purge < settings.purge_seconds:
            return
        self._last_purge = now
        before = time.time() - settings.retention_seconds
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

    # -- running one chunk ---------------------------------------------------------------------

    def launch(self, chunk: Chunk) -> None:
        """Run a chunk this process holds the lease of (once: a second launch is a no-op)."""
        running = self._tasks.get(chunk)
        if running is not None and not running.done():
            return  # one runner per chunk per process, whatever the database says
        name = f"bonusjudge-job-{chunk.job_id}-{chunk.lo}"
        self._tasks[chunk] = asyncio.create_task(self._run(chunk), name=name)

    async def _run(self, chunk: Chunk) -> None:
        job_id = chunk.job_id
        try:
            row = await asyncio.to_thread(self.store.get, job_id)
            run = self._runs.get(row["kind"]) if row is not None else None
            if row is not None and run is not None:
                self._running[chunk] = (str(row["owner"]), str(row["kind"]))
                # This task's judge calls are made for the job's owner, and its runner works on
                # this chunk (the task's own context copy).
                TENANT.set(str(row["owner"]))
                _CHUNK.set(chunk)
                await run(job_id, row)
        except asyncio.CancelledError:
            log.info("job %s: stopped in this process", job_id)
            raise
        except STORE_ERRORS:
            # The store itself failed (a full disk): not the job's fault. It is released below
            # (or, if even that fails, its lease lapses and this process reclaims it), so it
            # goes on once the store works again.
            log.exception("job %s: the job store failed; the job will be retried", job_id)
        except Exception as exc:
            log.exception("job %s failed", job_id)
            detail = str(exc) if isinstance(exc, JudgeError) else (
                f"grading stopped by an unexpected {type(exc).__name__}; see the service log"
            )
            with suppress(*STORE_ERRORS):  # if even this fails, the lease lapses and is reclaimed
                await store_retry(self.store.fail, job_id, self.token, detail)
        finally:
            if self._tasks.get(chunk) is asyncio.current_task():
                del self._tasks[chunk]
                self._running.pop(chunk, None)
                self._yielding.discard(chunk)
            await self._release(chunk)
            self._wake.set()  # a slot is free: claim the next chunk now, not at the next poll

    async def _release(self, chunk: Chunk) -> None:
        """Give up the lease of a chunk that ended here, in a thread, even while cancelled.

        Never on the event loop: the release waits on the database (a lock another replica
        holds, a server that does not answer), and every request of this process would wait
        with it. Shielded: a second cancellation (a shutdown's) stops the wait, not the release,
        which its thread completes; a failure is logged (a lease not released lapses, and this
        process takes it up again: ``stale_own``).
        """
        release = asyncio.ensure_future(
            asyncio.to_thread(self.store.release, chunk.job_id, self.token, chunk.lo)
        )
        release.add_done_callback(functools.partial(_released, chunk.job_id))
        with suppress(Exception):  # logged by ``_released``
            await asyncio.shield(release)


def _released(job_id: str, release: asyncio.Future[None]) -> None:
    """Log a release that failed (whoever was waiting for it)."""
    if release.cancelled():
        return
    failure = release.exception()
    if isinstance(failure, STORE_ERRORS):
        log.error("job %s: could not release its lease: %s", job_id, failure)
    elif failure is not None:
        log.error("job %s: could not release its lease", job_id, exc_info=failure)
