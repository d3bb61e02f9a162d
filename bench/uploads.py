"""Job uploads under attack (issue 41.3): memory, the other key's latency, store bytes vs quota.

One or more checkouts are measured side by side (the old code from a ``git worktree``). For each
(``--trees``, default this one), ``bonusjudge serve`` is started from it (``bench.tenants``'s
``Service``: two API keys, the stand-in judge in its own process, ``--metrics coverage``, a
fresh data folder and cache) three times, each warmed by a small job of A's and a few of B's
``/v1/grade``; A's uploads are sent from a process of their own:

* big: key A posts ``--uploads`` JSON job bodies of ``--mb`` MB each (items of about 1 KB) at
  once, sending a refused one (429/503) again after its ``Retry-After`` for up to
  ``--retry-for`` seconds, while key B sends ``GET /healthz`` every 50 ms: the service's peak
  RSS (``VmHWM``) before and after, B's ``/healthz`` median, p95 and max, A's answers;
* bad lines: B's ``/v1/grade`` alone (20 requests, one every 0.1 s, after 3 to warm up), then
  one every 0.1 s (each sent whether the last was answered or not, as users arrive) while A
  posts ``--uploads`` JSONL bodies of 100,000 lines that are not JSON (0.8 MB each) at once:
  B's median, p95 and max;
* store: against a stand-in that takes 10 minutes a call (nothing is graded meanwhile), one
  upload of 100,000 bad lines, then one JSON upload of ``--store-mb`` MB of items: how much the
  SQLite job store grew (its pages in use, write-ahead log included) against the ``bytes`` the
  key's stored-bytes quota counted for the job.

Usage::

    git worktree add /tmp/old <commit>
    python -m bench.uploads --trees /tmp/old .
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import tempfile
import time
from collections.abc import Sequence
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import httpx

from bench.common import log, machine, parse_section_args, section_parser, write_json
from bench.standin import StandInProcess
from bench.tenants import KEY_A, KEY_B, Service
from tests.helpers.tenants import grade_item, probe
from tests.helpers.uploads import (
    bad_lines,
    grade_every,
    job_body,
    median,
    p95,
    poll,
    store_use,
    upload_at_once,
)

__all__ = ["main"]

NDJSON = "application/x-ndjson"
JSON = "application/json"
AUTH_A = {"Authorization": f"Bearer {KEY_A}"}


def _answers(statuses: Sequence[int]) -> str:
    return " ".join(f"{s}:{statuses.count(s)}" for s in sorted(set(statuses)))


def _uploader(url: str, kind: str, count: int, mb: float, retry_for: float,
              out: Queue[Any], ready: Any) -> None:
    """A's side, in a process of its own: build the bodies, then post them all at once.

    Its own process, so that sending 128 MB (and parsing the answers) never delays B's requests
    in the measuring process: their latency is the service's.
    """
    if kind == "json":
        bodies, content_type = [job_body(f"big{n}", int(mb * 1e6)) for n in range(count)], JSON
    else:
        bodies, content_type = [bad_lines() for _ in range(count)], NDJSON
    ready.set()
    run = asyncio.run(upload_at_once(url, KEY_A, bodies, content_type=content_type,
                                     retry_for=retry_for))
    out.put({**dataclasses.asdict(run), "body_mb": len(bodies[0]) / 1e6})


async def _flood_with_probe(
    url: str, kind: str, count: int, mb: float, retry_for: float, every: float,
) -> tuple[dict[str, Any], list[float]]:
    """A's uploads at once, from another process, while B polls or grades until A is answered.

    B polls ``/healthz`` under JSON uploads (``kind`` json), and grades under bad lines.
    """
    context = multiprocessing.get_context("spawn")
    out: Queue[Any] = context.Queue()
    ready = context.Event()
    child = context.Process(target=_uploader, args=(url, kind, count, mb, retry_for, out, ready))
    child.start()
    try:
        await asyncio.to_thread(ready.wait, 600)
        done = asyncio.Event()

        async def watch() -> dict[str, Any]:
            result: dict[str, Any] = await asyncio.to_thread(out.get, True, 3600)
            done.set()
            return result

        answers = asyncio.create_task(watch())
        await asyncio.sleep(0.2)  # A's bodies are on their way before B's first request
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            if kind == "json":
                latencies = await poll(client, KEY_B, "/healthz", every=every, until=done)
            else:
                latencies = await grade_every(client, KEY_B, every=every, until=done, tag="bad")
        return await answers, latencies
    finally:
        child.join(60)


def big_uploads(tree: Path, judge_url: str, work: Path, count: int, mb: float,
                retry_for: float) -> dict[str, Any]:
    """Peak RSS and B's ``/healthz`` under A's big JSON uploads at once."""
    service = Service(tree, judge_url, work)
    try:
        asyncio.run(_warm(service.url))
        before = service.peak_mb()
        run, latencies = asyncio.run(
            _flood_with_probe(service.url, "json", count, mb, retry_for, 0.05))
        return {"rss_before_mb": before, "rss_peak_mb": service.peak_mb(),
                "healthz_median_s": median(latencies), "healthz_p95_s": p95(latencies),
                "healthz_max_s": max(latencies), "healthz_n": len(latencies),
                "first": _answers(run["first"]), "final": _answers(run["final"]),
                "attempts": run["attempts"], "wall_s": run["wall_s"], "body_mb": run["body_mb"]}
    finally:
        service.stop()


async def _warm(url: str) -> list[float]:
    """A small job of A's graded, then B's ``/v1/grade`` alone: 3 to warm up, 20 timed.

    The 20 are sent every 0.1 s, as under load. The job pays the job runner's first-use costs
    (imports, the judge's set-up) before anything is measured.
    """
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        job = (await client.post("/v1/jobs", json={"items": [grade_item("warm-job", 0)]},
                                 headers=AUTH_A)).json()
        while (await client.get(f"/v1/jobs/{job['id']}", headers=AUTH_A)).json()["status"] not in (
                "done", "failed"):
            await asyncio.sleep(0.1)
        await probe(client, KEY_B, 3, tag="warm")
        alone = asyncio.Event()
        alone.set()
        return await grade_every(client, KEY_B, every=0.1, until=alone, tag="quiet", least=20)


def bad_uploads(tree: Path, judge_url: str, work: Path, count: int) -> dict[str, Any]:
    """B's ``/v1/grade`` alone, then under A's uploads of 100,000 bad lines at once."""
    service = Service(tree, judge_url, work)
    try:
        quiet = asyncio.run(_warm(service.url))
        run, latencies = asyncio.run(_flood_with_probe(service.url, "bad", count, 0, 0, 0.1))
        return {"quiet_median_s": median(quiet), "quiet_p95_s": p95(quiet),
                "median_s": median(latencies), "p95_s": p95(latencies),
                "max_s": max(latencies), "n": len(latencies), "first": _answers(run["first"]),
                "wall_s": run["wall_s"]}
    finally:
        service.stop()


def store_growth(tree: Path, judge_url: str, work: Path, mb: float) -> list[dict[str, Any]]:
    """What one bad-lines upload and one JSON upload of items add to the store, and count."""
    service = Service(tree, judge_url, work)
    database = work / "data" / "jobs.sqlite3"
    rows = []
    try:
        # /healthz answers while the app still loads (api.launcher): its store comes after.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{service.url}/v1/jobs", headers=AUTH_A).status_code == 200:
                    break
            time.sleep(0.2)
        for name, body, content_type in (
            ("100,000 bad lines", bad_lines(), NDJSON),
            (f"{mb:g} MB of items (JSON)", job_body("store", int(mb * 1_000_000)), JSON),
        ):
            before = store_use(database)
            run = asyncio.run(upload_at_once(service.url, KEY_A, [body],
                                             content_type=content_type))
            after = store_use(database)
            rows.append({"upload": name, "upload_mb": len(body) / 1e6,
                         "answer": _answers(run.final),
                         "grown_mb": (after.used - before.used) / 1e6,
                         "files_grown_mb": (after.files - before.files) / 1e6,
                         "counted_mb": (after.counted - before.counted) / 1e6})
    finally:
        service.stop()
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """Print the three measurements per checkout."""
    parser = section_parser("bench.uploads", __doc__)
    parser.add_argument("--trees", nargs="+", default=["."], help="checkouts to measure")
    parser.add_argument("--uploads", type=int, default=8, help="A's uploads at once")
    parser.add_argument("--mb", type=float, default=16.0, help="MB of each big upload")
    parser.add_argument("--store-mb", type=float, default=4.0, help="MB of the stored upload")
    parser.add_argument("--retry-for", type=float, default=300.0,
                        help="seconds A sends a refused upload again")
    args = parse_section_args(parser, argv)
    start = machine()
    results: list[dict[str, Any]] = []
    with StandInProcess(latency=0.1) as judge, StandInProcess(latency=600.0) as slow:
        for tree in args.trees:
            path = Path(tree).resolve()
            log(f"measuring {path}")
            with tempfile.TemporaryDirectory(prefix="bench-uploads-") as folder:
                work = Path(folder)
                for name in ("big", "bad", "store"):
                    (work / name).mkdir()
                big = big_uploads(path, judge.base_url, work / "big", args.uploads, args.mb,
                                  args.retry_for)
                log(f"{tree}: big {big}")
                bad = bad_uploads(path, judge.base_url, work / "bad", args.uploads)
                log(f"{tree}: bad lines {bad}")
                store = store_growth(path, slow.base_url, work / "store", args.store_mb)
                log(f"{tree}: store {store}")
            results.append({"tree": str(path), "big": big, "bad": bad, "store": store})
    end = machine()
    print(f"load average {start['load_avg']} -> {end['load_avg']}, {start['cores']} cores, "
          "stand-in 0.1 s per call, concurrency 16, metrics coverage")
    print(f"| checkout | RSS start -> peak MB | B's /healthz median / p95 / max s "
          f"| A's first answers | A's final answers (attempts) | wall s |  "
          f"({args.uploads} x {args.mb:g} MB JSON)")
    print("|---|---|---|---|---|---|")
    for result in results:
        big = result["big"]
        print(f"| {result['tree']} | {big['rss_before_mb']:.0f} -> {big['rss_peak_mb']:.0f} | "
              f"{big['healthz_median_s']:.3f} / {big['healthz_p95_s']:.3f} / "
              f"{big['healthz_max_s']:.3f} | {big['first']} | "
              f"{big['final']} ({big['attempts']}) | {big['wall_s']:.1f} |")
    print()
    print(f"| checkout | B's /v1/grade alone median / p95 s | under A's {args.uploads} bad-line "
          "uploads median / p95 / max s | A's answers | wall s |")
    print("|---|---|---|---|---|")
    for result in results:
        bad = result["bad"]
        print(f"| {result['tree']} | {bad['quiet_median_s']:.3f} / {bad['quiet_p95_s']:.3f} | "
              f"{bad['median_s']:.3f} / {bad['p95_s']:.3f} / {bad['max_s']:.3f} | "
              f"{bad['first']} | {bad['wall_s']:.1f} |")
    print()
    print("| checkout | upload | MB | answer | store grew MB (pages in use) | files grew MB "
          "| quota counted MB |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
        for row in result["store"]:
            print(f"| {result['tree']} | {row['upload']} | {row['upload_mb']:.2f} | "
                  f"{row['answer']} | {row['grown_mb']:.2f} | {row['files_grown_mb']:.2f} | "
                  f"{row['counted_mb']:.2f} |")
    write_json(args.json, {"machine": [start, end], "results": results})


if __name__ == "__main__":
    main()
