"""Service overhead: latency of ``POST /v1/grade`` over the judge's, and cached requests/s.

Starts ``bonusjudge serve --model openai/standin --api-base <stand-in> --metrics
coverage,defects --cache-dir <fresh> --workers W`` as a subprocess (loopback, a free port), waits
for ``/healthz``, then drives it with an httpx async load generator, bounded in both count and
time:

* **cold**: ``--cold`` distinct items, ``--cold-concurrency`` requests in flight. Each request
  makes two judge calls that run concurrently, so the judge's share of a request is one stand-in
  latency; the overhead is the request's latency minus that (p50/p95/p99).
* **cached**: the same items again (every judge call now a cache hit), ``--cached`` requests at
  ``--cached-concurrency``: requests/s and latency percentiles.

The service's peak memory is the largest ``VmHWM`` in its process tree (uvicorn's supervisor and
its workers), read just before it is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
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
    parse_section_args,
    percentile,
    proc_peak_rss_mb,
    process_tree,
    section_parser,
    write_json,
)
from bench.memory import bonusjudge_command
from bench.standin import StandInProcess
from core.processes import free_port, wait_until_answers

__all__ = ["load", "main", "start_service"]


def start_service(
    base_url: str, workers: int, concurrency: int, work: Path, timeout: float = 120.0
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``bonusjudge serve`` and wait until ``/healthz`` answers.

    Returns:
        The process and the service's root URL.

    Raises:
        BenchError: The service exited or did not answer within ``timeout`` seconds.
    """
    port = free_port()
    command = [
        *bonusjudge_command(), "serve", "--port", str(port), "--workers", str(workers),
        "--model", "openai/standin", "--api-base", base_url, "--metrics", "coverage,defects",
        "--cache-dir", str(work / "cache"), "--concurrency", str(concurrency),
    ]
    env = dict(os.environ)
    env.pop("BONUSJUDGE_SETTINGS_FILE", None)  # never inherit another run's settings
    log_file = open(work / "serve.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    if wait_until_answers(
        f"{url}/healthz", timeout=timeout, interval=0.3, alive=lambda: process.poll() is None
    ):
        return process, url
    if process.poll() is not None:
        tail = (work / "serve.log").read_text(errors="replace")[-1500:]
        raise BenchError(f"bonusjudge serve exited {process.returncode}: {tail}")
    stop_service(process)
    raise BenchError(f"bonusjudge serve did not answer /healthz within {timeout:g} s")


