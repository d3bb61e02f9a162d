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
import secrets
import signal
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil
import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import make_url, select
from sqlalchemy.exc import DBAPIError, OperationalError

from api.jobs import JobItem, JobStore, open_store
from api.jobs.database import is_transient
from api.jobs.postgres import RoundTripWatchdog
from api.jobs.schema import jobs
from api.settings import ServiceSettings
from core.processes import free_port
from standins.openai_server import OpenAIStandIn
from tests.helpers.engine import numbered_request as request
from tests.helpers.postgres_server import LocalPostgres
from tests.helpers.processes import ServiceProcess

ITEM = {"question": "How does Levin feel?", "reference": "He feels humiliated.",
        "bonus_points": ["Levin feels humiliated"], "response": "Levin is humiliated."}

FREEZE_S = 25.0
"""How long the frozen replica stays stopped (the healthy one finishes the job meanwhile)."""

HEALTHZ_EVERY_S = 0.2


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


# -- Postgres: the timeouts every connection starts with ------------------------------------------


class _Connection:
    """What the watchdog sees of a psycopg connection: its socket's descriptor."""

    def __init__(self, sock: socket.socket) -> None:
        self.pgconn = SimpleNamespace(socket=sock.fileno())


def test_the_watchdog_cuts_a_connection_whose_server_keeps_silent() -> None:
    watchdog = RoundTripWatchdog(0.3)
    silent, server = socket.socketpair()
    answered, other = socket.socketpair()
    try:
        waiting, done = _Connection(silent), _Connection(answered)
        watchdog.arm(waiting)
        watchdog.arm(done)
        watchdog.disarm(done)  # its answer came: back in the pool
        silent.settimeout(5)
        started = time.monotonic()
        assert silent.recv(1) == b""  # what a blocked driver reads once the socket is cut
        assert 0.25 < time.monotonic() - started < 2
        assert watchdog.was_cut(waiting) and not watchdog.was_cut(done)
        answered.settimeout(0.5)
        with pytest.raises(TimeoutError):
            answered.recv(1)  # left alone
        assert watchdog.cuts == 1
    finally:
        watchdog.close()
        for sock in (silent, server, answered, other):
            sock.close()



def test_every_postgres_connection_has_the_settings_timeouts(postgres_database: str) -> None:
    settings = ServiceSettings(jobs_url=postgres_database, jobs_lock_timeout_seconds=1.5,
                        jobs_statement_timeout_seconds=7, jobs_idle_in_transaction_seconds=9)
    store = open_store(settings)
    try:
        names = ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")
        for block in (store.db.read, store.db.tx, store.db.autocommit):
            with block() as conn:
                shown = [conn.exec_driver_sql(f"SHOW {name}").scalar() for name in names]
            assert shown == ["1500ms", "7s", "9s"], block.__name__
    finally:
        store.close()


def test_a_transaction_a_stopped_replica_left_open_holds_others_up_for_its_timeouts_only(
    postgres_database: str,
) -> None:
    """What the frozen replica's open transaction did to the others, bounded: a statement waits
    for its lock ``lock_timeout`` at most (and is retried), and the server ends the stopped
    replica's session after ``idle_in_transaction_session_timeout``, its locks with it."""
    settings = ServiceSettings(jobs_url=postgres_database, jobs_lock_timeout_seconds=1,
                        jobs_idle_in_transaction_seconds=3)
    stopped, healthy = open_store(settings), open_store(settings)
    cut: list[BaseException] = []
    holding = threading.Event()

    def stopped_replica() -> None:
        try:
            with stopped.db.tx() as conn:
                conn.execute(select(jobs.c.id).where(jobs.c.id == "job").with_for_update())
                holding.set()
                time.sleep(6)  # a pause: nothing reaches the server
                conn.execute(select(jobs.c.id))
        except DBAPIError as exc:  # the server ended the session: InternalError 25P03
            cut.append(exc)

    try:
        healthy.create(
            job_id="job", owner="a",
            items=[JobItem(i, f"it-{i}", None, request(i), None) for i in range(2)],
            overrides=None, config=None, lease_owner=None, lease_seconds=30.0,
        )
        thread = threading.Thread(target=stopped_replica)
        thread.start()
        assert holding.wait(10)
        started = time.monotonic()
        with pytest.raises(OperationalError, match="lock timeout"):
            healthy.save_results("job", [(0, '{"id": "it-0"}', "scored", True)])
        assert time.monotonic() - started < 2.5  # its lock timeout (1 s), not the pause
        row = healthy.get("job")  # reads never wait for row locks
        assert row is not None and row["done"] == 0
        while True:
            try:
                saved = healthy.save_results("job", [(0, '{"id": "it-0"}', "scored", True)])
                break
            except OperationalError:
                assert time.monotonic() - started < 5.5, "the stopped session was never ended"
                time.sleep(0.2)
        assert saved == 1
        assert time.monotonic() - started < 5.5  # 3 s of idleness, not the whole 6 s pause
        thread.join(15)
        assert cut, "the stopped replica's transaction should have been ended by the server"
        assert is_transient(cut[0])  # so a replica whose transaction was cut tries again
        row = healthy.get("job")
        assert row is not None and row["done"] == 1
    finally:
        stopped.close()
        healthy.close()


