"""The two transports side by side: cold throughput, CPU per judge call, and the public scorer.

One run, one stand-in judge (:class:`bench.standin.StandInProcess`, a fixed latency per call, in
its own process), the whole workload, coverage + defects, a fresh cache per run. For each
concurrency it grades the workload through ``transport="direct"`` (``judge.providers.direct``) and
through
``transport="litellm"`` (instructor over litellm), then runs the public scorer's sequential loop
(``bench.throughput.public_scorer_run``) against the same stand-in, so every figure of the table
was taken on the same machine under the same load.

Two limits are reported, because the engine's ``concurrency`` counts items and an item's
coverage and defect calls run concurrently (the stand-in sees 2 x concurrency requests in
flight):

* the engine's limit, ``concurrency / latency`` items/s: an item holds one slot for one latency;
* the issue's limit, ``concurrency / (2 x latency)`` items/s: ``concurrency`` calls in flight,
  the basis on which peer libraries were compared (``../shared/docs/throughput-anchors.md``).

Each level and transport runs ``--repeat`` times, interleaved, and the median run (by items/s) is
reported with the others' rates beside it: the machine is shared, and a single run follows the
load of its own seconds. CPU ms per judge call is this process's CPU over the run divided by the
judge requests it sent;
the stand-in's CPU per call is reported beside it (its process shares the machine's cores). Both
transports must give the same results: the run says whether they did (status, covered points and
defect verdict per item). After the warm-up the process freezes what it has loaded out of the
cyclic collector's reach (``gc.freeze()``), as ``bonusjudge grade`` does.
"""

from __future__ import annotations

import asyncio
import gc
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    load_requests,
    log,
    machine,
    parse_section_args,
    section_parser,
    write_json,
)
from bench.standin import StandInProcess
from bench.throughput import grade_run, public_scorer_run
from core import markdown

__all__ = ["main"]

_WARMUP_ITEMS = 16
TRANSPORTS = ("direct", "litellm")


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (Linux ``/proc``), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _warmup(items: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    # Changed copies of the last items: lazy imports and first connections are not timed.
    return [
        (f"{item_id}~warmup", request.model_copy(update={"response": request.response + " (w)"}))
        for item_id, request in items[-_WARMUP_ITEMS:]
    ]


async def _runs(
    args: Any, srv: StandInProcess, items: Sequence[tuple[str, Any]], work: Path
) -> list[dict[str, Any]]:
    for transport in TRANSPORTS:
        log(f"warm-up: {_WARMUP_ITEMS} items over {transport}")
        await grade_run(
            _warmup(items), srv.base_url, 16, work / f"warmup-{transport}", transport=transport
        )
    gc.freeze()  # as `bonusjudge grade` does once loaded (cli/grade/local.py)
    rows: list[dict[str, Any]] = []
    for concurrency in args.concurrency:
        verdicts: dict[str, list[Any]] = {}
        runs: dict[str, list[dict[str, Any]]] = {transport: [] for transport in TRANSPORTS}
        for repeat, transport in [(r, t) for r in range(args.repeat) for t in TRANSPORTS]:
            srv.reset_stats()
            server_cpu = process_cpu_s(srv.pid) if srv.pid is not None else None
            load_before = os.getloadavg()[0]
            log(f"c={concurrency} {transport}: {len(items)} items at {args.latency:g} s/call")
            row = await grade_run(
                items, srv.base_url, concurrency, work / f"c{concurrency}-{transport}-{repeat}",
                transport=transport, keep_verdicts=True,
            )
            stats = srv.stats()
            server_after = process_cpu_s(srv.pid) if srv.pid is not None else None
            calls = max(1, row["provider_calls"])
            engine_limit = concurrency / args.latency
            issue_limit = concurrency / (2 * args.latency)
            verdicts.setdefault(transport, []).append(row.pop("verdicts"))
            row.update(
                transport=transport,
                concurrency=concurrency,
                latency_s=args.latency,
                engine_limit=round(engine_limit, 1),
                pct_of_engine_limit=round(100 * row["items_per_s"] / engine_limit, 1),
                issue_limit=round(issue_limit, 1),
                pct_of_issue_limit=round(100 * row["items_per_s"] / issue_limit, 1),
                cpu_ms_per_call=round(1000 * row["cpu_s"] / calls, 2),
                standin_cpu_ms_per_call=(
                    None if server_cpu is None or server_after is None
                    else round(1000 * (server_after - server_cpu) / calls, 2)
                ),
                server_requests=stats.requests,
                max_in_flight=stats.max_in_flight,
                load=[round(load_before, 2), round(os.getloadavg()[0], 2)],
            )
            log(f"  -> {row['items_per_s']} items/s, {row['cpu_ms_per_call']} CPU ms/call")
            runs[transport].append(row)
        first = verdicts["direct"][0]
        same = all(run == first for runs_ in verdicts.values() for run in runs_)
        for transport in TRANSPORTS:
            # The median run: on a shared machine one run follows the load of its seconds.
            done = sorted(runs[transport], key=lambda r: r["items_per_s"])
            row = done[len(done) // 2]
            row["items_per_s_all"] = [r["items_per_s"] for r in runs[transport]]
            row["same_results"] = same
            rows.append(row)
    return rows


def _table(payload: dict[str, Any]) -> str:
    public = payload["public_scorer"]
    header = (
        "concurrency", "transport", "items/s, median (all runs)", "% of c/latency",
        "% of c/(2 x latency)", f"x public scorer ({public['items_per_s']} items/s)",
        "CPU ms/call", "stand-in CPU ms/call", "max in flight", "same results",
    )
    rows = (
        (
            row["concurrency"], row["transport"],
            f"{row['items_per_s']} ({', '.join(f'{rate:g}' for rate in row['items_per_s_all'])})",
            f"{row['pct_of_engine_limit']} ({row['engine_limit']:g})",
            f"{row['pct_of_issue_limit']} ({row['issue_limit']:g})",
            f"{row['items_per_s'] / public['items_per_s']:.1f}x",
            row["cpu_ms_per_call"], row["standin_cpu_ms_per_call"], row["max_in_flight"],
            "yes" if row["same_results"] else "**no**",
        )
        for row in payload["runs"]
    )
    return "\n".join(markdown.table(header, rows))


def main(argv: Sequence[str] | None = None) -> int:
    """Run both transports and the public scorer against one stand-in; print their table.

    Args:
        argv: Command-line arguments (see ``--help``).

    Returns:
        The exit status.
    """
    parser = section_parser("bench.transport", __doc__)
    parser.add_argument("--latency", type=float, default=0.1, help="stand-in seconds per call")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[64, 128], help="levels to run"
    )
    parser.add_argument("--items", type=int, default=None, help="first N items (default: all)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per transport and level (the median is kept)"
    )
    parser.add_argument(
        "--public-items", type=int, default=40,
        help="items for the public scorer's sequential loop (latency-bound: 2 calls per item)",
    )
    args = parse_section_args(parser, argv, litellm=True)
    items = load_requests(limit=args.items)
    started = machine()
    work = Path(tempfile.mkdtemp(prefix="bench-transport-"))
    with StandInProcess(latency=args.latency) as srv:
        runs = asyncio.run(_runs(args, srv, items, work))
        log(f"public scorer's loop: {args.public_items} items, 2 sequential calls each")
        public = public_scorer_run(items[: args.public_items], srv.base_url)
        public["latency_s"] = args.latency
    payload: dict[str, Any] = {
        "runs": runs,
        "public_scorer": public,
        "workload_items": len(items),
        "machine_at_start": started,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print(_table(payload))
    write_json(args.json, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
