"""Stopping `bonusjudge serve` (issue 20): a bounded drain, leases handed back, nothing left over.

Every test starts the service as users do (``python -m cli serve``, a fresh interpreter) against
a slow stand-in judge, so that a job is mid-run when the signal arrives, and then reads what
matters: the exit status, the process tree the service had started (nothing of it may outlive
it), the job's row in the jobs database (lease handed back, job queued), and, after a restart on
the same data folder, the job finished with every item graded exactly once (one result per item
id, and the judge asked about each item once: nothing finished before the stop is graded again).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from api.jobs import JOBS_DB, JobStore
from bonusjudge_client import JudgeClient
from core.processes import free_port
from judge.providers.local_llm import COMMAND_ENV
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import cli_env

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

GRACE = 15.0
"""The ``--grace`` of these services: longer than any stand-in latency used here."""


def items(count: int, tag: str) -> list[dict[str, Any]]:
    """Grading items whose responses can be found again in the judge's requests."""
    return [
        {"id": f"{tag}{i}", "question": f"Question {i}?", "reference": f"Reference {i}.",
         "bonus_points": [f"point {i}"], "response": f"unique response number <{tag}{i}>"}
        for i in range(count)
    ]


class Service:
    """``bonusjudge serve`` in a subprocess on a free port, with its data under ``folder``."""

    def __init__(
        self, folder: Path, judge: Sequence[str], *extra: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [
            sys.executable, "-m", "cli", "serve", "--port", str(self.port), *judge,
            "--metrics", "coverage,defects", "--cache-dir", str(folder / "cache"),
            "--grace", str(GRACE), *extra,
        ]
        self.env = cli_env({"BONUSJUDGE_DATA_DIR": str(folder / "data"), **(env or {})})
        self.log_path = folder / f"serve-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"serve exited: {self.log()[-3000:]}"
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"serve was not ready in time: {self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def descendants(self) -> list[psutil.Process]:
        """Every process the service started (and they started), now."""
        return psutil.Process(self.pid).children(recursive=True)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def services() -> Iterator[list[Service]]:
    """Services a test started; whatever is still running at its end is killed."""
    started: list[Service] = []
    yield started
    for service in started:
        leftovers = []
        if service.proc is not None and service.proc.poll() is None:
            leftovers = service.descendants()
        service.kill()
        for process in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def alive(processes: Sequence[psutil.Process]) -> list[psutil.Process]:
    """The processes of ``processes`` still running (zombies do not count: they are dead)."""
    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
        except psutil.NoSuchProcess:
            pass
    return left


def wait_gone(processes: Sequence[psutil.Process], timeout: float = 10.0) -> list[psutil.Process]:
    """Wait until none of ``processes`` runs; those still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(processes)


def job_row(folder: Path, job_id: str) -> dict[str, Any]:
    """The job's row, read from the jobs database itself, with ``holders``: who holds a lease on
    its chunks."""
    store = JobStore(folder / "data" / JOBS_DB)
    try:
        row = store.get(job_id)
        assert row is not None, job_id
        return {**row, "holders": store.holders(job_id)}
    finally:
        store.close()


def submit(service: Service, batch: list[dict[str, Any]], *, started: int) -> str:
    """Submit a job and wait until ``started`` of its items are done (the job is mid-run)."""
    with JudgeClient(service.url) as client:
        job = client.submit_job(batch)
        deadline = time.monotonic() + 120
        while client.job(job.id).done < started:
            assert time.monotonic() < deadline, service.log()[-3000:]
            time.sleep(0.05)
    return job.id


def judge_calls_per_item(judge: OpenAIStandIn, batch: list[dict[str, Any]]) -> Counter[str]:
    """How many chat requests the judge received about each item."""
    calls: Counter[str] = Counter()
    for body in judge.requests:
        text = json.dumps(body.get("messages"), ensure_ascii=False)
        for item in batch:
            if item["response"] in text:
                calls[item["id"]] += 1
    return calls


def finish_after_restart(
    services: list[Service], folder: Path, judge: Sequence[str], job_id: str,
    batch: list[dict[str, Any]], *extra: str, env: dict[str, str] | None = None,
) -> None:
    """Restart on the same data folder; the job ends with one scored result per item."""
    again = Service(folder, judge, *extra, env=env)
    services.append(again)
    again.start()
    with JudgeClient(again.url) as client:
        status = client.wait(job_id, timeout=180)
        entries = list(client.results(job_id))
    assert status.status == "done" and status.done == len(batch), status
    counts = Counter(entry.id for entry in entries)
    assert counts == Counter(item["id"] for item in batch)  # each item once, none missing
    assert all(entry.result is not None and entry.result.status == "scored" for entry in entries)
    again.signal(signal.SIGTERM)
    assert again.wait(GRACE + 10) == 0, again.log()[-3000:]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_drains_releases_the_lease_and_a_restart_finishes_the_job(
    tmp_path: Path, services: list[Service], sig: int
) -> None:
    batch = items(24, "d")
    with OpenAIStandIn(latency=0.5, record_requests=5000) as judge:
        options = ["--model", "openai/standin", "--api-base", judge.base_url]
        service = Service(tmp_path, options, "--concurrency", "4")
        services.append(service)
        service.start()
        job_id = submit(service, batch, started=3)
        tree = [psutil.Process(service.pid), *service.descendants()]
        stopped = time.monotonic()
        service.signal(sig)
        status = service.wait(GRACE + 10)
        took = time.monotonic() - stopped
        assert status == 0, service.log()[-3000:]
        assert took < GRACE, f"took {took:.1f} s to stop"  # the drain is bounded by the grace
        assert wait_gone(tree) == []
        row = job_row(tmp_path, job_id)
        # Handed back at once: the next process need not wait for the lease to expire.
        assert row["holders"] == {} and row["status"] == "queued", row
        assert 3 <= row["done"] < len(batch), row
        # The items in flight at the signal were finished and stored, not thrown away: every
        # item the judge was asked about has its result (two calls each: coverage, defects).
        asked = judge_calls_per_item(judge, batch)
        assert len(asked) == row["done"] and set(asked.values()) == {2}, (asked, row)
        assert "stopping" in service.log()
        finish_after_restart(services, tmp_path, options, job_id, batch, "--concurrency", "4")
        asked = judge_calls_per_item(judge, batch)
    assert asked == Counter({item["id"]: 2 for item in batch})  # nothing graded twice


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGINT),
     (signal.SIGTERM, signal.SIGINT)],
    ids=["TERM-TERM", "INT-INT", "TERM-INT"],
)
def test_a_second_signal_exits_at_once_and_still_hands_the_job_back(
    tmp_path: Path, services: list[Service], first: int, second: int
) -> None:
    batch = items(8, "a")
    # Calls of 12 s: the graceful stop would wait for them; the second signal must not.
    with OpenAIStandIn(record_requests=5000) as judge:
        options = ["--model", "openai/standin", "--api-base", judge.base_url]
        service = Service(tmp_path, options, "--concurrency", "4")
        services.append(service)
        service.start()
        judge.latency = 12.0  # once the start-up's preflight call is answered
        job_id = submit(service, batch, started=0)
        deadline = time.monotonic() + 60
        while judge.stats().in_flight == 0:  # the job's first judge calls are under way
            assert time.monotonic() < deadline
            time.sleep(0.05)
        tree = [psutil.Process(service.pid), *service.descendants()]
        service.signal(first)
        time.sleep(0.5)
        assert service.proc is not None and service.proc.poll() is None  # still draining
        stopped = time.monotonic()
        service.signal(second)
        status = service.wait(GRACE)
        took = time.monotonic() - stopped
        assert status == 128 + second, service.log()[-3000:]
        assert took < 6, f"took {took:.1f} s to exit"  # not the drain: the judge takes 12 s
        assert wait_gone(tree) == []
        row = job_row(tmp_path, job_id)
        assert row["holders"] == {} and row["status"] == "queued", row
        assert row["done"] == 0, row
        assert "exiting now" in service.log()
        judge.latency = 0.2
        finish_after_restart(services, tmp_path, options, job_id, batch, "--concurrency", "4")


def stand_in_command(latency: float) -> str:
    """A local LLM server command that starts the stand-in judge instead of llama.cpp."""
    return shlex.join([sys.executable, "-m", "standins.openai_server", "--port", "{port}",
                       "--latency", str(latency)]).replace("'{port}'", "{port}")


@pytest.mark.parametrize("second", [None, signal.SIGTERM], ids=["graceful", "immediate"])
def test_the_local_llm_server_is_stopped_with_the_service(
    tmp_path: Path, services: list[Service], second: int | None
) -> None:
    # The llama.cpp server's place is taken by the stand-in (a child started the same way, by
    # the same code): the [local] extra is not needed to check that the child is stopped.
    env = {COMMAND_ENV: stand_in_command(0.5)}
    batch = items(12, "l")
    service = Service(tmp_path, [], "--local-llm", env=env)
    services.append(service)
    service.start()
    children = service.descendants()
    server = [p for p in children if "standins.openai_server" in " ".join(p.cmdline())]
    assert len(server) == 1, [p.cmdline() for p in children]
    # Its own session: a Ctrl-C at the terminal reaches the service, not the judge it drains on.
    assert os.getsid(server[0].pid) == server[0].pid
    job_id = submit(service, batch, started=1)
    tree = [psutil.Process(service.pid), *children]
    service.signal(signal.SIGTERM)
    if second is not None:
        time.sleep(0.3)
        service.signal(second)
    status = service.wait(GRACE + 10)
    assert status == (0 if second is None else 128 + second), service.log()[-3000:]
    assert wait_gone(tree) == []
    row = job_row(tmp_path, job_id)
    assert row["holders"] == {} and row["status"] in ("queued", "done"), row
    finish_after_restart(services, tmp_path, [], job_id, batch, "--local-llm", env=env)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
def test_the_local_llm_server_dies_with_a_killed_service(
    tmp_path: Path, services: list[Service]
) -> None:
    env = {COMMAND_ENV: stand_in_command(0.0)}
    service = Service(tmp_path, [], "--local-llm", env=env)
    services.append(service)
    service.start()
    children = service.descendants()
    assert children
    service.kill()  # SIGKILL: no handler runs, no atexit; the kernel tells the child
    assert wait_gone(children) == []


def test_the_real_local_llm_extra_is_stopped_too(
    tmp_path: Path, services: list[Service]
) -> None:
    pytest.importorskip("llama_cpp", reason="the [local] extra (llama-cpp-python) is not "
                        "installed; the stand-in child above exercises the same stop")
    service = Service(tmp_path, [], "--local-llm")
    services.append(service)
    service.start()
    children = service.descendants()
    assert any("llama_cpp.server" in " ".join(p.cmdline()) for p in children)
    service.signal(signal.SIGTERM)
    assert service.wait(GRACE + 10) == 0, service.log()[-3000:]
    assert wait_gone(children) == []


@pytest.mark.parametrize("second", [None, signal.SIGINT], ids=["graceful", "immediate"])
def test_workers_get_the_signal_and_none_is_left(
    tmp_path: Path, services: list[Service], second: int | None
) -> None:
    batch = items(24, "w")
    latency = 0.5 if second is None else 12.0
    with OpenAIStandIn(record_requests=5000) as judge:
        options = ["--model", "openai/standin", "--api-base", judge.base_url]
        service = Service(tmp_path, options, "--workers", "2", "--concurrency", "4")
        services.append(service)
        service.start()
        judge.latency = latency  # once the start-up's preflight call is answered
        job_id = submit(service, batch, started=0 if second else 3)
        deadline = time.monotonic() + 60
        while judge.stats().in_flight == 0 and second is not None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        tree = [psutil.Process(service.pid), *service.descendants()]
        workers = [p for p in tree[1:] if "spawn_main" in " ".join(p.cmdline())]
        assert len(workers) == 2, [p.cmdline() for p in tree]
        service.signal(signal.SIGTERM)
        if second is not None:
            time.sleep(0.5)
            service.signal(second)
        status = service.wait(GRACE + 15)
        assert status == (0 if second is None else 128 + second), service.log()[-3000:]
        assert wait_gone(tree) == []
        row = job_row(tmp_path, job_id)
        assert row["holders"] == {} and row["status"] == "queued", row
        if second is None:
            asked = judge_calls_per_item(judge, batch)
            assert len(asked) == row["done"] and set(asked.values()) == {2}, (asked, row)
        judge.latency = 0.2
        finish_after_restart(services, tmp_path, options, job_id, batch, "--workers", "2")
