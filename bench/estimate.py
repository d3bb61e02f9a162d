"""The estimate before any call against the run it predicts (issue 32.1).

For each workload (the bundled 10 examples, and the 1,035-item workload), with an empty cache:
``judge.estimate.estimate`` (no call sent), then the real run with ``Grader.grade_many`` against
the strict stand-in, which counts ``usage`` with tiktoken's ``o200k_base`` (as OpenAI counts
gpt-4o-mini). The table sets the estimate's calls and prompt tokens beside the run's first-
attempt calls (from the results' provenance), the requests the stand-in received and the prompt
tokens it reported; then the estimate again, warm (every call cached: 0 to send).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    EXAMPLES,
    load_requests,
    log,
    parse_section_args,
    print_table,
    section_parser,
    workload_path,
    write_json,
)

MODEL = "openai/gpt-4o-mini"


async def _one(name: str, entries: list[tuple[str, Any]], base_url: str, tmp: Path,
               server: Any) -> dict[str, Any]:
    from judge.cache import JudgeCache
    from judge.config import JudgeConfig
    from judge.engine import Grader
    from judge.estimate import estimate

    config = JudgeConfig(model=MODEL, api_base=base_url, metrics=("coverage", "defects"))
    cache = JudgeCache(tmp / name)
    started = time.monotonic()
    cold = await estimate(entries, config, cache=cache)
    estimate_s = time.monotonic() - started
    server.reset_stats()
    grader = Grader(config, cache=cache)
    first = 0
    try:
        async for result in grader.grade_many(entries, config=config):
            first += sum(1 for call in result.provenance.calls if not call.cached)
    finally:
        await grader.aclose()
    sent = server.stats()
    warm = await estimate(entries, config, cache=cache)
    cache.close()
    return {
        "workload": name,
        "items": cold.items,
        "estimate_calls": cold.total.calls,
        "run_first_attempts": first,
        "provider_requests": sent.requests,
        "estimate_prompt_tokens": cold.total.prompt_tokens,
        "provider_prompt_tokens": sent.prompt_tokens,
        "prompt_ratio": round(cold.total.prompt_tokens / max(1, sent.prompt_tokens), 4),
        "estimate_completion_tokens": cold.total.completion_tokens,
        "provider_completion_tokens": sent.completion_tokens,
        "estimate_cost_usd": cold.total.cost_usd,
        "warm_calls": warm.total.calls,
        "warm_cached": warm.total.cached,
        "estimate_s": round(estimate_s, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison and print its table."""
    args = parse_section_args(section_parser("bench.estimate", __doc__), argv, litellm=True)
    from standins.openai_server import OpenAIStandIn

    workloads = [("examples (10)", load_requests(EXAMPLES))]
    big = workload_path()
    workloads.append((f"{big.name}", load_requests(big)))
    rows = []
    with OpenAIStandIn(tokenizer="o200k_base") as server, tempfile.TemporaryDirectory() as tmp:
        for name, entries in workloads:
            log(f"{name}: estimate, then the run")
            rows.append(asyncio.run(_one(name.split()[0], entries, server.base_url, Path(tmp),
                                         server)))
    print_table(
        f"estimate vs run, {MODEL} on the strict stand-in (usage: tiktoken o200k_base)",
        [("workload", "workload", "<26"), ("items", "items", ">6"),
         ("est calls", "estimate_calls", ">10"), ("run calls", "run_first_attempts", ">10"),
         ("requests", "provider_requests", ">9"),
         ("est prompt", "estimate_prompt_tokens", ">12,"),
         ("provider prompt", "provider_prompt_tokens", ">16,"), ("ratio", "prompt_ratio", ">7"),
         ("est compl", "estimate_completion_tokens", ">10,"),
         ("prov compl", "provider_completion_tokens", ">11,"), ("warm", "warm_calls", ">6"),
         ("est s", "estimate_s", ">7")],
        rows,
    )
    write_json(args.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
