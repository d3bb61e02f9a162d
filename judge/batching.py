"""Micro-batching for CPU-bound scorers (BERTScore, the embedded matcher) under asyncio.

Items are graded concurrently, one coroutine each, but an encoder is far faster on a batch than on
single pairs. ``AsyncBatcher`` collects submissions for a few milliseconds (or until a batch is
full), runs the batch function in a worker thread, and resolves each caller's future with its own
result.

Batches are shared fairly between their owners (the API keys, ``judge.calls.TENANT``), as
``FairLimiter`` shares the grader's slots. With one first-come queue and one batch at a time, a
key's lone item waited for the batch of another key's items under way, then rode in a batch
full of that key's items; under a flood a batch of the packaged encoder took 60-90 ms on this
project's 2-core machines (29 ms idle), so the other key's BERTScore, not its judge call, set its
latency (issue 41.5: B's p95 under A's 12 batches of 256 items went 2.5x its unloaded p95). So:

* submissions queue per owner, and an owner has at most one batch under way (an owner alone runs
  one batch at a time, as before: torch already uses every core);
* up to ``lanes`` batches run at once, so an owner with nothing under way starts its batch
  without waiting for another's;
* a batch is filled round robin, one item per waiting owner in turn, the owner served longest ago
  first; while more than one owner is active (waiting, or submitted within ``recent`` seconds),
  a batch holds at most ``shared_batch_size`` items, which keeps each owner's turn short.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


class AsyncBatcher(Generic[In, Out]):
    """Run ``fn`` over batches of concurrently submitted inputs, fairly between their owners.

    Args:
        fn: Maps a list of inputs to a list of outputs of the same length, in order.
        batch_size: Largest batch.
        max_wait: Seconds to wait for a batch to fill once its first input arrived.
        owner: Whom a submission is for, read when it is submitted (e.g. ``TENANT.get``);
            None: every submission has one owner, and batches are filled first come, first served.
        shared_batch_size: Largest batch while more than one owner is active.
        lanes: Batches under way at once (each in its own worker thread), one per owner at most.
        recent: Seconds an owner's last submission keeps it active.
        clock: Monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        fn: Callable[[list[In]], Sequence[Out]],
        *,
        batch_size: int = 64,
        max_wait: float = 0.01,
        owner: Callable[[], Hashable] | None = None,
        shared_batch_size: int = 8,
        lanes: int = 2,
        recent: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min(batch_size, shared_batch_size, lanes) < 1:
            raise ValueError("batch_size, shared_batch_size and lanes must be at least 1")
        self._fn = fn
        self._batch_size = batch_size
        self._shared_batch_size = min(shared_batch_size, batch_size)
        self._max_wait = max_wait
        self._owner = owner
        self._lanes = lanes
        # Batches under way per owner: an owner has at most one (see the module's docstring).
        self._running: dict[Hashable, int] = {}
        self._recent = recent
        self._now = clock
        # When each owner last submitted, kept for ``recent`` seconds.
        self._seen: dict[Hashable, float] = {}
        # Per owner, in submission order; an owner's queue goes when it is empty (no leak).
        self._pending: dict[Hashable, deque[tuple[In, asyncio.Future[Out]]]] = {}
        # When each waiting owner was last put in a batch: the one served longest ago goes first.
        self._served: dict[Hashable, int] = {}
        self._clock = itertools.count()
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[asyncio.Future[Out]] = set()
        self.batches = 0
        self.items = 0

    def _ensure_worker(self) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        if (
            self._arrived is None
            or self._loop is not loop
            or self._worker is None
            or self._worker.done()
        ):
            # A batcher may outlive one event loop (tests, the CLI calling asyncio.run twice).
            if self._loop is not loop:
                self._forget()
            self._loop = loop
            self._arrived = asyncio.Event()
            self._worker = loop.create_task(self._run(self._arrived))
        return self._arrived

    def waiting(self) -> int:
        """Submissions queued and not yet in a batch."""
        return sum(len(queue) for queue in self._pending.values())

    async def submit(self, item: In) -> Out:
        """Queue one input and wait for its output."""
        arrived = self._ensure_worker()
        owner = self._owner() if self._owner is not None else None
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._waiting.add(future)
        try:
            self._pending.setdefault(owner, deque()).append((item, future))
            self._seen[owner] = self._now()
            arrived.set()
            return await future
        finally:
            self._waiting.discard(future)

    def _ready(self) -> list[Hashable]:
        """Owners with submissions waiting and no batch under way, served longest ago first."""
        for owner in [owner for owner, queue in self._pending.items() if not queue]:
            del self._pending[owner]
        ready = [owner for owner in self._pending if owner not in self._running]
        return sorted(ready, key=lambda owner: self._served.get(owner, -1))

    def _take(
        self, owners: list[Hashable]
    ) -> tuple[list[tuple[In, asyncio.Future[Out]]], set[Hashable]]:
        """The next batch and its owners: round robin over ``owners`` (from :meth:`_ready`)."""
        taken: set[Hashable] = set()
        size = self._shared_batch_size if self._crowded(len(owners)) else self._batch_size
        batch: list[tuple[In, asyncio.Future[Out]]] = []
        while owners and len(batch) < size:
            for owner in list(owners):
                queue = self._pending[owner]
                batch.append(queue.popleft())
                taken.add(owner)
                self._served[owner] = next(self._clock)
                if not queue:
                    owners.remove(owner)
                    del self._pending[owner]
                if len(batch) == size:
                    break
        for owner in [owner for owner in self._served if owner not in self._pending]:
            del self._served[owner]  # idle: it starts again as a newcomer
        return batch, taken

    def _crowded(self, waiting_owners: int) -> bool:
        """Whether more than one owner waits now, or submitted within the last ``recent`` s."""
        if waiting_owners > 1:
            return True
        horizon = self._now() - self._recent
        for owner in [owner for owner, at in self._seen.items() if at < horizon]:
            del self._seen[owner]
        return len(self._seen) > 1

    async def _run(self, arrived: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        batches: set[asyncio.Task[None]] = set()
        try:
            while True:
                while len(batches) >= self._lanes or not self._ready():
                    arrived.clear()
                    await arrived.wait()
                deadline = loop.time() + self._max_wait
                while self.waiting() < self._batch_size:
                    timeout = deadline - loop.time()
                    if timeout <= 0:
                        break
                    arrived.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(arrived.wait(), timeout)
                owners = self._ready()
                if not owners:
                    continue
                taken, batch_owners = self._take(owners)
                batch = [(item, fut) for item, fut in taken if not fut.done()]
                if not batch:
                    continue
                for owner in batch_owners:  # now, before the worker looks for ready owners again
                    self._running[owner] = self._running.get(owner, 0) + 1
                task = loop.create_task(self._run_batch(batch, batch_owners))
                batches.add(task)
                task.add_done_callback(partial(self._lane_freed, batches, arrived))
        finally:
            for task in batches:
                task.cancel()

    async def _run_batch(
        self,
        batch: list[tuple[In, asyncio.Future[Out]]],
        owners: set[Hashable],
    ) -> None:
        """Run one batch in a worker thread and answer its submitters; frees its owners' lane."""
        try:
            results = await asyncio.to_thread(self._fn, [item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError("batch function returned a wrong number of results")
        except Exception as exc:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
        else:
            self.batches += 1
            self.items += len(batch)
            for (_, fut), result in zip(batch, results, strict=True):
                if not fut.done():
                    fut.set_result(result)
        finally:
            for owner in owners:
                left = self._running.pop(owner, 1) - 1  # gone already: forgotten by aclose
                if left:
                    self._running[owner] = left

    @staticmethod
    def _lane_freed(
        batches: set[asyncio.Task[None]], arrived: asyncio.Event, task: asyncio.Task[None]
    ) -> None:
        # Once the task is out of ``batches``, not before: woken earlier, the worker would see
        # every lane still taken and wait again, with nothing left to wake it.
        batches.discard(task)
        arrived.set()

    async def aclose(self) -> None:
        """Stop the worker (pending submissions are cancelled)."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
            self._worker = None
        # No worker will answer a submission still queued, or in the batch it was running:
        # cancelled, its submitter raises CancelledError instead of waiting forever.
        for future in list(self._waiting):
            future.cancel()
        self._forget()

    def _forget(self) -> None:
        """Drop the queues and the owners' history (the worker, and its loop, are gone)."""
        self._pending.clear()
        self._served.clear()
        self._seen.clear()
        self._running.clear()
