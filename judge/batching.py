"""Micro-batching for CPU-bound scorers (BERTScore, the embedded matcher) under asyncio.

Items are graded concurrently, one coroutine each, but an encoder is far faster on a batch than on
single pairs. ``AsyncBatcher`` collects submissions for a few milliseconds (or until a batch is
full), runs the batch function in a worker thread (one at a time, since torch already uses every
core), and resolves each caller's future with its own result.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


class AsyncBatcher(Generic[In, Out]):
    """Run ``fn`` over batches of concurrently submitted inputs.

    Args:
        fn: Maps a list of inputs to a list of outputs of the same length, in order.
        batch_size: Largest batch.
        max_wait: Seconds to wait for a batch to fill once its first input arrived.
    """

    def __init__(
        self,
        fn: Callable[[list[In]], Sequence[Out]],
        *,
        batch_size: int = 64,
        max_wait: float = 0.01,
    ) -> None:
        self._fn = fn
        self._batch_size = batch_size
        self._max_wait = max_wait
        self._queue: asyncio.Queue[tuple[In, asyncio.Future[Out]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[asyncio.Future[Out]] = set()
        self.batches = 0
        self.items = 0

    def _ensure_worker(self) -> asyncio.Queue[tuple[In, asyncio.Future[Out]]]:
        loop = asyncio.get_running_loop()
        if (
            self._queue is None
            or self._loop is not loop
            or self._worker is None
            or self._worker.done()
        ):
            # A batcher may outlive one event loop (tests, the CLI calling asyncio.run twice).
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._run(self._queue))
        return self._queue

    async def submit(self, item: In) -> Out:
        """Queue one input and wait for its output."""
        queue = self._ensure_worker()
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._waiting.add(future)
        try:
            await queue.put((item, future))
            return await future
        finally:
            self._waiting.discard(future)

    async def _run(self, queue: asyncio.Queue[tuple[In, asyncio.Future[Out]]]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await queue.get()
            batch = [first]
            deadline = loop.time() + self._max_wait
            while len(batch) < self._batch_size:
                timeout = deadline - loop.time()
                if timeout <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), timeout))
                except TimeoutError:
                    break
            live = [(item, fut) for item, fut in batch if not fut.done()]
            if not live:
                continue
            try:
                results = await asyncio.to_thread(self._fn, [item for item, _ in live])
                if len(results) != len(live):
                    raise RuntimeError("batch function returned a wrong number of results")
            except Exception as exc:
                for _, fut in live:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            self.batches += 1
            self.items += len(live)
            for (_, fut), result in zip(live, results, strict=True):
                if not fut.done():
                    fut.set_result(result)

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
