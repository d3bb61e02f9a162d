"""A fair share of the grader's concurrency between the callers it grades for.

``Grader.grade`` runs at most ``concurrency`` items at once. With a plain semaphore the slots go
first come, first served, so a caller that queues 3,072 items puts them all in front of another
caller's one item (issue 31: a 0.1 s grade took 22.8 s behind 12 batches). ``FairLimiter`` keeps
one queue per owner (the API-key digest, ``judge.calls.TENANT``) and hands each free slot to the
waiting owner holding the fewest slots, the least recently served first among equals; within one
owner, items go in the order they came (FIFO). An owner alone gets every slot, as before.

Handing the next freed slot to a newcomer still makes it wait for one: with every slot busy on
0.1 s calls started together, a key's one request waited up to a whole call behind another key's
backlog (B's median grade 2.07x its unloaded time under A's 12 batches). So while more than one
owner has been active within ``recent`` seconds, an owner that already holds a slot does not
take the last free one: it stays free for the next owner to arrive, who starts at once. Alone,
an owner still fills every slot; with company it gives up one slot of ``capacity``.

Jobs and synchronous requests of one owner share its queue: whatever the route, a key gets its
share of the judge and no more while others wait.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager

__all__ = ["FairLimiter"]


class FairLimiter:
    """At most ``capacity`` holders at once; a freed slot goes to the least-served waiting owner.

    Args:
        capacity: Slots in all (the grader's concurrency).
        recent: Seconds another owner's last request keeps one slot in reserve for newcomers
            (see the module's docstring); 0 turns the reserve off.
        clock: Monotonic seconds (injectable for tests).

    Not thread-safe: used from one event loop, as the grader is.
    """

    def __init__(
        self, capacity: int, *, recent: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.recent = recent
        self._clock_s = clock
        # When each owner last asked for a slot, kept for ``recent`` seconds.
        self._seen: dict[Hashable, float] = {}
        self._held: dict[Hashable, int] = {}
        self._queues: dict[Hashable, deque[asyncio.Future[None]]] = {}
        # When each owner was last given a slot: among owners holding as many slots, the one
        # served longest ago goes first (round robin). Forgotten when the owner goes idle.
        self._served: dict[Hashable, int] = {}
        self._clock = itertools.count()
        self._busy = 0

    @property
    def busy(self) -> int:
        """Slots held now, by every owner."""
        return self._busy

    def held(self, owner: Hashable) -> int:
        """Slots ``owner`` holds now."""
        return self._held.get(owner, 0)

    def waiting(self, owner: Hashable | None = None) -> int:
        """Acquisitions waiting for a slot: ``owner``'s, or everyone's when ``owner`` is None."""
        if owner is not None:
            return len(self._queues.get(owner, ()))
        return sum(len(queue) for queue in self._queues.values())

    def owners(self) -> int:
        """Owners the limiter keeps state for (holding or waiting); 0 when idle (no leak)."""
        return len(self._held.keys() | self._queues.keys() | self._served.keys())

    @asynccontextmanager
    async def slot(self, owner: Hashable) -> AsyncIterator[None]:
        """Hold one slot for ``owner`` for the body of an ``async with``."""
        await self.acquire(owner)
        try:
            yield
        finally:
            self.release(owner)

    async def acquire(self, owner: Hashable) -> None:
        """Wait for a slot for ``owner``; cancelling the wait leaves nothing behind."""
        self._seen[owner] = self._clock_s()
        if self._busy < self.capacity and not self._queues and self._may_take(owner):
            self._grant(owner)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(owner, deque()).append(future)
        self._dispatch()  # a slot kept in reserve goes to a newcomer at once
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                # The slot was handed over just as the waiter was cancelled: pass it on, or it
                # would be held by nobody for ever.
                self.release(owner)
            else:
                self._drop(owner, future)
            raise

    def release(self, owner: Hashable) -> None:
        """Give back a slot ``owner`` holds, and hand free slots to the waiting owners."""
        held = self._held[owner] - 1
        if held:
            self._held[owner] = held
        else:
            del self._held[owner]
            if owner not in self._queues:
                self._served.pop(owner, None)
        self._busy -= 1
        self._dispatch()

    def _grant(self, owner: Hashable) -> None:
        self._held[owner] = self._held.get(owner, 0) + 1
        self._served[owner] = next(self._clock)
        self._busy += 1

    def _dispatch(self) -> None:
        while self._busy < self.capacity and self._queues:
            # A handful of owners at most wait at once, so a scan is cheaper than a heap kept in
            # step with every grant and release.
            owner = min(
                self._queues, key=lambda o: (self._held.get(o, 0), self._served.get(o, -1))
            )
            if not self._may_take(owner):
                return  # the one free slot is kept for an owner that holds none
            queue = self._queues[owner]
            future = queue.popleft()
            if not queue:
                del self._queues[owner]
            if future.done():  # cancelled, not yet dropped by its waiter
                continue
            future.set_result(None)
            self._grant(owner)

    def _may_take(self, owner: Hashable) -> bool:
        """Whether ``owner`` may take a free slot now.

        The last free slot is kept while another owner has asked within ``recent`` seconds,
        unless ``owner`` holds none.
        """
        if self._busy < self.capacity - 1 or self.capacity < 2 or self.recent <= 0:
            return True
        if not self._held.get(owner):
            return True
        now = self._clock_s()
        for other, seen in list(self._seen.items()):
            if now - seen > self.recent:
                del self._seen[other]  # gone quiet: forgotten, so nothing grows
            elif other != owner:
                return False
        return True

    def _drop(self, owner: Hashable, future: asyncio.Future[None]) -> None:
        queue = self._queues.get(owner)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del self._queues[owner]
        if owner not in self._held and owner not in self._queues:
            self._served.pop(owner, None)
