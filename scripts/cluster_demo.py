"""Two replicas on one shared Redis cache and one Postgres job store, one of them killed mid-job.

Run by ``scripts/cluster-demo.sh`` (``.venv/bin/python scripts/cluster_demo.py``). Everything
listens on loopback ports and lives in a temporary folder; everything is stopped at the end,
whatever happens. The steps:

1. start Redis (``tests.helpers.redis_server``), PostgreSQL (``tests.helpers.postgres_server``)
   and the OpenAI-compatible stand-in judge (``standins.openai_server``, a fixed latency);
2. start two ``bonusjudge serve`` replicas, A and B, both with ``--cache-url`` on the Redis and
   ``--jobs-url`` on the Postgres;
3. submit one job of ``--items`` items through A and wait until part of it is graded: both
   replicas grade it at once, each its own chunks of the job's items (the items graded by each
   are read from its ``/metrics``, the chunks each holds from the store);
4. SIGKILL replica A, with the chunks it holds (no shutdown, no lease handed back);
5. wait for the job through B (B takes A's chunks over once their leases expire);
6. grade the items of A's chunks that A had graded again through B, and count the judge calls
   served from the cache entries A wrote;
7. count from the store: results per item, items without a result.

The last line printed is one JSON object::

    {"replicas": 2, "killed": true, "items": N, "graded_once": N, "lost": 0, "duplicates": 0,
     "cross_replica_cache_hits": K, "replicas_grading_one_job": 2}

``replicas_grading_one_job`` counts the replicas that had graded items of the job before the
kill.

Exit status 0 when ``graded_once == items``, ``lost == duplicates == 0`` and both replicas
graded the job, else 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.processes import free_port, wait_until_answers

if TYPE_CHECKING:
    from api.jobs import JobStore

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def _log(message: str) -> None:
    print(f"[cluster-demo {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Processes:
    """The processes the demo started, each in its own session; ``stop_all`` ends them all."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start ``argv`` as ``name``, its output in ``<work>/<name>.log``."""
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.started[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        log.close()

    def check(self, name: str) -> None:
        """Raise with the log's tail if ``name`` has exited."""
        process = self.started[name]
        if process.poll() is not None:
            tail = (self.work / f"{name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")

    def kill(self, name: str) -> None:
        """SIGKILL ``name`` and everything in its session: no clean shutdown, no lease release."""
        process = self.started[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        """SIGTERM every process still running, then SIGKILL what is left after 15 s."""
        for process in self.started.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.started.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _wait_http(url: str, processes: Processes, name: str, timeout: float = 120.0) -> None:
    process = processes.started[name]
    if not wait_until_answers(url, timeout=timeout, alive=lambda: process.poll() is None):
        processes.check(name)  # raises with the log's tail when it exited
        raise RuntimeError(f"{name} did not answer {url} within {timeout:g} s")


def _wait_port(port: int, processes: Processes, name: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        processes.check(name)
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1.0):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not listen on port {port} within {timeout:g} s")


def _printed_url(processes: Processes, name: str, timeout: float = 120.0) -> str:
    """The URL a server launcher prints as its first line once the server answers."""
    deadline = time.monotonic() + timeout
    log = processes.work / f"{name}.log"
    while time.monotonic() < deadline:
        processes.check(name)
        for line in log.read_text(errors="replace").splitlines():
            if "://" in line and not line.startswith(("postgres_server:", "redis_server:")):
                return line.strip()
        time.sleep(0.2)
    raise RuntimeError(f"{name} printed no URL within {timeout:g} s")


def _items(n: int) -> Iterator[dict[str, Any]]:
    """CharToM-like items with distinct texts (every judge call is a new cache entry)."""
    for i in range(n):
        yield {
            "id": f"demo-{i:04d}",
            "question": f"Why does Levin leave the party early (variant {i})?",
            "reference": "He feels humiliated after Kitty's refusal and wants to return to his "
            f"estate, where he feels at home (variant {i}).",
            "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
            "response": f"He is ashamed and longs to flee to the countryside (answer {i}).",
        }


def _store_counts(store: JobStore, job_id: str) -> tuple[int, Counter[str]]:
    """The job's valid item count and its stored results per item id, read from the store."""
    row = store.get(job_id)
    if row is None:
        raise RuntimeError(f"job {job_id} is not in the store")
    per_item = Counter(json.loads(raw)["id"] for raw in store.raw_results(job_id))
    return int(row["total"]), per_item


def _held_items(store: JobStore, job_id: str, pid: int) -> list[int]:
    """Item indexes of the job's chunks that the replica of process ``pid`` holds."""
    return [
        i
        for token in store.holders(job_id) if token.split("-", 1)[0] == str(pid)
        for chunk in store.held(job_id, token)
        for i in range(chunk.lo, chunk.hi)
    ]


def _items_graded(url: str) -> int:
    """Items a replica has graded since it started (its ``bonusjudge_items_graded`` counter)."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=10).text
    return int(sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("bonusjudge_items_graded_total{")
    ))


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The demo's steps; returns the summary line's fields."""
    from bonusjudge_client import JudgeClient

    processes = Processes(work)
    try:
        redis_port, pg_port, judge_port = free_port(), free_port(), free_port()
        _log(f"starting Redis on 127.0.0.1:{redis_port}")
        processes.start("redis", [PYTHON, "-m", "tests.helpers.redis_server",
                                  "--port", str(redis_port)])
        _log(f"starting PostgreSQL on 127.0.0.1:{pg_port}")
        processes.start("postgres", [PYTHON, "-m", "tests.helpers.postgres_server",
                                     "--port", str(pg_port), "--data", str(work / "pgdata")])
        _log(f"starting the stand-in judge on 127.0.0.1:{judge_port} ({args.latency} s/call)")
        processes.start("judge", [PYTHON, "-m", "standins.openai_server",
                                  "--port", str(judge_port), "--latency", str(args.latency)])
        cache_url = _printed_url(processes, "redis")
        jobs_url = _printed_url(processes, "postgres")
        _wait_port(judge_port, processes, "judge")
        env = {
            "BONUSJUDGE_CACHE_URL": cache_url,
            "BONUSJUDGE_JOBS_URL": jobs_url,
            "BONUSJUDGE_JOB_LEASE_SECONDS": str(args.lease),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HF_HUB_OFFLINE": "1",
        }
        urls: dict[str, str] = {}
        for name in ("A", "B"):
            port = free_port()
            urls[name] = f"http://127.0.0.1:{port}"
            _log(f"starting replica {name} on {urls[name]}")
            processes.start(name, [
                PYTHON, "-m", "cli", "serve", "--port", str(port),
                "--cache-dir", str(work / f"cache-{name}"),
                "--model", "openai/standin", "--api-base", f"http://127.0.0.1:{judge_port}/v1",
                "--metrics", "coverage,defects", "--concurrency", str(args.concurrency),
            ], env={**env, "BONUSJUDGE_DATA_DIR": str(work / f"data-{name}")})
        for name, url in urls.items():
            _wait_http(f"{url}/readyz", processes, name)
        # Opened now: the reads around the kill must not wait for the store's imports.
        from api.jobs import open_store
        from api.settings import load_service_settings

        store = open_store(load_service_settings(jobs_url=jobs_url))

        a, b = JudgeClient(urls["A"]), JudgeClient(urls["B"])
        job = a.submit_job(list(_items(args.items)))
        _log(f"job {job.id}: {job.total} items submitted through A")
        while True:
            status = b.job(job.id)  # any replica answers: B reads what A is doing
            if status.done >= args.kill_after * status.total:
                break
            if status.status in ("done", "failed", "cancelled"):
                raise RuntimeError(f"the job finished before the kill: {status.status}")
            time.sleep(0.2)
        # The job is the only grading either replica does: their counters are its items.
        graded = {name: _items_graded(url) for name, url in urls.items()}
        _log(f"job {job.id} at {status.done}/{status.total} items: "
             + ", ".join(f"replica {name} graded {n}" for name, n in graded.items()))
        victim, survivor, client = "A", "B", b
        pid = processes.started[victim].pid
        _, before = _store_counts(store, job.id)
        held = _held_items(store, job.id, pid)
        # Items with a result (read first) of the chunks the victim holds (read next): it graded
        # them (a chunk changes hands only when its holder gives it up or dies; none has yet).
        graded_by_victim = sorted({f"demo-{i:04d}" for i in held} & set(before))
        _log(f"SIGKILL replica {victim} (pid {pid}) holding {len(held)} items in chunks of the "
             f"job ({len(graded_by_victim)} of them graded)")
        processes.kill(victim)
        if not held:
            raise RuntimeError(f"replica {victim} held no chunk of the job when it was killed "
                               "(the job ran out first: try more --items or a lower --kill-after)")
        finished = client.wait(job.id, timeout=args.timeout)
        _log(f"job {job.id} {finished.status} through replica {survivor}: "
             f"{finished.done}/{finished.total}; replica {survivor} graded "
             f"{_items_graded(urls[survivor]) - graded[survivor]} more")

        sample = [item for item in _items(args.items) if item["id"] in set(
            graded_by_victim[: args.sample]
        )]
        again = client.grade_many(sample, progress=False)
        hits = sum(call.cached for result in again for call in result.provenance.calls)
        _log(f"{len(sample)} items graded by {victim} graded again through {survivor}: "
             f"{hits} judge calls served from the shared cache")

        total, per_item = _store_counts(store, job.id)
        store.close()
        expected = {item["id"] for item in _items(args.items)}
        return {
            "replicas": 2,
            "killed": True,
            "items": total,
            "graded_once": sum(1 for item_id in expected if per_item.get(item_id) == 1),
            "lost": sum(1 for item_id in expected if item_id not in per_item),
            "duplicates": sum(count - 1 for count in per_item.values() if count > 1),
            "cross_replica_cache_hits": hits,
            "replicas_grading_one_job": sum(1 for n in graded.values() if n > 0),
        }
    finally:
        _log("stopping every process")
        processes.stop_all()


def main() -> int:
    """Run the demo; print its summary as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=240, help="items in the job (>= 200)")
    parser.add_argument("--latency", type=float, default=0.25, help="stand-in s per call")
    parser.add_argument("--concurrency", type=int, default=8, help="each replica's items at once")
    parser.add_argument("--lease", type=float, default=5.0, help="job lease seconds")
    parser.add_argument("--kill-after", type=float, default=0.3,
                        help="kill when this share of the job is graded")
    parser.add_argument("--sample", type=int, default=20, help="items graded again")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the job")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bonusjudge-cluster-"))
    # PostgreSQL refuses to run as root: under root the launcher runs it as an unprivileged
    # account, which must be able to reach its data folder inside this one.
    work.chmod(0o711)
    try:
        summary = run(args, work)
    except Exception as exc:
        _log(f"failed: {exc} (logs in {work})")
        return 1
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(summary))
    ok = summary["graded_once"] == summary["items"] and not summary["lost"] and not (
        summary["duplicates"]
    ) and summary["replicas_grading_one_job"] == 2
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
