"""Two API keys on one service (issue 31.1, 31.5): B's latency and the RSS under A's batches.

One or more checkouts are measured side by side (the old code from a ``git worktree``).

For each checkout (``--trees``, default this one): ``bonusjudge serve`` is started from it
(``python -m cli`` in that folder) with two API keys, the stand-in judge in its own process
(``--latency`` per call), ``--metrics coverage`` and a fresh cache; then

* B alone: 40 ``/v1/grade`` requests, one every 0.25 s (after 3 to warm up): p50, p95, p99, max;
* A's 4 / 8 / 12 concurrent batches of 256 new items while B sends one ``/v1/grade`` every
  0.25 s until A's batches are all graded (a refused batch is sent again after its
  ``Retry-After``, so the pressure lasts): the same quantiles, B's p95 over its p95 alone (issue
  41.5 asks for at most 2 at 12 batches), A's answers (200 / 429 / other);
* on a fresh service, A's 12 concurrent batches of 18.9 MB: the service's peak RSS (``VmHWM``)
  before and after.

Usage::

    git worktree add /tmp/old <commit>
    python -m bench.tenants --trees /tmp/old .
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    BenchError,
    log,
    machine,
    parse_section_args,
    proc_peak_rss_mb,
    section_parser,
    write_json,
)
from bench.replicas import new_database
from bench.standin import StandInProcess
from core.processes import free_port, wait_until_answers
from tests.helpers.tenants import FloodRun, big_batch_body, flood, probe

__all__ = ["main"]

KEY_A, KEY_B = "bench-tenant-a", "bench-tenant-b"


class Servers:
    """A Redis cache and a Postgres job store (``--servers``), as a shared deployment runs."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        from tests.helpers.postgres_server import postgres_server
        from tests.helpers.redis_server import redis_server

        self.cache_url = stack.enter_context(redis_server())
        self.postgres_url = stack.enter_context(postgres_server())

    def new_database(self) -> str:
        """An empty database for one service (and a flushed cache: every item is computed)."""
        import redis

        redis.Redis.from_url(self.cache_url).flushall()
        return new_database(self.postgres_url)


