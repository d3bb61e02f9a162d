"""Two API keys on one service (issue 31.1, 31.5): B's latency and the RSS under A's batches.

One or more checkouts are measured side by side (the old code from a ``git worktree``).

For each checkout (``--trees``, default this one): ``bonusjudge serve`` is started from it
(``python -m cli`` in that folder) with two API keys, the stand-in judge in its own process
(``--latency`` per call), ``--metrics coverage`` and a fresh cache; then

* B alone: 8 ``/v1/grade`` requests one after another (after 3 to warm up): median and max;
* A's 4 / 8 / 12 concurrent batches of 256 new items while B sends one ``/v1/grade`` every
  0.25 s until A's batches are answered: B's median and max, A's answers (200 / 429 / other);
* on a fresh service, A's 12 concurrent batches of 18.9 MB: the service's peak RSS (``VmHWM``)
  before and after.

Usage::

    git worktree add /tmp/old <commit>
    python -m bench.tenants --trees /tmp/old .
"""

from __future__ import annotations

import asyncio
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
from bench.standin import StandInProcess
from core.processes import free_port, wait_until_answers
from standins.tenants import big_batch_body, flood, probe

__all__ = ["main"]

KEY_A, KEY_B = "bench-tenant-a", "bench-tenant-b"


class Service:
    """``bonusjudge serve`` started from the checkout ``tree``, with keys A and B."""

    def __init__(self, tree: Path, judge_url: str, work: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("BONUSJUDGE_")}
        env.update({"BONUSJUDGE_API_KEYS": json.dumps([KEY_A, KEY_B]),
                    "BONUSJUDGE_DATA_DIR": str(work / "data")})
        command = [sys.executable, "-m", "cli", "serve", "--port", str(self.port),
                   "--model", "openai/standin", "--api-base", judge_url, "--metrics", "coverage",
                   "--cache-dir", str(work / "cache"), "--no-preflight"]
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


async def latency_rows(url: str, batches: Sequence[int], tree: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        await probe(client, KEY_B, 3, tag=f"{tree}-warm")
        quiet = await probe(client, KEY_B, 8, tag=f"{tree}-quiet")
    rows = [{"load": "B alone", "b_median_s": quiet.probe_median,
             "b_max_s": max(quiet.probe_latencies), "a": ""}]
    for count in batches:
        log(f"{tree}: A's {count} batches")
        run = await flood(url, KEY_A, KEY_B, batches=count, probes=200, tag=f"{tree}-{count}")
        answers = {status: run.flood_statuses.count(status) for status in set(run.flood_statuses)}
        refused = sum(1 for status in run.probe_statuses if status != 200)
        rows.append({
            "load": f"A {count} x 256", "b_median_s": run.probe_median,
            "b_max_s": max(run.probe_latencies), "b_refused": refused, "wall_s": run.wall_s,
            "a": " ".join(f"{s}:{n}" for s, n in sorted(answers.items())),
        })
    return rows


async def rss_row(url: str, tree: str, before: float, service: Service) -> dict[str, Any]:
    body = big_batch_body(f"{tree}-big", 256, 18_900_000)
    run = await flood(url, KEY_A, KEY_B, batches=12, body=body, probes=0, tag=f"{tree}-big")
    answers = {status: run.flood_statuses.count(status) for status in set(run.flood_statuses)}
    return {"rss_before_mb": before, "rss_peak_mb": service.peak_mb(), "wall_s": run.wall_s,
            "a": " ".join(f"{s}:{n}" for s, n in sorted(answers.items()))}


def measure(tree: Path, judge_url: str, batches: Sequence[int]) -> dict[str, Any]:
    name = str(tree)
    with tempfile.TemporaryDirectory(prefix="bench-tenants-") as folder:
        work = Path(folder)
        (work / "a").mkdir()
        (work / "b").mkdir()
        service = Service(tree, judge_url, work / "a")
        try:
            rows = asyncio.run(latency_rows(service.url, batches, name))
        finally:
            service.stop()
        service = Service(tree, judge_url, work / "b")
        try:
            asyncio.run(latency_rows(service.url, [], f"{name}-rss"))  # warm, as above
            rss = asyncio.run(rss_row(service.url, name, service.peak_mb(), service))
        finally:
            service.stop()
    return {"tree": name, "latency": rows, "rss": rss}


def main(argv: Sequence[str] | None = None) -> None:
    """Print B's latency under A's batches and the RSS under A's large batches, per checkout."""
    parser = section_parser("bench.tenants", __doc__)
    parser.add_argument("--trees", nargs="+", default=["."], help="checkouts to measure")
    parser.add_argument("--latency", type=float, default=0.1, help="judge seconds per call")
    parser.add_argument("--batches", type=int, nargs="+", default=[4, 8, 12])
    args = parse_section_args(parser, argv)
    before = machine()
    results = []
    with StandInProcess(latency=args.latency) as judge:
        for tree in args.trees:
            log(f"measuring {tree}")
            results.append(measure(Path(tree).resolve(), judge.base_url, args.batches))
    after = machine()
    print(f"load average {before['load_avg']} -> {after['load_avg']}, {before['cores']} cores, "
          f"judge {args.latency:g} s per call, concurrency 16, metrics coverage")
    print("| checkout | load | B median s | B max s | B refused | A's answers |")
    print("|---|---|---|---|---|---|")
    for result in results:
        for row in result["latency"]:
            print(f"| {result['tree']} | {row['load']} | {row['b_median_s']:.3f} | "
                  f"{row['b_max_s']:.3f} | {row.get('b_refused', '')} | {row['a']} |")
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
