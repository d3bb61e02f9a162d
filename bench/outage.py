"""A provider outage at the start of a run: how many items end scored, and what the judge saw.

The stand-in judge answers every request with a 5xx for the first ``--outage`` seconds, then
recovers. Two runs, each on a fresh cache, as users run them:

* **service job**: ``bonusjudge serve --model openai/standin ...`` (a subprocess); the workload is
  submitted as one job through ``JudgeClient`` and waited for.
* **CLI**: ``bonusjudge grade WORKLOAD --model openai/standin ...`` in a fresh interpreter.

An outage must pause work, not end it: the goal is at least 99% of items scored, with the judge
only probed while it is down (before, the breaker stored every item graded while it was open as a
final ``circuit_open`` result: a job ended in 9 s with 1,032 of 1,035 items unscored).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import log, parse_section_args, section_parser, workload_path, write_json


def _outage(server: Any, seconds: float) -> threading.Event:
    """Fail every judge request from now until ``seconds`` after the first one arrives.

    Timed from the first request, not from the start: a fresh process spends seconds importing
    before it calls the judge, and the outage must hit the run, not its start-up.
    """
    from standins.openai_server import FaultPlan

    server.faults = FaultPlan({"server_error": 1.0})
    stop = threading.Event()

    def heal() -> None:
        while server.stats().requests == 0 and not stop.wait(0.01):
            pass
        stop.wait(seconds)
        server.faults = None

    threading.Thread(target=heal, daemon=True).start()
    return stop


def _counts(server: Any) -> dict[str, int]:
    stats = server.stats()
    return {"judge_requests": stats.requests, "judge_5xx": stats.outcomes.get("server_error", 0)}


def run_service(
    server: Any, items: list[dict[str, Any]], outage: float, tmp: Path
) -> dict[str, Any]:
    """One service job over ``items`` with the outage at its start."""
    from bonusjudge_client import JudgeClient
    from tests.helpers.processes import ServiceProcess

    args = ["--model", "openai/standin", "--api-base", server.base_url,
            "--metrics", "coverage,defects", "--cache-dir", str(tmp / "service-cache")]
    with ServiceProcess(args, tmp) as svc, JudgeClient(svc.url) as client:
        server.reset_stats()
        stop = _outage(server, outage)
        started = time.monotonic()
        job = client.submit_job(items)
        status = client.wait(job.id, timeout=1800)
        elapsed = time.monotonic() - started
        stop.set()
        summary = client.summary(job.id)
    return {
        "run": "service job", "items": status.total, "scored": status.scored,
        "unscored": status.unscored, "elapsed_s": round(elapsed, 1),
        "bpc": summary.bpc, "bpc_all": summary.bpc_all,
        "unscored_by_reason": summary.unscored_by_reason, **_counts(server),
    }


def run_cli(server: Any, source: Path, outage: float, tmp: Path) -> dict[str, Any]:
    """One ``bonusjudge grade`` run over ``source`` with the outage at its start."""
    from tests.helpers.processes import run_cli as cli

    out, summary_path = tmp / "cli.jsonl", tmp / "cli-summary.json"
    server.reset_stats()
    stop = _outage(server, outage)
    started = time.monotonic()
    done = cli(["grade", str(source), "--out", str(out), "--summary", str(summary_path),
                "--model", "openai/standin", "--api-base", server.base_url,
                "--metrics", "coverage,defects", "--concurrency", "64",
                "--cache-dir", str(tmp / "cli-cache"), "--quiet"], timeout=1800)
    elapsed = time.monotonic() - started
    stop.set()
    if done.returncode != 0:
        raise RuntimeError(f"bonusjudge grade failed: {done.stderr[-2000:]}")
    summary = json.loads(summary_path.read_text())
    return {
        "run": "CLI", "items": summary["items"], "scored": summary["scored"],
        "unscored": summary["unscored"], "elapsed_s": round(elapsed, 1), "bpc": summary["bpc"],
        "bpc_all": summary["bpc_all"], "unscored_by_reason": summary["unscored_by_reason"],
        **_counts(server),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run both outage runs and print the table."""
    parser = section_parser("bench.outage", __doc__)
    parser.add_argument("--outage", type=float, default=4.0, help="seconds the judge is down")
    parser.add_argument("--latency", type=float, default=0.1, help="stand-in latency (s)")
    parser.add_argument("--limit", type=int, help="first N items of the workload")
    args = parse_section_args(parser, argv)
    from standins.openai_server import OpenAIStandIn

    source = workload_path()
    lines = source.read_text(encoding="utf-8").splitlines()[: args.limit]
    items = [json.loads(line) for line in lines if line.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bonusjudge-outage-") as folder, OpenAIStandIn(
        latency=args.latency
    ) as server:
        tmp = Path(folder)
        subset = tmp / "workload.jsonl"
        subset.write_text("\n".join(lines) + "\n", encoding="utf-8")
        log(f"outage bench: {len(items)} items, judge down for the first {args.outage:g} s")
        rows.append(run_service(server, items, args.outage, tmp))
        rows.append(run_cli(server, subset, args.outage, tmp))
    print(f"\nProvider outage of {args.outage:g} s at the start; stand-in latency "
          f"{args.latency:g} s; coverage + defects\n")
    print(f"{'run':<12}{'items':>7}{'scored':>8}{'unsc.':>7}{'scored%':>9}{'time s':>8}"
          f"{'judge req':>11}{'5xx':>6}{'BPC':>7}{'BPCall':>8}")
    for row in rows:
        share = 100 * row["scored"] / row["items"] if row["items"] else 0.0
        print(f"{row['run']:<12}{row['items']:>7}{row['scored']:>8}{row['unscored']:>7}"
              f"{share:>8.1f}%{row['elapsed_s']:>8}{row['judge_requests']:>11}"
              f"{row['judge_5xx']:>6}{_fmt(row['bpc']):>7}{_fmt(row['bpc_all']):>8}")
    print("\ngoal: at least 99% of items scored; unscored by reason: "
          + "; ".join(f"{r['run']} {r['unscored_by_reason'] or 'none'}" for r in rows))
    write_json(args.json, {"outage_s": args.outage, "rows": rows})
    return 0


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