# -- two replicas, one frozen ------------------------------------------------------------------


def stop_at_the_worst_moment(pid: int, jobs_url: str, within: float = 3.0) -> str | None:
    """SIGSTOP ``pid`` while one of its job store connections holds row locks, if it comes.

    Stops the process again and again for a moment, each time looking for one of its backends
    (found by its TCP ports) inside a transaction that wrote or locked rows, and keeps it
    stopped when there is one: a pause at the worst moment. After ``within`` seconds without
    one, it stays stopped wherever it is. Returns what the backend was doing, or None.
    """
    port = make_url(jobs_url).port
    process = psutil.Process(pid)
    deadline = time.monotonic() + within
    with psycopg.connect(jobs_url, autocommit=True) as watch:
        while True:
            os.kill(pid, signal.SIGSTOP)
            ports = [c.laddr.port for c in process.net_connections(kind="tcp")
                     if c.raddr and c.raddr.port == port]
            holding = watch.execute(
                "SELECT state || ': ' || left(query, 80) FROM pg_stat_activity"
                " WHERE client_port = ANY(%s) AND backend_xid IS NOT NULL", (ports,)
            ).fetchone()
            if holding is not None:
                return str(holding[0])
            if time.monotonic() > deadline:
                return None
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.005 + 0.03 * secrets.randbelow(100) / 100)


@pytest.mark.process
def test_a_frozen_replica_holds_up_neither_the_other_nor_the_job(
    postgres_database: str, replica: Callable[..., ServiceProcess]
) -> None:
    n = 240  # 30 chunks of 8
    items = [
        {"id": f"r{i}", "question": f"Question {i}?", "reference": f"Reference {i}.",
         "bonus_points": [f"point {i}"], "response": f"unique response number {i}"}
        for i in range(n)
    ]
    with OpenAIStandIn(latency=1.0, record_requests=0) as judge:
        frozen = replica("a", postgres_database, judge.base_url)
        healthy = replica("b", postgres_database, judge.base_url)
        try:
            frozen.start()
            healthy.start()
            assert frozen.proc is not None
            with httpx.Client(base_url=frozen.url, timeout=30) as a:
                job = a.post("/v1/jobs", json={"items": items}).json()["id"]
                deadline = time.monotonic() + 60
                while a.get(f"/v1/jobs/{job}").json()["done"] < 40:
                    assert time.monotonic() < deadline, "the job never got going"
                    time.sleep(0.05)
            holding = stop_at_the_worst_moment(frozen.proc.pid, postgres_database)
            stopped = time.monotonic()
            samples: list[float] = []
            progress: list[dict[str, Any]] = []
            try:
                with httpx.Client(base_url=healthy.url, timeout=5) as b:
                    while time.monotonic() - stopped < FREEZE_S:
                        asked = time.monotonic()
                        assert b.get("/healthz").status_code == 200
                        samples.append(time.monotonic() - asked)
                        if len(samples) % 5 == 0:
                            progress.append(b.get(f"/v1/jobs/{job}").json())
                        time.sleep(max(0.0, HEALTHZ_EVERY_S - (time.monotonic() - asked)))
                    during = b.get(f"/v1/jobs/{job}").json()
            finally:
                os.kill(frozen.proc.pid, signal.SIGCONT)
            figures = (f"frozen holding {holding!r}; /healthz p50 "
                       f"{statistics.median(samples) * 1000:.1f} ms, max "
                       f"{max(samples) * 1000:.1f} ms over {len(samples)}; done "
                       f"{[p['done'] for p in progress]}")
            print(figures)  # shown with -s: the figures of the report
            assert len(samples) >= FREEZE_S / HEALTHZ_EVERY_S * 0.6, figures
            assert max(samples) < 0.5, figures  # today: the job stalled, and at times the loop
            # The healthy replica finished the job alone, the frozen one's chunks taken over.
            assert (during["status"], during["done"]) == ("done", n), (during, figures)
            # The frozen one goes on where it stopped: it answers, and stores nothing twice.
            with httpx.Client(base_url=frozen.url, timeout=30) as a:
                assert a.get("/healthz").status_code == 200
                time.sleep(3)  # its late writes land (and are refused) now
                after = a.get(f"/v1/jobs/{job}").json()
                lines = a.get(f"/v1/jobs/{job}/results").text.splitlines()
        finally:
            if frozen.proc is not None and frozen.proc.poll() is None:
                os.kill(frozen.proc.pid, signal.SIGCONT)  # never left stopped
            frozen.stop()
            healthy.stop()
    assert (after["status"], after["done"], after["scored"]) == ("done", n, n), after
    assert len(lines) == n
    with psycopg.connect(postgres_database) as conn:
        per_item = conn.execute(
            "SELECT count(*), count(DISTINCT idx), count(DISTINCT seq) FROM results"
        ).fetchone()
    assert per_item == (n, n, n)  # every item exactly once


