"""Start-up and per-request overhead of the service and the CLI (issue 20), next to the goals.

Four measures, each in fresh interpreters started as users start them (the ``bonusjudge``
script), against the stand-in judge (:class:`bench.standin.StandInProcess`, its own process):

* **help**: wall time of ``bonusjudge --help`` and of every subcommand's ``--help`` (best and
  median of ``--help-runs``). Goal: under 0.3 s each.
* **serve**: from ``Popen`` of ``bonusjudge serve`` to the first ``/healthz`` 200, the first
  ``/readyz`` answer (and what it says is loading) and the first ``/readyz`` 200; once with the
  stand-in judge (coverage + defects, no encoder) and once with the default configuration (the
  embedded matcher and BERTScore: an encoder to load). Goals: ``/healthz`` within 1 s,
  ``/readyz`` within 4 s.
* **cli**: from ``Popen`` of ``bonusjudge grade`` (stand-in judge, ``--metrics
  coverage,defects``, a fresh cache) to its first result line in the output file. Goal: 2 s.
* **overhead**: ``POST /v1/grade`` (coverage + defects; their two judge calls run concurrently)
  with 1 and 8 requests in flight, beside a *bare* call made from the same client to the same
  stand-in: the very two request bodies the service sends for an item (captured once from the
  product's own transport), posted concurrently, so the bare figure holds one judge latency with
  the stand-in's jitter and queueing at the same load. Service and bare requests alternate in
  rounds, so both see the same machine load. Every service request carries a new item (a new
  response text), on a fresh cache: every one calls the judge. The overhead at a percentile is
  the service's latency minus the bare call's at that percentile. Goals: at 1 in flight median
  under 5 ms; at 8, median under 8 ms and 95th percentile under 20 ms.

  The goal's measure starts the clients of a round all at once, as ``bench/service.py`` (the
  issue's figures) does: with a fixed judge latency they then stay in lock-step, so each wave of
  8 requests reaches the service together and each waits for the ones ahead of it, the strict
  case. ``--steady`` (on by default) adds the same levels with the clients' starts spread over
  one judge latency, as independent clients arrive; it is reported beside, not against, the
  goal.

The machine's load average is recorded beside every figure: on a shared machine, CPU-bound
figures follow the share of the CPU this run got.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    EXAMPLES,
    BenchError,
    log,
    parse_section_args,
    percentile,
    section_parser,
    write_json,
)
from bench.memory import bonusjudge_command
from bench.standin import StandInProcess
from core.processes import free_port

__all__ = [
    "GOALS", "main", "measure_help", "measure_overhead", "measure_serve", "summary_rows",
    "table",
]


_RUNS = itertools.count()
"""Numbers the overhead runs, so that every run's items are new to the service's cache."""

HELP_COMMANDS = ((), ("grade",), ("serve",), ("calibrate",), ("mcq",), ("rubrics",),
                 ("hash-key",))
"""Every ``--help`` the CLI has: the top level and each subcommand ``cli/main.py`` registers."""

GOALS = {
    "help_s": 0.3,
    "healthz_s": 1.0,
    "readyz_s": 4.0,
    "cli_first_result_s": 2.0,
    "c1_p50_ms": 5.0,
    "c8_p50_ms": 8.0,
    "c8_p95_ms": 20.0,
}
"""The issue's goals, in the units of the figures."""


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BONUSJUDGE_")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               BONUSJUDGE_DATA_DIR=str(work / "data"))
    return env


def _load1() -> float:
    return round(os.getloadavg()[0], 2)


# -- --help ----------------------------------------------------------------------------------


def measure_help(runs: int, work: Path) -> list[dict[str, Any]]:
    """Wall seconds of every ``--help`` in a fresh interpreter: best and median of ``runs``.

    Raises:
        BenchError: a ``--help`` failed.
    """
    rows = []
    for command in HELP_COMMANDS:
        times = []
        load = _load1()
        for _ in range(runs):
            started = time.perf_counter()
            done = subprocess.run([*bonusjudge_command(), *command, "--help"], env=_env(work),
                                  capture_output=True, check=False, timeout=60)
            times.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise BenchError(f"bonusjudge {' '.join(command)} --help exited "
                                 f"{done.returncode}: {done.stderr[-500:]!r}")
        rows.append({
            "command": " ".join(("bonusjudge", *command, "--help")),
            "best_s": round(min(times), 3),
            "median_s": round(statistics.median(times), 3),
            "load": [load, _load1()],
        })
    return rows


# -- serve start-up --------------------------------------------------------------------------