class Service:
    """``bonusjudge serve`` started from the checkout ``tree``, with keys A and B."""

    def __init__(
        self, tree: Path, judge_url: str, work: Path, metrics: str = "coverage",
        servers: Servers | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("BONUSJUDGE_")}
        env.update({"BONUSJUDGE_API_KEYS": json.dumps([KEY_A, KEY_B]),
                    "BONUSJUDGE_DATA_DIR": str(work / "data")})
        command = [sys.executable, "-m", "cli", "serve", "--port", str(self.port),
                   "--model", "openai/standin", "--api-base", judge_url, "--metrics", metrics,
                   "--cache-dir", str(work / "cache"), "--no-preflight"]
        if servers is not None:
            command[command.index("openai/standin")] = "openai/gpt-4o-mini"  # priced: a budget
            command += ["--cache-url", servers.cache_url, "--jobs-url", servers.new_database()]
            env["BONUSJUDGE_MAX_COST_PER_KEY_USD"] = "1000"
        self.log = open(work / "serve.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(command, cwd=tree, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        if not wait_until_answers(f"{self.url}/healthz", timeout=120,
                                  alive=lambda: self.proc.poll() is None):
            self.stop()
            raise BenchError(f"serve from {tree} did not start: see {work / 'serve.log'}")

    def peak_mb(self) -> float:
        """The service's peak RSS so far."""
        return proc_peak_rss_mb(self.proc.pid) or float("nan")

    def stop(self) -> None:
        """SIGINT, then SIGKILL after 20 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _latency(run: FloodRun) -> dict[str, float]:
    return {"b_p50_s": run.probe_quantile(0.50), "b_p95_s": run.probe_quantile(0.95),
            "b_p99_s": run.probe_quantile(0.99), "b_max_s": max(run.probe_latencies),
            "b_answered": len(run.probe_latencies)}


async def latency_rows(
    url: str, batches: Sequence[int], tree: str, quiet_probes: int = 40
) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        # Warm until three are answered: the encoder loads in the background at start, and a
        # grade that needs it meanwhile is answered 503 (its p99 alone would be the warm-up's).
        warm = FloodRun()
        for attempt in range(120):
            if sum(1 for status in warm.probe_statuses if status == 200) >= 3:
                break
            await probe(client, KEY_B, 1, tag=f"{tree}-warm{attempt}", run=warm)
            if warm.probe_statuses[-1] != 200:
                await asyncio.sleep(0.5)
        # B alone is probed as under load (one request every 0.25 s), so the quantiles compare.
        quiet = await probe(client, KEY_B, quiet_probes, tag=f"{tree}-quiet", every=0.25)
    rows = [{"load": "B alone", **_latency(quiet), "a": ""}]
    for count in batches:
        log(f"{tree}: A's {count} batches")
        run = await flood(url, KEY_A, KEY_B, batches=count, probes=2000, tag=f"{tree}-{count}",
                          persist=True)
        answers = {status: run.flood_statuses.count(status) for status in set(run.flood_statuses)}
        refused = sum(1 for status in run.probe_statuses if status != 200)
        rows.append({
            "load": f"A {count} x 256", **_latency(run), "b_refused": refused,
            "wall_s": run.wall_s,
            "a": " ".join(f"{s}:{n}" for s, n in sorted(answers.items())),
        })
    return rows


async def rss_row(url: str, tree: str, before: float, service: Service) -> dict[str, Any]:
    body = big_batch_body(f"{tree}-big", 256, 18_900_000)
    run = await flood(url, KEY_A, KEY_B, batches=12, body=body, probes=0, tag=f"{tree}-big")
    answers = {status: run.flood_statuses.count(status) for status in set(run.flood_statuses)}
    return {"rss_before_mb": before, "rss_peak_mb": service.peak_mb(), "wall_s": run.wall_s,
            "a": " ".join(f"{s}:{n}" for s, n in sorted(answers.items()))}


def measure(
    tree: Path, judge_url: str, batches: Sequence[int], rss: bool = True,
    metrics: str = "coverage", servers: Servers | None = None,
) -> dict[str, Any]:
    name = str(tree)
    with tempfile.TemporaryDirectory(prefix="bench-tenants-") as folder:
        work = Path(folder)
        (work / "a").mkdir()
        (work / "b").mkdir()
        service = Service(tree, judge_url, work / "a", metrics, servers)
        try:
            rows = asyncio.run(latency_rows(service.url, batches, name))
        finally:
            service.stop()
        if not rss:
            return {"tree": name, "latency": rows, "rss": None}
        service = Service(tree, judge_url, work / "b", metrics, servers)
        try:
            asyncio.run(latency_rows(service.url, [], f"{name}-rss", quiet_probes=8))  # warm
            peak = asyncio.run(rss_row(service.url, name, service.peak_mb(), service))
        finally:
            service.stop()
    return {"tree": name, "latency": rows, "rss": peak}


def main(argv: Sequence[str] | None = None) -> None:
    """Print B's latency under A's batches and the RSS under A's large batches, per checkout."""
    parser = section_parser("bench.tenants", __doc__)
    parser.add_argument("--trees", nargs="+", default=["."], help="checkouts to measure")
    parser.add_argument("--latency", type=float, default=0.1, help="judge seconds per call")
    parser.add_argument("--batches", type=int, nargs="+", default=[4, 8, 12])
    parser.add_argument("--metrics", default="coverage",
                        help="the service's --metrics (coverage: the judge only; all: with "
                        "ROUGE-L and BERTScore, which take the CPU)")
    parser.add_argument("--servers", action="store_true",
                        help="Redis cache, Postgres job store and a key budget (a priced model)")
    parser.add_argument("--no-rss", action="store_true", help="skip the large batches' RSS")
    args = parse_section_args(parser, argv)
    before = machine()
    results = []
    with StandInProcess(latency=args.latency) as judge, contextlib.ExitStack() as stack:
        servers = Servers(stack) if args.servers else None
        for tree in args.trees:
            log(f"measuring {tree}")
            results.append(measure(Path(tree).resolve(), judge.base_url, args.batches,
                                   rss=not args.no_rss, metrics=args.metrics,
                                   servers=servers))
    after = machine()
    print(f"load average {before['load_avg']} -> {after['load_avg']}, {before['cores']} cores, "
          f"judge {args.latency:g} s per call, concurrency 16, metrics {args.metrics}"
          + (", Redis cache, Postgres store, key budget" if servers else ""))
    print("| checkout | load | B answered | B p50 s | B p95 s | B p99 s | B max s | p95 / alone "
          "| B refused | A's answers | A's wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for result in results:
        alone = result["latency"][0]["b_p95_s"]
        for row in result["latency"]:
            wall = f"{row['wall_s']:.1f}" if "wall_s" in row else ""
            print(f"| {result['tree']} | {row['load']} | {row['b_answered']} | "
                  f"{row['b_p50_s']:.3f} | {row['b_p95_s']:.3f} | {row['b_p99_s']:.3f} | "
                  f"{row['b_max_s']:.3f} | {row['b_p95_s'] / alone:.2f} | "
                  f"{row.get('b_refused', '')} | {row['a']} | {wall} |")
    if any(result["rss"] is None for result in results):
        write_json(args.json, {"machine": [before, after], "results": results})
        return
    print()
    print("| checkout | RSS before MB | RSS peak under 12 x 18.9 MB MB | A's answers | wall s |")
    print("|---|---|---|---|---|")
    for result in results:
        rss = result["rss"]
        print(f"| {result['tree']} | {rss['rss_before_mb']:.0f} | {rss['rss_peak_mb']:.0f} | "
              f"{rss['a']} | {rss['wall_s']:.1f} |")
    write_json(args.json, {"machine": [before, after], "results": results})


if __name__ == "__main__":
    main()
