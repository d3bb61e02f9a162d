"""One job on every replica: a grading job's items are leased in chunks (issue 33).

Store level (both engines, several stores on one database as replicas are): claims take chunks
fairly across keys, a dead holder's chunks and only those are taken over, a chunk is done only
when its items all have results, and a job's run (its rate) is one over every replica. Service
level (two in-process services on one real Postgres): both grade one job, every item once, and
a DELETE through one stops the job on both.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.jobs import Chunk, JobItem, JobStore
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider
from judge.verdicts import DefectJudgement
from tests.helpers.engine import levin_item, plain_answer
from tests.helpers.engine import numbered_request as request

NUMBER = re.compile(r"answer-(\d+)\b")


def add_job(store: JobStore, job_id: str, owner: str, n_items: int) -> None:
    store.create(
        job_id=job_id, owner=owner,
        items=[JobItem(i, f"it-{i}", None, request(i), None) for i in range(n_items)],
        overrides=None, config=None, lease_owner=None, lease_seconds=30.0,
    )
    time.sleep(0.002)  # distinct creation times: "oldest job first" is an order


def test_claims_share_chunks_fairly_across_keys(open_store: Callable[..., JobStore]) -> None:
    first, second = open_store(chunk_items=4), open_store(chunk_items=4)
    add_job(first, "big", "a", 40)  # 10 chunks, submitted first
    add_job(first, "small", "b", 12)  # 3 chunks
    # The key holding fewer chunks comes first; among equals, the older job.
    assert first.claim("replica-1", 30.0, 4) == [
        Chunk("big", 0, 4), Chunk("small", 0, 4), Chunk("big", 4, 8), Chunk("small", 4, 8)]
    # Another replica sees the same counts (a: 2, b: 2).
    assert second.claim("replica-2", 30.0, 3) == [
        Chunk("big", 8, 12), Chunk("small", 8, 12), Chunk("big", 12, 16)]
    assert second.held_by_owner() == {"a": 4, "b": 3}
    assert first.waiting_owners(["grade"]) == {"a"}
    assert first.holders("big") == {"replica-1": 2, "replica-2": 2}


def test_a_dead_replica_s_chunks_and_only_those_are_taken_over(
    open_store: Callable[..., JobStore],
) -> None:
    dead, alive = open_store(chunk_items=4), open_store(chunk_items=4)
    add_job(dead, "job", "a", 16)
    lease = 0.5  # "alive" renews every 50 ms: ten renewals a lease
    mine = dead.claim("dead", lease, 2)
    theirs = alive.claim("alive", lease, 2)
    assert sorted(mine + theirs) == [Chunk("job", lo, lo + 4) for lo in (0, 4, 8, 12)]
    for token, store in (("dead", dead), ("alive", alive)):
        assert store.start_run("job", token)
    # "dead" stops renewing; "alive" keeps its heartbeat. Once the dead leases lapse, another
    # replica takes exactly those chunks, never a live one.
    stopped = time.monotonic()
    taken: list[Chunk] = []
    while len(taken) < 2:
        assert alive.renew("job", "alive", lease)
        taken += alive.claim("taker", 30.0, 4)
        assert time.monotonic() - stopped < 10 * lease, "the lapsed leases were never taken"
        time.sleep(0.05)
    assert time.monotonic() - stopped >= 0.5 * lease
    assert sorted(taken) == sorted(mine)
    assert alive.holders("job") == {"alive": 2, "taker": 2}
    # The dead holder finds out at its next renewal, and can change nothing any more.
    assert not dead.renew("job", "dead", lease)
    assert not dead.finish_chunk("job", mine[0].lo, "dead")
    assert not dead.start_run("job", "dead")
    assert not dead.complete_if_finished("job", "dead")


def test_renewing_one_chunk_leaves_the_holders_other_leases_as_they_were(
    open_store: Callable[..., JobStore],
) -> None:
    holder, other = open_store(chunk_items=4), open_store(chunk_items=4)
    add_job(holder, "job", "a", 8)
    assert holder.claim("holder", 30.0, 2) == [Chunk("job", 0, 4), Chunk("job", 4, 8)]
    # A lease renewed to a negative length has lapsed already: only chunk 4's, since a chunk
    # runner renews its own chunk (lo), not every lease its process holds on the job.
    assert holder.renew("job", "holder", -1.0, lo=4)
    assert other.claim("taker", 30.0, 4) == [Chunk("job", 4, 8)]
    assert other.holders("job") == {"holder": 1, "taker": 1}
    # A chunk it no longer holds is not renewed; the one it holds still is.
    assert not holder.renew("job", "holder", 30.0, lo=4)
    assert holder.renew("job", "holder", 30.0, lo=0)


def test_a_chunk_is_done_only_when_each_of_its_items_has_a_result(
    open_store: Callable[..., JobStore],
) -> None:
    store = open_store(chunk_items=4)
    add_job(store, "job", "a", 6)  # chunks 0-3 and 4-5
    first, second = store.claim("r1", 30.0, 1) + store.claim("r2", 30.0, 1)
    assert (first, second) == (Chunk("job", 0, 4), Chunk("job", 4, 6))
    # A chunk's runner reads only its own items.
    assert store.pending("job", first.lo - 1, 10, first.hi) == [
        (i, f"it-{i}", request(i).model_dump_json()) for i in range(4)]
    stored = [(i, json.dumps({"id": f"it-{i}", "status": "scored"}), "scored", True)
              for i in range(3)]
    assert store.save_results("job", stored) == 3
    assert not store.finish_chunk("job", first.lo, "r1")  # item 3 has no result yet
    assert store.save_results("job", [(3, '{"id": "it-3"}', "scored", True)]) == 1
    assert not store.finish_chunk("job", first.lo, "r2")  # not r2's chunk
    assert store.finish_chunk("job", first.lo, "r1")
    assert store.holders("job") == {"r2": 1}
    assert store.claim("r3", 30.0, 4) == []  # a done chunk is never claimed again
    assert not store.complete_if_finished("job", "r2")  # items 4 and 5 are left
    store.save_results("job", [(i, f'{{"id": "it-{i}"}}', "scored", True) for i in (4, 5)])
    # The holder storing the last result finishes the job: every chunk is done with it.
    assert store.complete_if_finished("job", "r2")
    row = store.get("job")
    assert row is not None and (row["status"], row["done"]) == ("done", 6)
    assert store.holders("job") == {} and store.claim("r3", 30.0, 4) == []


def test_a_job_s_run_is_one_over_every_replica(open_store: Callable[..., JobStore]) -> None:
    store = open_store(chunk_items=4)
    add_job(store, "job", "a", 8)
    (one,), (two,) = store.claim("r1", 30.0, 1), store.claim("r2", 30.0, 1)
    assert store.start_run("job", "r1")
    started = store.get("job")
    assert started is not None and started["status"] == "running"
    store.save_results("job", [(0, '{"id": "it-0"}', "scored", True)])
    time.sleep(0.01)
    # A second replica joining keeps the run's start: the rate counts both replicas' results.
    assert store.start_run("job", "r2")
    joined = store.get("job")
    assert joined is not None
    assert (joined["run_started_at"], joined["run_start_done"]) == (
        started["run_started_at"], 0)
    # One replica leaving leaves the job running; the last one leaving queues it.
    store.release("job", "r1", one.lo)
    left = store.get("job")
    assert left is not None and left["status"] == "running"
    store.release("job", "r2", two.lo)
    queued = store.get("job")
    assert queued is not None and queued["status"] == "queued"
    assert store.holders("job") == {}


# -- two services on one Postgres -------------------------------------------------------------


def item(n: int) -> dict[str, Any]:
    return levin_item(n, tom_dimension="emotion")


class Recorder:
    """A judge handler counting calls per (item number, task) as they are answered."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()

    def __call__(self, call: FakeCall) -> FakeOutput:
        match = NUMBER.search(call.user)
        assert match is not None
        task = "defects" if call.response_model is DefectJudgement else "coverage"
        with self.lock:
            self.calls[(match.group(1), task)] += 1
        return plain_answer(call)

    def items(self) -> set[str]:
        with self.lock:
            return {number for number, _ in self.calls}


