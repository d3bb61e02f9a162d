"""A replica or a database that stops without a word holds nobody up for long (issue 41 part 1).

A process can stop between two round trips with its connections open: a long GC or VM pause, a
CPU-throttled container, a network partition that sends no reset. Two replicas on one Postgres
with a job under way, one frozen (SIGSTOP) mid-job: the other stalled on the row lock the frozen
one's open transaction held (its result writes waited, and so did its whole event loop, which
released a chunk's lease synchronously), for as long as the freeze lasted. Here the frozen
replica is stopped at the worst moment we can find (one of its connections holding row locks
in a transaction), and the other must keep answering and finish the job; the database frozen
itself must cost callers a 503 within the configured timeout, not a hang.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.jobs import JobStore

ITEM = {"question": "How does Levin feel?", "reference": "He feels humiliated.",
        "bonus_points": ["Levin feels humiliated"], "response": "Levin is humiliated."}


# -- the release of a chunk's lease ---------------------------------------------------------------


def test_a_chunk_s_lease_is_released_off_the_event_loop(
    make_app: Callable[..., FastAPI], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release that waits on the database (a row lock a stopped replica holds) waits in a
    thread: every other request of the process goes on meanwhile."""
    released = threading.Event()
    real = JobStore.release

    def waiting(self: JobStore, job_id: str, token: str, lo: int | None = None) -> None:
        time.sleep(2.0)
        real(self, job_id, token, lo)
        released.set()

    monkeypatch.setattr(JobStore, "release", waiting)
    slowest = 0.0
    with TestClient(make_app(warm_up=False)) as client:
        assert client.post("/v1/jobs", json={"items": [ITEM]}).status_code == 202
        deadline = time.monotonic() + 10
        while not released.is_set():
            assert time.monotonic() < deadline, "the chunk's lease was never released"
            asked = time.monotonic()
            assert client.get("/healthz").status_code == 200
            slowest = max(slowest, time.monotonic() - asked)
            time.sleep(0.05)
    assert slowest < 0.5, slowest  # the old code: ~2 s, the release's whole wait