# -- Postgres frozen -----------------------------------------------------------------------------


STATEMENT_S = 3
"""The replica's ``jobs_statement_timeout_seconds`` while its database is frozen."""


@pytest.mark.process
def test_a_frozen_postgres_costs_callers_a_503_in_time_and_then_nothing(
    replica: Callable[..., ServiceProcess],
) -> None:
    with tempfile.TemporaryDirectory(prefix="bonusjudge-pg-") as scratch:
        os.chmod(scratch, 0o711)  # the unprivileged server account (under root) reaches its data
        server = LocalPostgres(Path(scratch) / "data", port=free_port(),
                               password=secrets.token_hex(8))
        with server, OpenAIStandIn(latency=1.0, record_requests=0) as judge:
            service = replica("a", server.url, judge.base_url,
                              env={"BONUSJUDGE_JOBS_STATEMENT_TIMEOUT_SECONDS": str(STATEMENT_S)})
            with service, httpx.Client(base_url=service.url, timeout=60) as client:
                frozen_and_thawed(server, service, client)


def frozen_and_thawed(server: LocalPostgres, service: ServiceProcess,
                      client: httpx.Client) -> None:
    """Freeze ``server`` under ``service`` for 15 s, asking ``client``'s service meanwhile."""
    job = client.post("/v1/jobs", json={"items": [ITEM] * 40}).json()["id"]
    healthz: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        with httpx.Client(base_url=service.url, timeout=5) as own:
            while not stop.is_set():
                asked = time.monotonic()
                own.get("/healthz").raise_for_status()
                healthz.append(time.monotonic() - asked)
                stop.wait(HEALTHZ_EVERY_S)

    sampler = threading.Thread(target=sample)
    answers: list[tuple[str, int, str, float]] = []
    server.pause()
    frozen = time.monotonic()
    sampler.start()
    try:
        while time.monotonic() - frozen < 15:
            for name, ask in (
                ("status", lambda: client.get(f"/v1/jobs/{job}")),
                ("submit", lambda: client.post("/v1/jobs", json={"items": [ITEM]})),
                ("readyz", lambda: client.get("/readyz")),
            ):
                asked = time.monotonic()
                answer = ask()
                took = time.monotonic() - asked
                if time.monotonic() - frozen < 15:  # asked and answered while frozen
                    kind = answer.json().get("error", {}).get("type", "") if (
                        name != "readyz") else answer.json()["checks"]["store"]["detail"]
                    answers.append((name, answer.status_code, kind, took))
    finally:
        server.resume()
        stop.set()
        sampler.join(10)
    print(f"/healthz p50 {statistics.median(healthz) * 1000:.1f} ms, max "
          f"{max(healthz) * 1000:.1f} ms over {len(healthz)}; answers while frozen: "
          f"{[(name, code, round(took, 2)) for name, code, _, took in answers]}")
    assert {(name, code) for name, code, _, _ in answers} >= {
        ("status", 503), ("submit", 503), ("readyz", 503)}, answers
    for name, code, kind, took in answers:
        if name == "readyz":
            assert code == 503 and kind.startswith("store_unavailable") and took < 3.5, answers
        else:
            # The connection is cut once the server has not answered for the statement
            # timeout and 2 s; a new one gives up after the statement timeout.
            assert (code, kind) == (503, "store_unavailable") and took < STATEMENT_S + 4.5, (
                answers)
    assert len(healthz) > 30 and max(healthz) < 0.5, healthz
    # Thawed: everything answers again, and the job under way goes on to its end.
    deadline = time.monotonic() + 30
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "never ready again"
        time.sleep(0.5)
    assert client.post("/v1/jobs", json={"items": [ITEM]}).status_code == 202
    while (status := client.get(f"/v1/jobs/{job}").json())["status"] != "done":
        assert time.monotonic() < deadline + 30, status
        time.sleep(0.5)
    assert (status["done"], status["scored"]) == (40, 40), status
