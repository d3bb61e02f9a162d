"""The bill after a run under faults, next to the provider's own counts (issue 32.3).

Each row grades a workload with an empty cache against the strict stand-in, 30% of whose answers
are malformed JSON (each re-asked; every re-ask billed), counting ``usage`` with tiktoken's
``o200k_base`` and reporting cached prompt tokens by one of two prefix-cache rules: OpenAI's
(1,024 tokens, then 128-token steps) and a 256-token minimum in 64-token steps (the bundled
prompts are 500-900 tokens, under OpenAI's minimum). The run's bill is the engine's totals (what
``bonusjudge grade --summary`` and ``/metrics`` report; the results' summed provenance, what a
job summary reports, is checked equal to them), priced at gpt-4o-mini's prices; the provider's
is the stand-in's own counts at the same prices. The last column is the same run priced as
before this change (every prompt token at the prompt price: cached tokens were not read).

Workloads: the 10 bundled examples three times over (each copy a new response to the same
questions, as when several models answer one set), on both transports, and the first 300 items
of the 1,035-item workload (distinct questions).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from bench.common import (
    EXAMPLES,
    load_requests,
    log,
    parse_section_args,
    print_table,
    section_parser,
    write_json,
)

MODEL = "gpt-4o-mini"
RULES = {"openai 1024/128": (1024, 128), "256/64": (256, 64)}
WORKLOAD_ITEMS = 300


def _thrice(entries: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Three answers to each question: the copies differ in their response only."""
    return [
        (f"{n}-{key}", request.model_copy(update={
            "id": f"{n}-{request.id}", "response": f"{request.response} (answer {n})"}))
        for n in range(3) for key, request in entries
    ]


async def _run(entries: list[tuple[str, Any]], transport: str, rule: tuple[int, int]
               ) -> dict[str, Any]:
    from judge.aggregate import ProvenanceCalls
    from judge.config import JudgeConfig
    from judge.engine import Grader
    from standins.openai_server import FaultPlan, OpenAIStandIn

    faults = FaultPlan({"malformed_json": 0.3}, seed=32)
    async with OpenAIStandIn(faults=faults, tokenizer="o200k_base", prompt_cache=rule,
                             record_requests=0) as judge:
        config = JudgeConfig(model=f"openai/{MODEL}", api_base=judge.base_url,
                             metrics=("coverage", "defects"), transport=transport, cache=False,
                             concurrency=16)
        grader = Grader(config)
        provenance = ProvenanceCalls()
        try:
            async for result in grader.grade_many(entries):
                provenance.add(result)
        finally:
            await grader.aclose()
        seen = judge.stats()
    stats = grader.stats
    ours = (stats.provider_calls, stats.prompt_tokens, stats.cached_tokens,
            stats.completion_tokens)
    summed = (provenance.judge_calls, provenance.prompt_tokens, provenance.cached_tokens,
              provenance.completion_tokens)
    uncached = dataclasses.replace(seen, cached_tokens=0)
    return {
        "items": len(entries),
        "transport": transport,
        "malformed": seen.outcomes.get("malformed_json", 0),
        "requests": [stats.provider_calls, seen.requests],
        "prompt_tokens": [stats.prompt_tokens, seen.prompt_tokens],
        "cached_tokens": [stats.cached_tokens, seen.cached_tokens],
        "completion_tokens": [stats.completion_tokens, seen.completion_tokens],
        "cost_usd": [round(stats.cost_usd, 8), round(seen.cost(MODEL), 8)],
        "cost_before_usd": round(uncached.cost(MODEL), 8),
        "provenance_equal": summed == ours and abs(provenance.cost_usd - stats.cost_usd) < 1e-12,
    }


def _pair(counts: list[int]) -> str:
    """A run's count and the provider's, ``run/provider``."""
    return f"{counts[0]:,}/{counts[1]:,}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rows and print the table."""
    args = parse_section_args(section_parser("bench.bill", __doc__), argv, litellm=True)
    examples = _thrice(load_requests(EXAMPLES))
    big = load_requests(limit=WORKLOAD_ITEMS)
    plan = [("examples x3", examples, transport) for transport in ("direct", "litellm")]
    plan.append((f"workload {WORKLOAD_ITEMS}", big, "direct"))
    rows = []
    for rule_name, rule in RULES.items():
        for name, entries, transport in plan:
            log(f"{name}, {transport}, prefix cache {rule_name}")
            row = asyncio.run(_run(entries, transport, rule))
            rows.append({"workload": name, "rule": rule_name, **row})
    print_table(
        f"bill under 30% malformed answers vs the provider's counts ({MODEL} prices; "
        "run / provider)",
        [("workload", "workload", "<14"), ("transport", "transport", "<10"),
         ("cache rule", "rule", "<17"), ("malf", "malformed", ">5"),
         ("requests", lambda r: _pair(r["requests"]), ">12"),
         ("prompt tokens", lambda r: _pair(r["prompt_tokens"]), ">18"),
         ("cached", lambda r: _pair(r["cached_tokens"]), ">16"),
         ("completion", lambda r: _pair(r["completion_tokens"]), ">14"),
         ("cost USD", lambda r: f"{r['cost_usd'][0]:>11.6f}/{r['cost_usd'][1]:<10.6f}", ">22"),
         ("before", "cost_before_usd", ">10.6f"),
         ("prov=", lambda r: "yes" if r["provenance_equal"] else "NO", ">6")],
        rows,
    )
    write_json(args.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
