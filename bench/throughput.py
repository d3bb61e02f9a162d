"""Cold throughput by concurrency, the public scorer's sequential loop, and the warm re-grade.

Every run grades CharToM items with coverage + defects against the stand-in judge
(:class:`bench.standin.StandInProcess`, a fixed latency per call, in its own process):

* **cold**: ``Grader(cfg, cache=JudgeCache(<fresh dir>)).grade_many(items)`` at each concurrency.
  The two judge calls of one item run concurrently, so an item occupies one concurrency slot for
  one latency and the ideal is ``concurrency / latency`` items/s (not ``/ (2 x latency)``).
* **public scorer**: the loop of CharToM-QA's ``evaluate_en.py`` re-implemented here: for each
  item a coverage call, then a defect call, each a plain ``litellm.completion``, one at a time.
* **warm**: the concurrency-64 run again on the same cache folder, with a new ``Grader``: provider
  calls (target 0), wall time, and the cache's size on disk.

Before timing, 16 items outside the measured set (copies with a changed response) go through the
same path, so one-time lazy imports of litellm/openai/instructor are not charged to the first run;
then what is loaded is frozen out of the cyclic collector's reach, as ``bonusjudge grade`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    Timer,
    dir_size_mb,
    load_requests,
    log,
    parse_section_args,
    section_parser,
    write_json,
)
from bench.standin import StandInProcess
from core import markdown

__all__ = ["grade_run", "main", "public_scorer_run"]

_WARMUP_ITEMS = 16

# The public scorer's prompts (protocol.md, Tables 16 and 17): a system message with the expert
# instruction and a user message with the fields, sent to the judge as plain text.
_COVERAGE_SYSTEM = (
    "Assuming you are an expert in psychology and literary. Based on your profound understanding "
    "of the story in the book {book_name}, assess the quality of the response to the given "
    "[Question] according to the provided [Reference Answer] and corresponding [Bonus Points]. "
    "You are supposed to indicate which bonus points are explicitly or implicitly included in "
    "the response."
)
_COVERAGE_USER = (
    "[Question]: {question}\n[Reference Answer]: {reference}\n[Bonus Points]: {points}\n"
    "[Response]: {response}\nNote that (1) The reference answer and bonus points must be the core "
    "basis of assessment. (2) The response may be similar to a certain bonus point but with "
    "different wording. As long as it expresses a similar meaning to this bonus point with no "
    "error, the point can be considered to be validly included. (3) If the response does not "
    "include any bonus point, just output '[Included Bonus Points]: None'"
)
_DEFECT_SYSTEM = (
    "Assuming you are an expert in psychology and literary. Based on your profound understanding "
    "of the story in the book {book_name}, according to the [Story Plot] and [Reference Answer], "
    "you are supposed to detect whether there is any defect existing in the [Response] to the "
    "[Question]."
)
_DEFECT_USER = (
    "[Story Plot]: {plot}\n[Question]: {question}\n[Reference Answer]: {reference}\n"
    "[Response]: {response}\nNote that (1) The reference answer and story plot must be the core "
    "basis for detecting defects in the response. (2) Defects refers to factual or logical errors "
    "in the response. (3) Do not reluctantly find defects when the response is totally "
    "reasonable. If there is no defect, just output '[Defect]: None'"
)
_INCLUDED = re.compile(r"\[Included Bonus Points\]:\s*(.*)")


def _config(base_url: str, concurrency: int, transport: str) -> Any:
    from judge.config import JudgeConfig

    return JudgeConfig(
        model="openai/standin",
        api_base=base_url,
        metrics=("coverage", "defects"),
        concurrency=concurrency,
        transport=transport,
    )


async def grade_run(
    items: Sequence[tuple[str, Any]],
    base_url: str,
    concurrency: int,
    cache_dir: Path,
    *,
    transport: str = "auto",
    keep_verdicts: bool = False,
) -> dict[str, Any]:
    """Grade ``items`` once with a new ``Grader`` on ``cache_dir``; timings and counters.

    Args:
        items: (id, GradeRequest) pairs.
        base_url: The stand-in's ``/v1`` URL.
        concurrency: The engine's concurrency limit.
        cache_dir: The judge cache's folder (new for a cold run, reused for a warm one).
        transport: ``JudgeConfig.transport`` (``auto``, ``direct`` or ``litellm``).
        keep_verdicts: Also return ``verdicts`` (per item: status, covered points, penalized),
            to compare what two runs decided.

    Returns:
        ``items``, ``wall_s``, ``cpu_s`` (this process), ``items_per_s``, ``provider_calls``,
        ``cache_hits``, ``statuses`` (scored/unscored counts), and ``verdicts`` when asked.
    """
    from judge.cache import JudgeCache
    from judge.engine import Grader

    cache = JudgeCache(cache_dir)
    grader = Grader(_config(base_url, concurrency, transport), cache=cache)
    statuses: Counter[str] = Counter()
    verdicts: dict[str, Any] = {}
    try:
        with Timer() as timer:
            async for result in grader.grade_many(items):
                statuses[result.status] += 1
                if keep_verdicts:
                    coverage, defects = result.coverage, result.defects
                    verdicts[result.id] = (
                        result.status,
                        coverage.covered if coverage else None,
                        defects.penalized if defects else None,
                    )
    finally:
        await grader.aclose()
        cache.close()
    count = sum(statuses.values())
    if count != len(items):
        raise RuntimeError(f"graded {count} of {len(items)} items")
    row: dict[str, Any] = {
        "items": count,
        "wall_s": round(timer.wall, 3),
        "cpu_s": round(timer.cpu, 3),
        "items_per_s": round(count / timer.wall, 2),
        "provider_calls": grader.stats.provider_calls,
        "cache_hits": grader.stats.cache_hits,
        "statuses": dict(statuses),
    }
    if keep_verdicts:
        row["verdicts"] = verdicts
    return row


def _warmup_items(items: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [
        (f"{item_id}~warmup", request.model_copy(update={"response": request.response + " (w)"}))
        for item_id, request in items[-_WARMUP_ITEMS:]
    ]


def public_scorer_run(items: Sequence[tuple[str, Any]], base_url: str) -> dict[str, Any]:
    """The public scorer's loop: per item a coverage call then a defect call, sequentially.

    Each call is one plain ``litellm.completion`` (temperature 0.2, as the scorer sends to
    gpt-4o); replies are parsed just enough to prove they arrived.
    """
    import litellm

    calls = 0
    parsed = 0
    with Timer() as timer:
        for _, request in items:
            points = "\n".join(f"{i}. {p}" for i, p in enumerate(request.bonus_points or [], 1))
            fields = {
                "book_name": request.book_name or "",
                "question": request.question,
                "reference": request.reference,
                "points": points,
                "response": request.response,
                "plot": request.context or "",
            }
            prompts = ((_COVERAGE_SYSTEM, _COVERAGE_USER), (_DEFECT_SYSTEM, _DEFECT_USER))
            for system, user in prompts:
                reply = litellm.completion(
                    model="openai/standin",
                    api_base=base_url,
                    api_key="sk-bench",
                    temperature=0.2,
                    messages=[
                        {"role": "system", "content": system.format(**fields)},
                        {"role": "user", "content": user.format(**fields)},
                    ],
                )
                calls += 1
                text = str(reply.choices[0].message.content or "")
                if _INCLUDED.search(text) or "[Defect" in text:
                    parsed += 1
    return {
        "items": len(items),
        "calls": calls,
        "parsed": parsed,
        "wall_s": round(timer.wall, 3),
        "cpu_s": round(timer.cpu, 3),
        "items_per_s": round(len(items) / timer.wall, 3),
    }


async def _cold_and_warm(args: argparse.Namespace, srv: StandInProcess) -> dict[str, Any]:
    items = load_requests()
    work = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    log(f"warm-up: {_WARMUP_ITEMS} items outside the measured set")
    await grade_run(_warmup_items(items), srv.base_url, 16, work / "warmup-cache")
    gc.freeze()  # as `bonusjudge grade` does once loaded (cli/grade/local.py)
    cold: list[dict[str, Any]] = []
    warm: dict[str, Any] | None = None
    for concurrency in args.concurrency:
        subset = args.subset.get(concurrency)
        run_items = items[:subset] if subset else items
        cache_dir = work / f"cache-c{concurrency}"
        srv.reset_stats()
        log(f"cold c={concurrency}: {len(run_items)} items at {args.latency:g} s latency")
        row = await grade_run(run_items, srv.base_url, concurrency, cache_dir)
        stats = srv.stats()
        ideal = concurrency / args.latency
        row.update(
            concurrency=concurrency,
            latency_s=args.latency,
            ideal_items_per_s=round(ideal, 2),
            pct_of_ideal=round(100 * row["items_per_s"] / ideal, 1),
            server_requests=stats.requests,
            max_in_flight=stats.max_in_flight,
            cpu_ms_per_call=round(1000 * row["cpu_s"] / max(1, row["provider_calls"]), 2),
            subset=bool(subset),
        )
        log(f"  -> {row['items_per_s']} items/s ({row['pct_of_ideal']}% of ideal)")
        cold.append(row)
        if concurrency == args.warm_concurrency and not subset:
            srv.reset_stats()
            log(f"warm re-grade c={concurrency} on the same cache")
            started = time.perf_counter()
            warm = await grade_run(run_items, srv.base_url, concurrency, cache_dir)
            warm["wall_with_open_s"] = round(time.perf_counter() - started, 3)
            warm["server_requests"] = srv.stats().requests
            warm["cache_mb"] = round(dir_size_mb(cache_dir), 2)
            warm["concurrency"] = concurrency
            log(f"  -> {warm['wall_s']} s, {warm['server_requests']} provider requests")
    return {"cold": cold, "warm": warm}


def _parse_subsets(specs: Sequence[str]) -> dict[int, int]:
    out: dict[int, int] = {}
    for spec in specs:
        concurrency, _, count = spec.partition("=")
        try:
            out[int(concurrency)] = int(count)
        except ValueError:
            raise SystemExit(f"--subset: expected C=N (e.g. 1=60), got {spec!r}") from None
    return out


def _table(payload: dict[str, Any]) -> str:
    header = ("concurrency", "items", "items/s", "ideal items/s", "% of ideal", "max in flight",
              "CPU ms/call")
    lines = markdown.table(header, (
        (row["concurrency"], f"{row['items']}{' (subset)' if row['subset'] else ''}",
         row["items_per_s"], row["ideal_items_per_s"], row["pct_of_ideal"], row["max_in_flight"],
         row["cpu_ms_per_call"])
        for row in payload["cold"]
    ))
    public = payload.get("public_scorer")
    if public:
        lines.append(
            f"\npublic scorer's loop: {public['items_per_s']} items/s over {public['items']} items"
        )
    warm = payload.get("warm")
    if warm:
        lines.append(
            f"warm re-grade: {warm['wall_s']} s, {warm['server_requests']} provider requests, "
            f"cache {warm['cache_mb']} MiB"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cold / public-scorer / warm benchmarks and print their table."""
    parser = section_parser("bench.throughput", __doc__)
    parser.add_argument("--latency", type=float, default=0.2, help="stand-in seconds per call")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 8, 32, 64, 128], help="levels to run"
    )
    parser.add_argument(
        "--subset", nargs="*", default=["1=60", "8=300"], metavar="C=N",
        help="grade only the first N items at concurrency C (low levels take minutes)",
    )
    parser.add_argument("--warm-concurrency", type=int, default=64, help="level re-graded warm")
    parser.add_argument(
        "--public-items", type=int, default=40,
        help="items for the public scorer's sequential loop (0: skip)",
    )
    args = parse_section_args(parser, argv, litellm=True)
    args.subset = _parse_subsets(args.subset)
    with StandInProcess(latency=args.latency) as srv:
        payload: dict[str, Any] = asyncio.run(_cold_and_warm(args, srv))
        if args.public_items:
            items = load_requests(limit=args.public_items)
            log(f"public scorer's loop: {len(items)} items, 2 sequential calls each")
            payload["public_scorer"] = public_scorer_run(items, srv.base_url)
            payload["public_scorer"]["latency_s"] = args.latency
    print(_table(payload))
    write_json(args.json, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
