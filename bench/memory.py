"""Peak memory of the command line: ``bonusjudge grade`` on the whole workload, in a subprocess.

The CLI grades the workload with every metric (coverage, defects, ROUGE-L and BERTScore: the
heaviest configuration, since BERTScore loads torch and the encoder), once per run of ``--runs``:

* ``standin:N``: the LLM judge is the stand-in (an OpenAI-compatible server in its own process),
  so litellm and the provider stack are loaded too;
* ``embedded:N``: the default judge, the embedded matcher (coverage from the matcher, defects
  not assessed), so nothing but the encoder and the metrics is loaded.

``N`` is the number of copies of the workload in the input file (copy ``k >= 1`` gets the id
``<id>~k`` and a response ending in `` (copy k)``, so it costs what a new item costs, never a
cache hit); the file is written to a temporary folder. Each run's peak RSS is the child's own
``ru_maxrss``, read with ``os.wait4`` on its pid, so neither this process nor the stand-in's
process is counted. Growth = peak RSS at the largest ``N`` over the smallest, per judge (the
issue's goal: within +10% from 1x to 16x).
"""

from __future__ import annotations

import json
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

__all__ = ["bonusjudge_command", "main", "repeated_workload", "run_cli", "run_measured"]


def bonusjudge_command() -> list[str]:
    """How to start the CLI: the venv's ``bonusjudge`` script, else ``python -m cli``."""
    script = Path(sys.executable).with_name("bonusjudge")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "cli"]


def run_measured(command: list[str], work: Path, *, timeout: float, label: str) -> dict[str, Any]:
    """Run ``command`` (stdout and stderr to files in ``work``); its wall time and own peak RSS.

    Raises:
        BenchError: The command failed or ran past ``timeout`` seconds.
    """
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
                raise BenchError(f"{label} ran past {timeout:g} s (see {work})")
            time.sleep(0.2)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)  # wait4 reaped it, not Popen
    if process.returncode != 0:
        tail = (work / "stderr.txt").read_text(errors="replace")[-800:]
        raise BenchError(f"{label} exited {process.returncode}: {tail}")
    return {
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def repeated_workload(repeat: int, folder: Path) -> Path:
    """The workload file itself (``repeat`` 1), or ``repeat`` copies of it written to ``folder``.

    Raises:
        BenchError: ``repeat`` is below 1.
    """
    source = workload_path()
    if repeat < 1:
        raise BenchError(f"repeat must be at least 1, got {repeat}")
    if repeat == 1:
        return source
    lines = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line]
    target = folder / f"workload_x{repeat}.jsonl"
    with open(target, "w", encoding="utf-8") as handle:
        for copy in range(repeat):
            for number, obj in enumerate(lines, start=1):
                if copy:
                    base = str(obj.get("id") or number)
                    obj = {
                        **obj,
                        "id": f"{base}~{copy}",
                        "response": f"{obj.get('response', '')} (copy {copy})",
                    }
                handle.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return target


def run_cli(
    base_url: str | None, *, metrics: str, concurrency: int, timeout: float, repeat: int = 1
) -> dict[str, Any]:
    """Grade the workload (``repeat`` copies) with ``bonusjudge grade``: wall time, peak RSS.

    Args:
        base_url: The stand-in's URL (the judge is ``openai/standin``), or None for the
            default embedded matcher.
        metrics: The CLI's ``--metrics``.
        concurrency: The CLI's ``--concurrency``.
        timeout: Seconds before giving up.
        repeat: Copies of the workload in the input.

    Raises:
        BenchError: The CLI failed or ran past ``timeout`` seconds.
    """
    work = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    source = repeated_workload(repeat, work)
    judge = ["--model", "openai/standin", "--api-base", base_url] if base_url else []
    command = [
        *bonusjudge_command(),
        "grade",
        str(source),
        "--out",
        str(work / "out.jsonl"),
        *judge,
        "--metrics",
        metrics,
        "--cache-dir",
        str(work / "cache"),
        "--concurrency",
        str(concurrency),
        "--quiet",
        "--summary",
        str(work / "summary.json"),
    ]
    row = run_measured(command, work, timeout=timeout, label="bonusjudge grade")
    with open(work / "out.jsonl", encoding="utf-8") as results:
        lines = sum(1 for _ in results)
    if source != workload_path():
        source.unlink()
    return {
        "judge": "standin" if base_url else "embedded",
        "repeat": repeat,
        "items": lines,
        "metrics": metrics,
        "concurrency": concurrency,
        **row,
        "items_per_s": round(lines / row["wall_s"], 2),
    }


def _parse_runs(values: Sequence[str]) -> list[tuple[str, int]]:
    runs = []
    for value in values:
        judge, _, repeat = value.partition(":")
        if judge not in ("standin", "embedded") or not repeat.isdigit() or int(repeat) < 1:
            raise BenchError(f"--runs: expected standin:N or embedded:N, got {value!r}")
        runs.append((judge, int(repeat)))
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on the workload (each run of ``--runs``) and print its peak RSS."""
    parser = section_parser("bench.memory", __doc__)
    parser.add_argument("--latency", type=float, default=0.02, help="stand-in seconds per call")
    parser.add_argument("--concurrency", type=int, default=64, help="CLI --concurrency")
    parser.add_argument(
        "--metrics", default="coverage,defects,rouge_l,bertscore", help="CLI --metrics"
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["standin:1", "embedded:1", "embedded:16"],
        help="judge:copies, judge = standin or embedded",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    args = parse_section_args(parser, argv)
    runs = _parse_runs(args.runs)
    rows: list[dict[str, Any]] = []
    for judge, repeat in runs:
        log(
            f"bonusjudge grade: workload x{repeat}, judge {judge}, metrics {args.metrics}, "
            f"c={args.concurrency}, load {os.getloadavg()[0]:.2f}"
        )
        load_before = [round(x, 2) for x in os.getloadavg()]
        if judge == "standin":
            with StandInProcess(latency=args.latency) as srv:
                row = run_cli(
                    srv.base_url,
                    metrics=args.metrics,
                    concurrency=args.concurrency,
                    timeout=args.timeout,
                    repeat=repeat,
                )
                row["server_requests"] = srv.stats().requests
            row["latency_s"] = args.latency
        else:
            row = run_cli(
                None,
                metrics=args.metrics,
                concurrency=args.concurrency,
                timeout=args.timeout,
                repeat=repeat,
            )
        row["load_before"] = load_before
        rows.append(row)
        print(
            f"bonusjudge grade ({judge}, x{repeat}): {row['items']} items in {row['wall_s']} s "
            f"({row['items_per_s']} items/s), peak RSS {row['peak_rss_mb']} MiB, "
            f"load {load_before[0]} -> {row['load_after'][0]}"
        )
    growth: dict[str, float] = {}
    for judge in ("standin", "embedded"):
        mine = sorted((r for r in rows if r["judge"] == judge), key=lambda r: r["repeat"])
        if len(mine) >= 2:
            first, last = mine[0], mine[-1]
            growth[judge] = round(100 * (last["peak_rss_mb"] / first["peak_rss_mb"] - 1), 1)
            print(
                f"{judge}: peak RSS x{first['repeat']} -> x{last['repeat']}: "
                f"{first['peak_rss_mb']} -> {last['peak_rss_mb']} MiB ({growth[judge]:+}%)"
            )
    # The first stand-in run keeps the old top-level keys, which the README's table reads.
    first_standin = next((r for r in rows if r["judge"] == "standin"), rows[0])
    write_json(args.json, {**first_standin, "runs": rows, "growth_pct": growth})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
