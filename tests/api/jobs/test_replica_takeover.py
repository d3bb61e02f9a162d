"""Two `bonusjudge serve` replicas on one Postgres (`--jobs-url`), started as users start them:
the replica running a job is killed (SIGKILL) mid-job, and the other finishes it once the lease
lapses, every item with exactly one result, items finished before the kill never graded again."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest

from bonusjudge_client import JudgeClient
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

LEASE_SECONDS = 3  # conftest.py's: the replicas' job lease


def test_a_killed_replica_s_job_is_finished_by_another(
    postgres_database: str, replica: Callable[..., ServiceProcess]
) -> None:
    n = 24
    items = [
        {"id": f"r{i}", "question": f"Question {i}?", "reference": f"Reference {i}.",
         "bonus_points": [f"point {i}"], "response": f"unique response number {i}"}
        for i in range(n)
    ]
    with OpenAIStandIn(latency=0.3, record_requests=5000) as judge:
        first = replica("a", postgres_database, judge.base_url).start()
        second = replica("b", postgres_database, judge.base_url).start()
        try:
            with JudgeClient(first.url) as client:
                job = client.submit_job(items)  # replica a has room: it runs the job
                deadline = time.monotonic() + 120
                while client.job(job.id).done < 4:
                    assert time.monotonic() < deadline, "replica a never got going"
                    time.sleep(0.1)
                finished_before = {e.id for e in client.results(job.id) if e.result is not None}
            assert first.proc is not None
            first.proc.send_signal(signal.SIGKILL)  # no shutdown: its lease just stops renewing
            first.proc.wait(10)
            killed = time.monotonic()
            with JudgeClient(second.url) as client:
                while (status := client.job(job.id)).done == len(finished_before):
                    assert time.monotonic() - killed < 60, status
                    time.sleep(0.1)
                resumed_after = time.monotonic() - killed
                status = client.wait(job.id, timeout=180)
                entries = list(client.results(job.id))
        finally:
            first.stop()
            second.stop()
        bodies = judge.requests
    assert status.status == "done" and status.done == n and status.scored == n, status
    counts = Counter(e.id for e in entries)
    assert sorted(counts) == sorted(i["id"] for i in items) and set(counts.values()) == {1}
    # Replica b took the job up soon after a's lease lapsed (it claims every second).
    assert resumed_after < LEASE_SECONDS + 15, resumed_after
    sent: Counter[str] = Counter()
    for body in bodies:
        text = json.dumps(body["messages"], ensure_ascii=False)
        for i in range(n):
            if f"unique response number {i}\\n" in text:
                sent[f"r{i}"] += 1
    for item_id in finished_before:
        assert sent[item_id] == 2, item_id  # coverage + defects, never again after the kill
    assert 4 <= len(finished_before) < n
