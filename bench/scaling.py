"""Cost growth: items/s and peak memory when the workload is repeated 1x, 4x, 16x.

Each scale runs in its own interpreter (``run_all`` starts one per scale), because peak RSS only
ever grows within a process. Repeats get new ids and a changed response (``load_requests``), so
each copy costs a real judge call rather than a cache hit. The stand-in answers in ``--latency``
seconds (default 20 ms) and the grader runs at ``--concurrency`` (default 128): the point is the
shape of the curve (time linear in items, memory flat, since ``grade_many`` keeps at most about
2 x concurrency items in flight and results are consumed as they stream out), not the absolute
rate.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    load_requests,
    log,
    parse_section_args,
    peak_rss_mb,
    section_parser,
    write_json,
)
from bench.standin import StandInProcess
from bench.throughput import grade_run

__all__ = ["main"]


async def _run(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    items = load_requests(limit=args.base, repeat=args.repeat)
    work = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    # Warm-up items are changed copies, so none of their cache keys is in the measured set.
    warm = [
        (f"{item_id}~warmup", request.model_copy(update={"response": request.response + " (w)"}))
        for item_id, request in load_requests(limit=16)
    ]
    await grade_run(warm, base_url, 16, work / "warmup-cache")
    rss_before = peak_rss_mb()
    log(f"scale x{args.repeat}: {len(items)} items, c={args.concurrency}, {args.latency:g} s")
    row = await grade_run(items, base_url, args.concurrency, work / "cache")
    row.update(
        repeat=args.repeat,
        base_items=len(items) // args.repeat,
        concurrency=args.concurrency,
        latency_s=args.latency,
        peak_rss_before_mb=round(rss_before, 1),
        peak_rss_mb=round(peak_rss_mb(), 1),
        s_per_1000_items=round(1000 * row["wall_s"] / len(items), 2),
    )
    return row


def main(argv: Sequence[str] | None = None) -> int:
    """Grade the repeated workload once and print items/s and peak RSS."""
    parser = section_parser("bench.scaling", __doc__)
    parser.add_argument("--repeat", type=int, default=1, help="copies of the workload")
    parser.add_argument(
        "--base", type=int, default=None, help="items of the workload per copy (default: all)"
    )
    parser.add_argument("--latency", type=float, default=0.02, help="stand-in seconds per call")
    parser.add_argument("--concurrency", type=int, default=128, help="grader concurrency")
    args = parse_section_args(parser, argv, litellm=True)
    with StandInProcess(latency=args.latency) as srv:
        row = asyncio.run(_run(args, srv.base_url))
    print(
        f"x{row['repeat']}: {row['items']} items in {row['wall_s']} s = {row['items_per_s']} "
        f"items/s; peak RSS {row['peak_rss_mb']} MiB (after warm-up {row['peak_rss_before_mb']})"
    )
    write_json(args.json, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
