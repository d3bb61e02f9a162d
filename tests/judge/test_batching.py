"""``AsyncBatcher``: concurrent submissions share batches, each submitter gets its own result or
the batch's error, and ``aclose`` stops the worker without leaving a submitter waiting."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from judge.batching import AsyncBatcher


class Recorder:
    """A batch function that doubles its inputs and records every batch it ran."""

    def __init__(self, delay: float = 0.0) -> None:
        self.batches: list[list[int]] = []
        self.delay = delay

    def __call__(self, batch: list[int]) -> list[int]:
        self.batches.append(list(batch))
        if self.delay:
            time.sleep(self.delay)
        return [2 * x for x in batch]


async def test_concurrent_submissions_share_one_batch() -> None:
    fn = Recorder()
    batcher = AsyncBatcher(fn, batch_size=64, max_wait=0.05)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(10)))
    await batcher.aclose()
    assert results == [2 * i for i in range(10)]  # each submitter gets its own output
    assert fn.batches == [list(range(10))]
    assert batcher.batches == 1 and batcher.items == 10


async def test_batches_never_exceed_batch_size() -> None:
    fn = Recorder()
    batcher = AsyncBatcher(fn, batch_size=4, max_wait=0.05)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(10)))
    await batcher.aclose()
    assert results == [2 * i for i in range(10)]
    assert [len(b) for b in fn.batches] == [4, 4, 2]


async def test_a_lone_submission_waits_at_most_max_wait() -> None:
    batcher = AsyncBatcher(Recorder(), batch_size=64, max_wait=0.02)
    started = time.monotonic()
    assert await batcher.submit(3) == 6
    assert time.monotonic() - started < 1.0
    await batcher.aclose()


async def test_the_batch_function_runs_off_the_event_loop() -> None:
    threads: list[int] = []

    def fn(batch: list[int]) -> list[int]:
        threads.append(threading.get_ident())
        return batch

    batcher = AsyncBatcher(fn, max_wait=0.0)
    await batcher.submit(1)
    await batcher.aclose()
    assert threads and threads[0] != threading.get_ident()


async def test_an_error_reaches_every_submitter_of_the_batch_and_the_worker_goes_on() -> None:
    calls = {"n": 0}

    def flaky(batch: list[int]) -> list[int]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("encoder failed")
        return batch

    batcher = AsyncBatcher(flaky, batch_size=64, max_wait=0.05)
    results = await asyncio.gather(
        *(batcher.submit(i) for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, ValueError) and str(r) == "encoder failed" for r in results)
    assert await batcher.submit(7) == 7  # the next batch is served
    await batcher.aclose()


async def test_a_wrong_number_of_results_is_an_error_not_a_mix_up() -> None:
    batcher = AsyncBatcher(lambda batch: batch[:-1], batch_size=64, max_wait=0.05)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    await batcher.aclose()


async def test_a_cancelled_submission_is_left_out_of_its_batch() -> None:
    fn = Recorder()
    batcher = AsyncBatcher(fn, batch_size=64, max_wait=0.1)
    gone = asyncio.ensure_future(batcher.submit(1))
    kept = asyncio.ensure_future(batcher.submit(2))
    await asyncio.sleep(0.01)  # both queued, the batch still filling
    gone.cancel()
    assert await kept == 4
    assert fn.batches == [[2]]
    await batcher.aclose()


async def test_aclose_cancels_a_submission_in_flight() -> None:
    """A submitter whose batch was running when the worker stopped must not wait forever."""
    batcher = AsyncBatcher(Recorder(delay=0.3), batch_size=64, max_wait=0.0)
    pending = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0.05)  # the batch is running in its thread
    await batcher.aclose()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(pending, 2.0)


async def test_aclose_is_safe_to_repeat_and_a_later_submit_starts_a_new_worker() -> None:
    batcher = AsyncBatcher(Recorder(), max_wait=0.0)
    await batcher.aclose()  # never started
    assert await batcher.submit(1) == 2
    await batcher.aclose()
    await batcher.aclose()
    assert await batcher.submit(2) == 4
    await batcher.aclose()


def test_a_batcher_outlives_an_event_loop() -> None:
    """The CLI and tests call ``asyncio.run`` more than once with one grader."""
    batcher = AsyncBatcher(Recorder(), max_wait=0.0)
    assert asyncio.run(batcher.submit(1)) == 2
    assert asyncio.run(batcher.submit(2)) == 4
