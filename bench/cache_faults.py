"""A damaged or locked disk cache under ``bonusjudge serve``: this checkout against an older one.

Issue 31 part 4's attack, as figures: another process holds ``cache.db``'s write lock for
``--lock`` seconds while a client polls ``/healthz`` and grades a batch; then the live
``cache.db``, and in a second service its ``cache.db-shm``, are truncated to nothing under
grading. Each row is one checkout (``--before`` names the older commit, run from a temporary
``git worktree``), against the same OpenAI stand-in judge, in the same run:

* ``/healthz`` median and max latency while the lock is held (a cache call on the event loop
  makes it wait for the lock);
* how long a batch of 10 new items took under the lock;
* whether the service lives after each truncation (its exit status if not: 135 is SIGBUS).

Standalone (not in ``run_all``): ``.venv/bin/python -m bench.cache_faults``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    log,
    machine,
    older_checkout,
    percentile,
    section_parser,
    set_bench_env,
    write_json,
)
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess, filled_disk_cache, sqlite_write_lock

__all__ = ["main"]

BEFORE = "7f6f960^"
"""The last commit before the disk cache left the event loop and stopped memory-mapping."""


def _items(count: int, tag: str) -> list[dict[str, Any]]:
    return [
        {"id": f"{tag}{n}", "question": f"How does Levin feel ({n})?",
         "reference": f"He feels humiliated ({n}).",
         "bonus_points": [f"Levin feels humiliated {n}"],
         "response": f"He is ashamed ({tag}{n}).", "tom_dimension": "emotion"}
        for n in range(count)
    ]


def _batch(service: ServiceProcess, count: int, tag: str) -> bool:
    """Grade ``count`` new items; False when the service went away on the way."""
    try:
        answer = httpx.post(f"{service.url}/v1/grade/batch", json={"items": _items(count, tag)},
                            timeout=180)
    except httpx.TransportError:
        return False
    return answer.status_code == 200


def _serve(judge: OpenAIStandIn, folder: Path, work: Path, code: Path | None) -> ServiceProcess:
    args = ["--model", "openai/standin", "--api-base", judge.base_url,
            "--metrics", "coverage,defects", "--cache-dir", str(folder)]
    env = {"BONUSJUDGE_DATA_DIR": str(work / f"data-{time.monotonic_ns()}")}
    return ServiceProcess(args, work, env=env, code=code)


def _exit_after_truncating(judge: OpenAIStandIn, work: Path, code: Path | None, name: str) -> str:
    """Truncate the live ``name`` (cache.db or cache.db-shm) under grading: 'alive' or the exit."""
    folder = work / f"cache-{name}-{time.monotonic_ns()}"
    filled_disk_cache(folder)
    with _serve(judge, folder, work, code) as service:
        _batch(service, 5, "a")  # the cache is open and in use
        target = folder / name
        if not target.exists():
            return f"no {name}"
        os.truncate(target, 0)
        for round_ in range(3):
            _batch(service, 30, f"b{round_}-")
        assert service.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            service.proc.wait(2)
        status = service.proc.poll()
        return "alive" if status is None else f"exit {status if status >= 0 else 128 - status}"


def _locked(judge: OpenAIStandIn, work: Path, code: Path | None, seconds: float) -> dict[str, Any]:
    """``/healthz`` latencies and a batch's time while another process holds the write lock."""
    folder = work / f"cache-lock-{time.monotonic_ns()}"
    database = filled_disk_cache(folder)
    with _serve(judge, folder, work, code) as service:
        _batch(service, 2, "warm")
        took: list[float] = []

        def grade() -> None:
            sent = time.monotonic()
            _batch(service, 10, "locked")
            took.append(time.monotonic() - sent)

        latencies: list[float] = []
        with sqlite_write_lock(database, seconds):
            locked = time.monotonic()
            grader = threading.Thread(target=grade, daemon=True)
            grader.start()
            while time.monotonic() - locked < seconds - 0.5 or grader.is_alive():
                sent = time.monotonic()
                httpx.get(f"{service.url}/healthz", timeout=seconds + 60)
                latencies.append(time.monotonic() - sent)
                time.sleep(0.1)
            grader.join()
    return {
        "healthz_median_s": round(percentile(latencies, 50), 3),
        "healthz_max_s": round(max(latencies), 3),
        "healthz_requests": len(latencies),
        "batch_s": round(took[0], 2) if took else None,
    }


def _run(label: str, code: Path | None, seconds: float, work: Path) -> dict[str, Any]:
    log(f"{label}: lock {seconds:g} s, then truncations")
    with OpenAIStandIn() as judge:
        row = {"code": label, **_locked(judge, work, code, seconds)}
        row["truncate_cache_db"] = _exit_after_truncating(judge, work, code, "cache.db")
        row["truncate_cache_db_shm"] = _exit_after_truncating(judge, work, code, "cache.db-shm")
    return row


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; ``--json PATH`` writes the rows."""
    parser = section_parser("bench.cache_faults", __doc__)
    parser.add_argument("--lock", type=float, default=10.0, help="seconds the lock is held")
    parser.add_argument("--before", default=BEFORE, help="the older commit to compare with")
    args = parser.parse_args(argv)
    set_bench_env()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bonusjudge-cache-faults-") as tmp:
        work = Path(tmp)
        with older_checkout(args.before, work) as old:
            rows = [_run(f"before ({args.before})", old, args.lock, work),
                    _run("this checkout", None, args.lock, work)]
    print(f"\nA {args.lock:g} s write lock on cache.db, then truncations "
          f"(load {load[0]:.2f} -> {os.getloadavg()[0]:.2f})\n")
    print("| code | /healthz median | /healthz max | batch of 10 under the lock "
          "| truncate cache.db | truncate cache.db-shm |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['code']} | {r['healthz_median_s']:.3f} s | {r['healthz_max_s']:.3f} s "
              f"| {r['batch_s']} s | {r['truncate_cache_db']} | {r['truncate_cache_db_shm']} |")
    write_json(args.json, {"machine": machine(), "rows": rows, "lock_s": args.lock})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
