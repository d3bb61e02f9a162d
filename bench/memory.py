"""Peak memory of the command line: ``bonusjudge grade`` on the whole workload, in a subprocess.

The CLI grades the workload with every metric (coverage, defects, ROUGE-L and BERTScore: the
heaviest configuration, since BERTScore loads torch and the encoder) against the stand-in judge.
Its peak RSS is the child's own ``ru_maxrss``, read with ``os.wait4`` on its pid, so neither this
process nor the stand-in's process is counted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    BenchError,
    log,
    parse_section_args,
    section_parser,
    workload_path,
    write_json,
)
from bench.standin import StandInProcess

__all__ = ["bonusjudge_command", "main", "run_cli"]


def bonusjudge_command() -> list[str]:
    """How to start the CLI: the venv's ``bonusjudge`` script, else ``python -m cli``."""
    script = Path(sys.executable).with_name("bonusjudge")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "cli"]


def run_cli(base_url: str, *, metrics: str, concurrency: int, timeout: float) -> dict[str, Any]:
    """Grade the workload with ``bonusjudge grade`` and return its wall time and peak RSS.

    Raises:
        BenchError: The CLI failed or ran past ``timeout`` seconds.
    """
    work = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    command = [
        *bonusjudge_command(), "grade", str(workload_path()), "--out", str(work / "out.jsonl"),
        "--model", "openai/standin", "--api-base", base_url, "--metrics", metrics,
        "--cache-dir", str(work / "cache"), "--concurrency", str(concurrency), "--quiet",
        "--summary", str(work / "summary.json"),
    ]
    started = time.perf_counter()
    with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env=dict(os.environ))
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                process.wait()
                raise BenchError(f"bonusjudge grade ran past {timeout:g} s (see {work})")
            time.sleep(0.2)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)  # wait4 reaped it, not Popen
    if process.returncode != 0:
        tail = (work / "stderr.txt").read_text(errors="replace")[-800:]
        raise BenchError(f"bonusjudge grade exited {process.returncode}: {tail}")
    with open(work / "out.jsonl", encoding="utf-8") as results:
        lines = sum(1 for _ in results)
    return {
        "items": lines,
        "metrics": metrics,
        "concurrency": concurrency,
        "wall_s": round(wall, 2),
        "items_per_s": round(lines / wall, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on the workload and print its peak RSS."""
    parser = section_parser("bench.memory", __doc__)
    parser.add_argument("--latency", type=float, default=0.02, help="stand-in seconds per call")
    parser.add_argument("--concurrency", type=int, default=64, help="CLI --concurrency")
    parser.add_argument(
        "--metrics", default="coverage,defects,rouge_l,bertscore", help="CLI --metrics"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds before giving up")
    args = parse_section_args(parser, argv)
    with StandInProcess(latency=args.latency) as srv:
        log(f"bonusjudge grade: whole workload, metrics {args.metrics}, c={args.concurrency}")
        row = run_cli(
            srv.base_url, metrics=args.metrics, concurrency=args.concurrency, timeout=args.timeout
        )
        row["server_requests"] = srv.stats().requests
    row["latency_s"] = args.latency
    print(
        f"bonusjudge grade: {row['items']} items in {row['wall_s']} s "
        f"({row['items_per_s']} items/s), peak RSS {row['peak_rss_mb']} MiB"
    )
    write_json(args.json, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
