"""Several stores on one database at once, as replicas are: claims of chunks, lease takeover,
results and quotas stay exact under real concurrency (separate engines and connections, threads
started together). Postgres is what replicas share; SQLite's file is checked alike where it
applies."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from sqlalchemy import func, select

from api.errors import QuotaExceeded
from api.jobs import Chunk, JobItem, JobStore, Quota
from api.jobs.schema import results
from tests.helpers.engine import numbered_request as request

_T = TypeVar("_T")


def add_job(store: JobStore, job_id: str, owner: str, n_items: int = 1,
            quota: Quota | None = None) -> None:
    store.create(
        job_id=job_id, owner=owner,
        items=[JobItem(i, f"it-{i}", None, request(i), None) for i in range(n_items)],
        overrides=None, config=None, lease_owner=None, lease_seconds=30.0, quota=quota,
    )


def together(*calls: Callable[[], _T]) -> list[_T]:
    """Run ``calls`` in threads released at the same instant; their results (or first error)."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def run(slot: int, call: Callable[[], _T]) -> None:
        barrier.wait()
        try:
            outcomes[slot] = ("ok", call())
        except BaseException as exc:  # handed to the test below
            outcomes[slot] = ("error", exc)

    threads = [threading.Thread(target=run, args=(n, c)) for n, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for status, value in outcomes:
        if status == "error":
            raise value
    return [value for _, value in outcomes]


@pytest.fixture
def two_stores(open_store: Callable[..., JobStore]) -> tuple[JobStore, JobStore]:
    """Two stores on one database, each with its own engine and pool: two replicas. Grading
    jobs are cut in chunks of 4 items."""
    return open_store(chunk_items=4), open_store(chunk_items=4)


def job_ids(chunks: list[Chunk]) -> list[str]:
    return [chunk.job_id for chunk in chunks]


def test_replicas_claiming_at_once_never_take_the_same_chunk(
    two_stores: tuple[JobStore, JobStore],
) -> None:
    first, second = two_stores
    owners = ["a", "b", "c", "d"]
    ids = [f"job-{n:02d}" for n in range(8)]
    for n, job_id in enumerate(ids):
        add_job(first, job_id, owners[n % len(owners)], n_items=18)  # chunks of 4, 4, 4, 4, 2
    every_chunk = sorted(
        Chunk(job_id, lo, min(lo + 4, 18)) for job_id in ids for lo in range(0, 18, 4)
    )

    def claimer(store: JobStore, token: str) -> list[Chunk]:
        taken: list[Chunk] = []
        while batch := store.claim(token, 30.0, 3):
            taken += batch
            # A replica works between claims. Without a pause, a claimer whose claims take a
            # millisecond (the statements are built once) can take all 40 chunks while SQLite's
            # busy handler keeps the others asleep, and nothing races.
            time.sleep(0.005)
        return taken

    tokens = ("replica-1/a", "replica-1/b", "replica-2/a", "replica-2/b")
    claimed = together(
        lambda: claimer(first, tokens[0]), lambda: claimer(first, tokens[1]),
        lambda: claimer(second, tokens[2]), lambda: claimer(second, tokens[3]),
    )
    every = [chunk for taken in claimed for chunk in taken]
    assert sorted(every) == every_chunk  # each chunk once: none twice, none left
    # The claims did race (more than one claimer won chunks). Not every claimer need win one:
    # on SQLite a writer may wait out the others' whole run for its lock.
    assert sum(1 for taken in claimed if taken) >= 2, [len(t) for t in claimed]
    for job_id in ids:
        expected = Counter(token for token, taken in zip(tokens, claimed, strict=True)
                           for chunk in taken if chunk.job_id == job_id)
        assert first.holders(job_id) == dict(expected)
    # While the leases live, nobody else gets any of them.
    assert first.claim("replica-3", 30.0, 10) == [] and second.claim("replica-3", 30.0, 10) == []
    assert first.held_by_owner() == {"a": 10, "b": 10, "c": 10, "d": 10}


def test_a_job_whose_holder_stops_renewing_is_taken_over(
    two_stores: tuple[JobStore, JobStore],
) -> None:
    holder, other = two_stores
    add_job(holder, "job", "a", n_items=2)
    lease = 0.5  # renewed every 125 ms: a renewal may be 375 ms late before the lease lapses
    assert job_ids(holder.claim("replica-1", lease, 1)) == ["job"]
    assert holder.start_run("job", "replica-1")
    # While the holder renews (its heartbeat), the job stays with it past its first lease.
    deadline = time.monotonic() + 2.5 * lease
    while time.monotonic() < deadline:
        assert other.claim("replica-2", lease, 1) == []
        assert holder.renew("job", "replica-1", lease)
        time.sleep(lease / 4)
    # The holder dies: no more renewals. Once its lease lapses, another replica takes the job.
    stopped = time.monotonic()
    while not (taken := other.claim("replica-2", 30.0, 1)):
        assert time.monotonic() - stopped < 10 * lease, "the lapsed lease was never taken over"
        time.sleep(0.05)
    assert taken == [Chunk("job", 0, 2)]
    assert time.monotonic() - stopped >= 0.5 * lease  # not before it lapsed
    assert other.stale_own("replica-2") == []
    # The old holder finds out at its next renewal, and can change nothing any more.
    assert not holder.renew("job", "replica-1", lease)
    assert not holder.complete_if_finished("job", "replica-1")
    holder.fail("job", "replica-1", "too late")
    row = other.get("job")
    assert row is not None and row["status"] == "running"
    assert other.holders("job") == {"replica-2": 1}
    assert other.start_run("job", "replica-2")


def test_results_written_by_two_replicas_at_once_are_stored_once(
    two_stores: tuple[JobStore, JobStore],
) -> None:
    first, second = two_stores
    n_items = 120
    first.create(
        job_id="job", owner="a",
        items=[JobItem(i, f"it-{i}", None, request(i), None) for i in range(n_items)]
        + [JobItem(n_items, "bad", 1, None, None)],  # an invalid item: entry 1 at once
        overrides=None, config=None, lease_owner=None, lease_seconds=30.0,
    )

    def payload(index: int) -> tuple[int, str, str, bool]:
        scored = index % 3 != 0
        status = "scored" if scored else "unscored"
        return index, json.dumps({"id": f"it-{index}", "status": status}), status, scored

    def writer(store: JobStore, seed: int) -> int:
        # Both replicas finish every item (a lease takeover while the old holder still
        # writes), in different orders, one result or a page at a time.
        order = list(range(n_items))
        random.Random(seed).shuffle(order)
        saved = 0
        while order:
            page, order = order[: 1 + len(order) % 4], order[1 + len(order) % 4:]
            saved += store.save_results("job", [payload(i) for i in page])
        return saved

    new = together(lambda: writer(first, 1), lambda: writer(second, 2))
    assert sum(new) == n_items  # each result counted by exactly one writer
    row = first.get("job")
    assert row is not None
    expected_scored = sum(1 for i in range(n_items) if i % 3 != 0)
    assert (row["done"], row["scored"], row["unscored"]) == (
        n_items, expected_scored, n_items - expected_scored)
    # On Postgres a number can be lost to a race (the second writer of an item inserts nothing),
    # never given twice: the stream's offsets count lines, not numbers.
    assert row["next_seq"] >= n_items + 1
    with first.db.read() as conn:
        rows = conn.execute(
            select(results.c.idx, results.c.seq, results.c.status, results.c.size)
            .where(results.c.job_id == "job")
        ).all()
        stored = conn.execute(
            select(func.count()).select_from(results).where(results.c.job_id == "job")
        ).scalar()
    assert stored == n_items + 1 == len({r.idx for r in rows})  # one row per entry
    seqs = sorted(r.seq for r in rows)
    assert len(set(seqs)) == len(seqs) and seqs[-1] == row["next_seq"]  # numbered once each
    assert Counter(r.status for r in rows) == Counter(
        {"scored": expected_scored, "unscored": n_items - expected_scored, "invalid": 1}
    )
    lines = [json.loads(line) for _, line in first.entries("job", 0, row["next_seq"], 1000)]
    assert sorted(e["index"] for e in lines) == list(range(n_items + 1))
    # An offset skips that many lines, whatever numbers are missing.
    assert [line for _, line in first.entries("job", 0, row["next_seq"], 1000, 50)] == [
        line for _, line in first.entries("job", 0, row["next_seq"], 1000)][50:]
    assert first.pending("job", -1, 10) == []


def test_a_key_s_quota_holds_across_replicas(two_stores: tuple[JobStore, JobStore]) -> None:
    first, second = two_stores
    quota = Quota(max_jobs=5, max_queued_items=1_000, max_stored_bytes=10**9)

    def submit(store: JobStore, job_id: str) -> bool:
        try:
            add_job(store, job_id, "busy-key", quota=quota)
        except QuotaExceeded:
            return False
        return True

    stored = together(*(
        (lambda s=store, j=f"job-{n}": submit(s, j))
        for n, store in enumerate([first, second] * 8)
    ))
    assert sum(stored) == 5
    assert first.status_counts() == {"queued": 5}