def stop_service(process: subprocess.Popen[bytes]) -> None:
    """Stop the service (SIGINT, as Ctrl-C would; SIGKILL after 20 s)."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def load(
    url: str, bodies: Sequence[dict[str, Any]], count: int, concurrency: int, time_limit: float
) -> dict[str, Any]:
    """POST ``count`` bodies (cycling) to ``/v1/grade`` with ``concurrency`` in flight.

    Stops starting new requests after ``time_limit`` seconds.

    Returns:
        ``requests`` (completed), ``errors`` (non-200 or transport failures), ``wall_s``,
        ``requests_per_s`` and the latencies in seconds (``latencies``).

    Raises:
        BenchError: Every request failed.
    """
    import httpx

    latencies: list[float] = []
    errors: list[str] = []
    next_index = 0
    started = time.perf_counter()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def worker() -> None:
            nonlocal next_index
            while next_index < count and time.perf_counter() - started < time_limit:
                body = bodies[next_index % len(bodies)]
                next_index += 1
                sent = time.perf_counter()
                try:
                    reply = await client.post("/v1/grade", json=body)
                except httpx.HTTPError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                if reply.status_code != 200:
                    errors.append(f"HTTP {reply.status_code}: {reply.text[:200]}")
                    continue
                latencies.append(time.perf_counter() - sent)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    if not latencies:
        raise BenchError(f"every request failed; first error: {errors[:1]}")
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(latencies) / wall, 1),
        "latencies": latencies,
    }


def _summary(run: dict[str, Any], judge_latency: float) -> dict[str, Any]:
    values = run.pop("latencies")
    out = dict(run)
    for q in (50, 95, 99):
        latency = percentile(values, q)
        out[f"p{q}_ms"] = round(1000 * latency, 1)
        out[f"p{q}_overhead_ms"] = round(1000 * (latency - judge_latency), 1)
    return out


async def _bench_one(
    args: argparse.Namespace, srv: StandInProcess, workers: int, bodies: list[dict[str, Any]]
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"bench-serve-w{workers}-"))
    process, url = await asyncio.to_thread(
        start_service, srv.base_url, workers, args.server_concurrency, work
    )
    try:
        log(f"workers={workers}: warm-up")
        warm = [{**b, "id": f"{b.get('id')}~warmup", "response": b["response"] + " (w)"}
                for b in bodies[:16]]
        await load(url, warm, len(warm), 8, args.time_limit)
        srv.reset_stats()
        log(f"workers={workers}: cold, {len(bodies)} items at concurrency {args.cold_concurrency}")
        cold = _summary(
            await load(url, bodies, len(bodies), args.cold_concurrency, args.time_limit),
            args.latency,
        )
        cold["provider_requests"] = srv.stats().requests
        srv.reset_stats()
        log(f"workers={workers}: cached, {args.cached} requests at {args.cached_concurrency}")
        cached = _summary(
            await load(url, bodies, args.cached, args.cached_concurrency, args.time_limit), 0.0
        )
        cached["provider_requests"] = srv.stats().requests
        pids = process_tree(process.pid)
        peaks = [p for p in (proc_peak_rss_mb(pid) for pid in pids) if p is not None]
    finally:
        await asyncio.to_thread(stop_service, process)
    return {
        "workers": workers,
        "cold": cold,
        "cached": cached,
        "processes": len(pids),
        "peak_rss_mb_max": round(max(peaks), 1) if peaks else None,
        "peak_rss_mb_sum": round(sum(peaks), 1) if peaks else None,
    }


async def _run(args: argparse.Namespace, srv: StandInProcess) -> list[dict[str, Any]]:
    items = load_requests(limit=args.cold)
    bodies = [
        {**request.model_dump(mode="json", exclude_none=True), "id": item_id}
        for item_id, request in items
    ]
    return [await _bench_one(args, srv, workers, bodies) for workers in args.workers]


def main(argv: Sequence[str] | None = None) -> int:
    """Benchmark the HTTP service with 1 and 2 workers and print the table."""
    parser = section_parser("bench.service", __doc__)
    parser.add_argument("--latency", type=float, default=0.2, help="stand-in seconds per call")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="uvicorn workers")
    parser.add_argument("--cold", type=int, default=200, help="distinct items (cold phase)")
    parser.add_argument("--cold-concurrency", type=int, default=8, help="cold requests in flight")
    parser.add_argument("--cached", type=int, default=1000, help="cached-phase requests")
    parser.add_argument("--cached-concurrency", type=int, default=32, help="cached in flight")
    parser.add_argument(
        "--server-concurrency", type=int, default=64, help="the service's --concurrency"
    )
    parser.add_argument("--time-limit", type=float, default=90, help="seconds per phase, at most")
    args = parse_section_args(parser, argv)
    with StandInProcess(latency=args.latency) as srv:
        rows = asyncio.run(_run(args, srv))
    print(
        "| workers | cold p50 / p95 / p99 overhead ms | cold req/s | cached req/s | "
        "cached p50 / p99 ms | peak RSS MiB (largest process) |\n|---|---|---|---|---|---|"
    )
    for row in rows:
        cold, cached = row["cold"], row["cached"]
        print(
            f"| {row['workers']} | {cold['p50_overhead_ms']} / {cold['p95_overhead_ms']} / "
            f"{cold['p99_overhead_ms']} | {cold['requests_per_s']} | {cached['requests_per_s']} | "
            f"{cached['p50_ms']} / {cached['p99_ms']} | {row['peak_rss_mb_max']} |"
        )
    write_json(
        args.json,
        {"service": rows, "latency_s": args.latency, "cold_concurrency": args.cold_concurrency,
         "cached_concurrency": args.cached_concurrency},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