def _get(url: str, timeout: float = 2.0) -> tuple[int, str] | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except OSError:
        return None


def stop_service(process: subprocess.Popen[bytes], timeout: float = 30.0) -> int | None:
    """SIGTERM, as a process manager stops it; SIGKILL after ``timeout``. The exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def start_service(
    options: Sequence[str], work: Path, *, timeout: float = 120.0
) -> tuple[subprocess.Popen[bytes], str, dict[str, Any]]:
    """Start ``bonusjudge serve OPTIONS`` and time its start-up until ``/readyz`` is 200.

    Returns:
        The process, its root URL and the start-up figures: ``healthz_s``, ``first_readyz_s``
        and ``first_readyz`` (the first ``/readyz`` body), ``readyz_s`` (the first 200).

    Raises:
        BenchError: the service exited or was not ready within ``timeout`` seconds.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = work / f"serve-{port}.log"
    command = [*bonusjudge_command(), "serve", "--port", str(port), *options]
    started = time.perf_counter()
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                   env=_env(work))
    figures: dict[str, Any] = {"load": _load1()}
    while time.perf_counter() - started < timeout:
        if process.poll() is not None:
            raise BenchError(f"bonusjudge serve exited {process.returncode}: "
                             f"{log_path.read_text(errors='replace')[-1500:]}")
        if "healthz_s" not in figures:
            answer = _get(f"{url}/healthz")
            if answer is not None and answer[0] == 200:
                figures["healthz_s"] = round(time.perf_counter() - started, 3)
        answer = _get(f"{url}/readyz")
        if answer is not None:
            now = round(time.perf_counter() - started, 3)
            if "first_readyz_s" not in figures:
                figures["first_readyz_s"] = now
                figures["first_readyz"] = json.loads(answer[1]) if answer[1] else None
            if answer[0] == 200:
                figures["readyz_s"] = now
                figures.setdefault("healthz_s", now)
                return process, url, figures
        time.sleep(0.01)
    stop_service(process)
    raise BenchError(f"bonusjudge serve was not ready within {timeout:g} s")


def measure_serve(
    label: str, options: Sequence[str], runs: int, work: Path
) -> dict[str, Any]:
    """Start-up figures of ``bonusjudge serve OPTIONS`` over ``runs`` starts (the median run)."""
    starts = []
    for run in range(runs):
        folder = work / f"serve-{label}-{run}"
        folder.mkdir(parents=True)
        process, _, figures = start_service([*options, "--cache-dir", str(folder / "cache")],
                                            folder)
        figures["exit_code"] = stop_service(process)
        starts.append(figures)
    starts.sort(key=lambda f: f["readyz_s"])
    middle = starts[len(starts) // 2]
    return {
        "config": label,
        "runs": len(starts),
        "healthz_s": middle["healthz_s"],
        "first_readyz_s": middle["first_readyz_s"],
        "first_readyz": middle["first_readyz"],
        "readyz_s": middle["readyz_s"],
        "readyz_s_all": [f["readyz_s"] for f in starts],
        "healthz_s_all": [f["healthz_s"] for f in starts],
        "exit_codes": sorted({f["exit_code"] for f in starts}),
        "load": middle["load"],
    }


# -- the CLI's first result ------------------------------------------------------------------


def measure_cli(base_url: str, runs: int, work: Path) -> dict[str, Any]:
    """Seconds from ``Popen`` of ``bonusjudge grade`` to its first result line (median run).

    Raises:
        BenchError: the command failed or wrote no result within 60 s.
    """
    times = []
    load = _load1()
    for run in range(runs):
        folder = work / f"cli-{run}"
        folder.mkdir(parents=True)
        out = folder / "out.jsonl"
        command = [
            *bonusjudge_command(), "grade", str(EXAMPLES), "--out", str(out), "--model",
            "openai/standin", "--api-base", base_url, "--metrics", "coverage,defects",
            "--cache-dir", str(folder / "cache"),
        ]
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   env=_env(folder))
        first = None
        while time.perf_counter() - started < 60:
            if out.is_file() and out.stat().st_size and b"\n" in out.read_bytes():
                first = time.perf_counter() - started
                break
            if process.poll() is not None and not out.is_file():
                break
            time.sleep(0.002)
        _, err = process.communicate(timeout=60)
        if first is None or process.returncode != 0:
            raise BenchError(f"bonusjudge grade exited {process.returncode} "
                             f"(first result {first}): {err[-800:]!r}")
        times.append(first)
    return {"first_result_s": round(statistics.median(times), 3),
            "first_result_s_all": [round(t, 3) for t in times], "load": [load, _load1()]}