def replica(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader], url: str,
    recorder: Recorder,
) -> FastAPI:
    grader = make_grader(FakeProvider(handler=recorder, latency=0.01), cache=False,
                         metrics=("coverage", "defects"), concurrency=8)
    return make_app(grader, jobs_url=url, poll_seconds=0.05, lease_seconds=3.0)


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.process
def test_two_replicas_grade_one_job_each_item_once(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader], postgres_database: str,
) -> None:
    n = 400  # 31 chunks of 13 (the last of 10)
    judge_a, judge_b = Recorder(), Recorder()
    with TestClient(replica(make_app, make_grader, postgres_database, judge_a)) as a, \
            TestClient(replica(make_app, make_grader, postgres_database, judge_b)) as b:
        job = a.post("/v1/jobs", json={"items": [item(i) for i in range(n)]}).json()
        wait_until(lambda: b.get(f"/v1/jobs/{job['id']}").json()["status"] == "done", 120,
                   "the job never finished")
        status = b.get(f"/v1/jobs/{job['id']}").json()
        entries = [json.loads(line) for line in a.get(f"/v1/jobs/{job['id']}/results").text
                   .splitlines()]
    assert (status["done"], status["scored"]) == (n, n)
    assert sorted(e["index"] for e in entries) == list(range(n))  # each result once
    # Both replicas graded the job; no item was graded twice (each task asked once, overall).
    assert judge_a.items() and judge_b.items(), (len(judge_a.items()), len(judge_b.items()))
    calls = judge_a.calls + judge_b.calls
    assert calls == Counter({(str(i), t): 1 for i in range(n) for t in ("coverage", "defects")})


@pytest.mark.process
def test_cancel_through_one_replica_stops_the_job_on_every_replica(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader], postgres_database: str,
) -> None:
    judge_a, judge_b = Recorder(), Recorder()
    with TestClient(replica(make_app, make_grader, postgres_database, judge_a)) as a, \
            TestClient(replica(make_app, make_grader, postgres_database, judge_b)) as b:
        job = a.post("/v1/jobs", json={"items": [item(i) for i in range(2000)]}).json()
        wait_until(lambda: len(judge_a.items()) > 20 and len(judge_b.items()) > 20, 60,
                   "both replicas never graded the job")
        assert b.delete(f"/v1/jobs/{job['id']}").json()["status"] == "cancelled"
        time.sleep(0.5)  # a renewal on each (every 0.05 s) and the items in flight
        stopped = sum(judge_a.calls.values()) + sum(judge_b.calls.values())
        time.sleep(1.0)
        status = a.get(f"/v1/jobs/{job['id']}").json()
        after = sum(judge_a.calls.values()) + sum(judge_b.calls.values())
        store = a.app.state.jobs.store  # type: ignore[attr-defined]
        holders = store.holders(job["id"])
    assert after == stopped, "a replica went on grading the cancelled job"
    assert status["status"] == "cancelled" and status["done"] < 2000
    assert holders == {}
