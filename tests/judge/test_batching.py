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


class Owned:
    """A batch function over (owner, value) pairs that records each batch and when it ran."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.batches: list[list[tuple[str, int]]] = []
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def __call__(self, batch: list[tuple[str, int]]) -> list[int]:
        with self._lock:
            self.batches.append(list(batch))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        time.sleep(self.delay)
        with self._lock:
            self.running -= 1
        return [value for _, value in batch]


def owned_batcher(fn: Owned, **options: object) -> tuple[AsyncBatcher[tuple[str, int], int],
                                                          list[str]]:
    """A batcher whose owner is read from a list the test sets before each submission."""
    current = ["a"]
    batcher: AsyncBatcher[tuple[str, int], int] = AsyncBatcher(
        fn, owner=lambda: current[0], **options  # type: ignore[arg-type]
    )
    return batcher, current


async def submit_as(
    batcher: AsyncBatcher[tuple[str, int], int], current: list[str], owner: str, value: int
) -> asyncio.Future[int]:
    current[0] = owner
    future = asyncio.ensure_future(batcher.submit((owner, value)))
    await asyncio.sleep(0)  # submitted (the owner is read) before the next one is set
    return future


async def test_another_owners_item_does_not_wait_for_the_batch_under_way() -> None:
    """Issue 41.5: B's lone item started behind A's batch under way, then shared a batch with
    A's backlog. Now it runs at once in a second lane, in a batch of its own."""
    fn = Owned(delay=0.4)
    batcher, current = owned_batcher(fn, batch_size=64, max_wait=0.005)
    a_items = [await submit_as(batcher, current, "a", n) for n in range(8)]
    await asyncio.sleep(0.05)  # A's first batch is running
    a_more = [await submit_as(batcher, current, "a", n) for n in range(8, 16)]
    started = time.monotonic()
    b_item = await submit_as(batcher, current, "b", 99)
    assert await b_item == 99
    b_waited = time.monotonic() - started
    await asyncio.gather(*a_items, *a_more)
    await batcher.aclose()
    assert b_waited < 0.6, b_waited  # one batch's time (0.4 s), not A's under way plus its own
    assert [("b", 99)] in fn.batches  # B's batch held B's item alone (A's was under way)
    assert fn.most_running == 2


async def test_one_owner_never_has_two_batches_under_way() -> None:
    fn = Owned(delay=0.05)
    batcher, current = owned_batcher(fn, batch_size=4, max_wait=0.005)
    futures = [await submit_as(batcher, current, "a", n) for n in range(12)]
    assert await asyncio.gather(*futures) == list(range(12))
    await batcher.aclose()
    assert fn.most_running == 1
    assert [len(batch) for batch in fn.batches] == [4, 4, 4]  # alone: whole batches, in order
    assert [value for batch in fn.batches for _, value in batch] == list(range(12))


async def test_owners_waiting_together_share_batches_round_robin_and_short() -> None:
    fn = Owned(delay=0.05)
    batcher, current = owned_batcher(fn, batch_size=64, max_wait=0.05, shared_batch_size=4,
                                     lanes=1)
    futures = [await submit_as(batcher, current, "a", n) for n in range(6)]
    futures += [await submit_as(batcher, current, "b", n) for n in range(100, 102)]
    assert sorted(await asyncio.gather(*futures)) == [0, 1, 2, 3, 4, 5, 100, 101]
    await batcher.aclose()
    # One item per owner in turn, four at most while both are active.
    assert fn.batches[0] == [("a", 0), ("b", 100), ("a", 1), ("b", 101)]
    assert all(len(batch) <= 4 for batch in fn.batches)
    assert batcher._pending == {} and batcher._running == {}  # nothing kept for idle owners