# -- overhead per request --------------------------------------------------------------------


def _items(count: int, tag: str) -> list[dict[str, Any]]:
    """``count`` grading requests, each with its own id and response text (a cold cache)."""
    base = [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    out = []
    for n in range(count):
        item = base[n % len(base)]
        out.append({
            "id": f"{item['id']}~{tag}{n}", "question": item["question"],
            "reference": item["answer"], "bonus_points": item["bonus_points"],
            "response": f"{item['response']} ({tag} {n})",
        })
    return out


def judge_bodies(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The two chat-completions bodies the service sends for ``item`` (coverage, defects).

    Captured from the product's own direct transport against a recording stand-in in this
    process, so the bare calls carry exactly what the service's calls carry.
    """
    from bonusjudge_client.wire.grading import GradeRequest
    from judge.config import JudgeConfig
    from judge.engine import Grader
    from standins.openai_server import OpenAIStandIn

    async def capture(base_url: str) -> None:
        config = JudgeConfig(model="openai/standin", api_base=base_url,
                             metrics=("coverage", "defects"), cache=False)
        grader = Grader(config)
        try:
            request = GradeRequest.model_validate({k: v for k, v in item.items() if k != "id"})
            async for _ in grader.grade_many([(item["id"], request)]):
                pass
        finally:
            await grader.aclose()

    with OpenAIStandIn(record_requests=8) as recorder:
        asyncio.run(capture(recorder.base_url))
        bodies = [dict(body) for body in recorder.requests]
    if len(bodies) != 2:
        raise BenchError(f"expected 2 judge calls per item, captured {len(bodies)}")
    return bodies


async def _drive(
    send: Any, count: int, concurrency: int, errors: list[str], spread: float = 0.0
) -> list[float]:
    """Run ``send(n)`` for n in range(count) with ``concurrency`` in flight; the latencies.

    Client ``k`` starts ``k * spread / concurrency`` seconds in: with ``spread`` one judge
    latency, the clients are spread over it as independent clients would be (see ``--steady``).
    """
    latencies: list[float] = []
    next_index = 0

    async def worker(k: int) -> None:
        nonlocal next_index
        await asyncio.sleep(k * spread / concurrency)
        while next_index < count:
            index = next_index
            next_index += 1
            started = time.perf_counter()
            try:
                await send(index)
            except Exception as exc:  # counted and reported, never a latency
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    return latencies


async def measure_overhead(
    url: str, judge_url: str, bodies: list[dict[str, Any]], *, concurrency: int,
    requests: int, rounds: int, spread: float = 0.0,
) -> dict[str, Any]:
    """Service and bare latencies at ``concurrency`` in flight, alternating in ``rounds``.

    ``spread``: seconds over which the clients of a round start (0: all at once, a burst).

    Returns:
        Percentiles (ms) of both sides, the overhead at each, the error count and the load.

    Raises:
        BenchError: more than 1% of the requests failed.
    """
    import aiohttp

    items = _items(requests, f"run{next(_RUNS)}-c{concurrency}-")  # never seen: cold
    per_round = max(concurrency, requests // rounds)
    service: list[float] = []
    bare: list[float] = []
    errors: list[str] = []
    load = _load1()
    connector = aiohttp.TCPConnector(limit=4 * concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        encoded = [json.dumps(body).encode() for body in bodies]
        headers = {"Content-Type": "application/json"}

        async def grade(index: int) -> None:
            async with session.post(f"{url}/v1/grade", json=items[index]) as reply:
                payload = await reply.read()
                if reply.status != 200:
                    raise BenchError(f"HTTP {reply.status}: {payload[:200]!r}")

        async def one(body: bytes) -> None:
            async with session.post(f"{judge_url}/chat/completions", data=body,
                                    headers=headers) as reply:
                payload = await reply.read()
                if reply.status != 200:
                    raise BenchError(f"stand-in HTTP {reply.status}: {payload[:200]!r}")

        async def bare_call(index: int) -> None:
            await asyncio.gather(*(one(body) for body in encoded))

        done = 0
        while done < requests:
            size = min(per_round, requests - done)
            offset = done

            async def graded(index: int, offset: int = offset) -> None:
                await grade(offset + index)

            service += await _drive(graded, size, concurrency, errors, spread)
            bare += await _drive(bare_call, size, concurrency, errors, spread)
            done += size
    if len(errors) > max(1, requests // 100):
        raise BenchError(f"{len(errors)} requests failed; first: {errors[0]}")
    row: dict[str, Any] = {"concurrency": concurrency, "start": "burst" if not spread else
                           "spread", "requests": len(service), "errors": len(errors),
                           "load": [load, _load1()]}
    for q in (50, 95, 99):
        ours, theirs = percentile(service, q), percentile(bare, q)
        row[f"service_p{q}_ms"] = round(1000 * ours, 2)
        row[f"bare_p{q}_ms"] = round(1000 * theirs, 2)
        row[f"overhead_p{q}_ms"] = round(1000 * (ours - theirs), 2)
    return row


async def _overhead_levels(
    args: Any, url: str, judge_url: str, bodies: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    # Warm-up: first connections, lazy paths of the first requests; not timed.
    await measure_overhead(url, judge_url, bodies, concurrency=8, requests=32, rounds=1)
    rows = []
    for concurrency in args.concurrency:
        count = args.requests if concurrency == 1 else args.requests * 2
        log(f"overhead: {count} requests at {concurrency} in flight, beside bare calls")
        rows.append(await measure_overhead(url, judge_url, bodies, concurrency=concurrency,
                                           requests=count, rounds=args.rounds))
        if args.steady and concurrency > 1:
            log(f"overhead: {count} requests at {concurrency} in flight, clients spread out")
            rows.append(await measure_overhead(url, judge_url, bodies, concurrency=concurrency,
                                               requests=count, rounds=args.rounds,
                                               spread=args.latency))
    return rows


def _met(value: float | None, goal: float) -> str:
    return "n/a" if value is None else ("yes" if value < goal else "**no**")


def table(figures: dict[str, Any]) -> list[str]:
    """The section's rows: measure, figure, goal, met (markdown)."""
    rows = ["| Measure | Figure | Goal | Met | load |", "|---|---|---|---|---|"]
    for row in figures.get("help", []):
        rows.append(f"| `{row['command']}` (best / median) | {row['best_s']} / "
                    f"{row['median_s']} s | < {GOALS['help_s']} s | "
                    f"{_met(row['median_s'], GOALS['help_s'])} | {row['load'][0]} |")
    for row in figures.get("serve", []):
        rows.append(f"| `serve` ({row['config']}): first `/healthz` 200 | {row['healthz_s']} s "
                    f"| < {GOALS['healthz_s']} s | {_met(row['healthz_s'], GOALS['healthz_s'])} "
                    f"| {row['load']} |")
        rows.append(f"| `serve` ({row['config']}): first `/readyz` 200 (first answer at "
                    f"{row['first_readyz_s']} s) | {row['readyz_s']} s | < {GOALS['readyz_s']} s "
                    f"| {_met(row['readyz_s'], GOALS['readyz_s'])} | {row['load']} |")
    cli = figures.get("cli")
    if cli:
        rows.append(f"| `grade` (stand-in judge, coverage + defects): first result | "
                    f"{cli['first_result_s']} s | < {GOALS['cli_first_result_s']} s | "
                    f"{_met(cli['first_result_s'], GOALS['cli_first_result_s'])} | "
                    f"{cli['load'][0]} |")
    for row in figures.get("overhead", []):
        c = row["concurrency"]
        goals = [("p50", GOALS["c1_p50_ms"])] if c == 1 else [
            ("p50", GOALS["c8_p50_ms"]), ("p95", GOALS["c8_p95_ms"])]
        extra = row.get("start") == "spread"
        how = (", clients spread over one judge latency (steady state; not the goal's measure)"
               if extra else "")
        for q, goal in goals:
            rows.append(
                f"| `POST /v1/grade` overhead, {c} in flight{how}, {q} (service "
                f"{row[f'service_{q}_ms']} ms, bare {row[f'bare_{q}_ms']} ms, {row['requests']} "
                f"requests) | {row[f'overhead_{q}_ms']} ms | < {goal:g} ms | "
                f"{'n/a' if extra else _met(row[f'overhead_{q}_ms'], goal)} | "
                f"{row['load'][0]} |")
    return rows


def summary_rows(figures: dict[str, Any]) -> list[str]:
    """The goals' rows for ``bench/README.md``'s summary table (``| # | Measure | ... |``)."""
    rows = []
    helps = figures.get("help", [])
    if helps:
        worst = max(helps, key=lambda row: row["median_s"])
        rows.append(
            f"| 20 | Slowest `--help` of {len(helps)} (median of runs): `{worst['command']}` | "
            f"{worst['median_s']} s (load {worst['load'][0]}) | < {GOALS['help_s']} s | "
            f"{_met(worst['median_s'], GOALS['help_s'])} |")
    for row in figures.get("serve", []):
        rows.append(
            f"| 20 | `serve` ({row['config']}): first `/healthz`; first `/readyz` 200 | "
            f"{row['healthz_s']} s; {row['readyz_s']} s (load {row['load']}) | "
            f"< {GOALS['healthz_s']} s; < {GOALS['readyz_s']} s | "
            f"{_met(row['healthz_s'], GOALS['healthz_s'])}; "
            f"{_met(row['readyz_s'], GOALS['readyz_s'])} |")
    cli = figures.get("cli")
    if cli:
        rows.append(
            f"| 20 | `grade` first result (stand-in judge, no encoder) | {cli['first_result_s']} s "
            f"(load {cli['load'][0]}) | < {GOALS['cli_first_result_s']} s | "
            f"{_met(cli['first_result_s'], GOALS['cli_first_result_s'])} |")
    for row in figures.get("overhead", []):
        if row.get("start") == "spread":
            continue
        if row["concurrency"] == 1:
            figure, goal = f"p50 {row['overhead_p50_ms']} ms", f"p50 < {GOALS['c1_p50_ms']:g} ms"
            met = _met(row["overhead_p50_ms"], GOALS["c1_p50_ms"])
        else:
            figure = f"p50 {row['overhead_p50_ms']} ms, p95 {row['overhead_p95_ms']} ms"
            goal = f"p50 < {GOALS['c8_p50_ms']:g} ms, p95 < {GOALS['c8_p95_ms']:g} ms"
            ok = (row["overhead_p50_ms"] < GOALS["c8_p50_ms"]
                  and row["overhead_p95_ms"] < GOALS["c8_p95_ms"])
            met = "yes" if ok else "**no**"
        rows.append(
            f"| 20 | `POST /v1/grade` overhead over a bare judge call, {row['concurrency']} in "
            f"flight | {figure} (load {row['load'][0]}) | {goal} | {met} |")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Measure start-up and per-request overhead and print the table next to the goals."""
    parser = section_parser("bench.overhead", __doc__)
    parser.add_argument("--latency", type=float, default=0.1, help="stand-in seconds per call")
    parser.add_argument("--requests", type=int, default=150,
                        help="requests at 1 in flight (twice as many at higher levels)")
    parser.add_argument("--rounds", type=int, default=4, help="service/bare alternations")
    parser.add_argument(
        "--steady", action=argparse.BooleanOptionalAction, default=True,
        help="also measure levels above 1 with the clients' starts spread over one judge "
        "latency (independent clients) besides all at once (the goal's measure)",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--help-runs", type=int, default=5, help="runs per --help")
    parser.add_argument("--serve-runs", type=int, default=3, help="starts per configuration")
    parser.add_argument("--cli-runs", type=int, default=3, help="runs of bonusjudge grade")
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["help", "serve", "serve-default", "cli", "overhead"])
    args = parse_section_args(parser, argv)
    figures: dict[str, Any] = {"latency_s": args.latency, "goals": GOALS}
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as folder:
        work = Path(folder)
        if "help" not in args.skip:
            log("--help of every command")
            figures["help"] = measure_help(args.help_runs, work)
        with StandInProcess(latency=args.latency) as srv:
            judge = ["--model", "openai/standin", "--api-base", srv.base_url,
                     "--metrics", "coverage,defects"]
            figures["serve"] = []
            if "serve" not in args.skip:
                log("serve start-up, stand-in judge")
                figures["serve"].append(measure_serve("stand-in judge, coverage + defects",
                                                      judge, args.serve_runs, work))
            if "serve-default" not in args.skip:
                log("serve start-up, default configuration (encoder)")
                figures["serve"].append(measure_serve(
                    "default: embedded matcher + BERTScore", [], max(1, args.serve_runs - 1),
                    work))
            if "cli" not in args.skip:
                log("bonusjudge grade: first result")
                figures["cli"] = measure_cli(srv.base_url, args.cli_runs, work)
            if "overhead" not in args.skip:
                bodies = judge_bodies(_items(1, "capture-")[0])
                run = work / "overhead"
                run.mkdir()
                process, url, _ = start_service(
                    [*judge, "--cache-dir", str(run / "cache"), "--concurrency", "64"], run)
                try:
                    figures["overhead"] = asyncio.run(
                        _overhead_levels(args, url, srv.base_url, bodies))
                finally:
                    stop_service(process)
    print("\n".join(table(figures)))
    write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
