"""A capped run's spend against its cap, and the resume that grades the rest (issue 32.2).

For each cap (a share of the workload's estimated cost, ``judge.estimate``): a run with
``Grader.grade_many`` under a ``judge.budget`` cap, as ``bonusjudge grade --max-cost`` runs it,
against the strict stand-in (tiktoken ``o200k_base`` usage, 0.1 s per call, concurrency 8),
each from an empty cache; what it spent is the stand-in's own token counts at litellm's price
of gpt-4o-mini. Then the same workload with no cap, resuming from the capped run's cache: the
calls it sent, and whether any request was sent twice (the stand-in's recorded bodies). The
baseline, in the same run: the workload uncapped from an empty cache.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    load_requests,
    log,
    parse_section_args,
    print_table,
    section_parser,
    write_json,
)

MODEL = "openai/gpt-4o-mini"
CONCURRENCY = 8
SHARES = (0.25, 0.5, 0.75)


async def _grade(entries: list[tuple[str, Any]], base_url: str, cache_dir: Path,
                 cap: float | None) -> dict[str, Any]:
    """One run, capped at ``cap`` USD (None: no cap); its results' counts and the cap's books."""
    from judge.budget import BUDGET, Budget, Cap
    from judge.cache import JudgeCache
    from judge.config import JudgeConfig
    from judge.engine import Grader
    from judge.estimate import model_prices, request_cost

    config = JudgeConfig(model=MODEL, api_base=base_url, metrics=("coverage", "defects"),
                         concurrency=CONCURRENCY)
    prices = model_prices(MODEL)
    assert prices is not None
    cache = JudgeCache(cache_dir)
    grader = Grader(config, cache=cache)
    budget = None
    if cap is not None:
        budget = Budget([Cap("--max-cost", max_cost=cap)], request_cost(prices), prices)
        BUDGET.set(budget)
    scored = capped = 0
    try:
        async for result in grader.grade_many(entries, config=config):
            if result.status == "scored":
                scored += 1
            elif any(r.endswith(": budget_exhausted") for r in result.unscored_reasons):
                capped += 1
    finally:
        BUDGET.set(None)
        await grader.aclose()
        cache.close()
    return {"scored": scored, "capped": capped,
            "settled": budget.caps[0].spent_cost if budget else None}


async def _estimate(entries: list[tuple[str, Any]], base_url: str, cache_dir: Path) -> float:
    from judge.cache import JudgeCache
    from judge.config import JudgeConfig
    from judge.estimate import estimate

    config = JudgeConfig(model=MODEL, api_base=base_url, metrics=("coverage", "defects"))
    cache = JudgeCache(cache_dir)
    try:
        answer = await estimate(entries, config, cache=cache)
    finally:
        cache.close()
    return float(answer.total.cost_usd or 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the capped runs and their resumes; print the table."""
    parser = section_parser("bench.budget", __doc__)
    parser.add_argument("--items", type=int, default=200,
                        help="items of the workload (default 200)")
    args = parse_section_args(parser, argv, litellm=True)
    from judge.estimate import model_prices
    from standins.openai_server import OpenAIStandIn

    prices = model_prices(MODEL)
    assert prices is not None
    entries = load_requests(limit=args.items)
    rows: list[dict[str, Any]] = []
    with OpenAIStandIn(tokenizer="o200k_base", latency=0.1, record_requests=100_000) as server, \
            tempfile.TemporaryDirectory() as tmp:
        estimated = asyncio.run(_estimate(entries, server.base_url, Path(tmp) / "estimate"))
        log(f"baseline: {len(entries)} items uncapped")
        server.reset_stats()
        asyncio.run(_grade(entries, server.base_url, Path(tmp) / "baseline", None))
        base = server.stats()
        baseline_cost = prices.cost(base.prompt_tokens, base.completion_tokens)
        for share in SHARES:
            cap = estimated * share
            log(f"cap {share:.0%} of the estimate: ${cap:.6f}")
            server.reset_stats()
            server.clear_requests()
            run = asyncio.run(_grade(entries, server.base_url, Path(tmp) / f"c{share}", cap))
            sent = server.stats()
            spent = prices.cost(sent.prompt_tokens, sent.completion_tokens)
            asyncio.run(_grade(entries, server.base_url, Path(tmp) / f"c{share}", None))
            total = server.stats()
            bodies = [json.dumps(b.get("messages"), sort_keys=True) for b in server.requests]
            rows.append({
                "share": share, "cap_usd": round(cap, 6), "spent_usd": round(spent, 6),
                "settled_usd": round(run["settled"] or 0.0, 6),
                "spent_over_cap": round(spent / cap, 4), "requests": sent.requests,
                "scored": run["scored"], "capped_items": run["capped"],
                "resume_requests": total.requests - sent.requests,
                "total_requests": total.requests, "baseline_requests": base.requests,
                "sent_twice": len(bodies) - len(set(bodies)),
            })
    print_table(
        f"a capped run against its cap: {MODEL} on the strict stand-in, {len(entries)} items, "
        f"concurrency {CONCURRENCY}, 0.1 s per call; estimate ${estimated:.6f}, uncapped run "
        f"${baseline_cost:.6f} in {base.requests} requests",
        [("cap", "share", ">6.0%"), ("cap $", "cap_usd", ">11.6f"),
         ("spent $", "spent_usd", ">11.6f"), ("settled $", "settled_usd", ">11.6f"),
         ("spent/cap", "spent_over_cap", ">10"), ("requests", "requests", ">9"),
         ("scored", "scored", ">7"), ("left", "capped_items", ">6"),
         ("resume req", "resume_requests", ">11"), ("total req", "total_requests", ">10"),
         ("sent twice", "sent_twice", ">11")],
        rows,
    )
    write_json(args.json, {"rows": rows, "estimate_usd": estimated,
                           "baseline_usd": baseline_cost, "baseline_requests": base.requests})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
