"""The cascade judge's LLM calls against an all-LLM run on the 1,035-item workload (issue 32.4).

Against the strict stand-in judge (schema-valid answers, every request counted), coverage and
defects asked, each run with its own empty judge-call cache:

* ``all-LLM``: ``--model`` alone, the baseline, measured in the same run;
* ``cascade``: ``--judge cascade`` at each shipped target agreement, the embedded matcher
  first (its verdicts computed once, before the timed runs, and copied into each run's cache,
  so every run pays its LLM calls from nothing and none pays the encoder twice).

The table gives the requests the stand-in received, the items sent to the LLM, and the calls
the summary says were saved, which must equal the all-LLM run's requests less the run's.
"""

from __future__ import annotations

import asyncio
import shutil
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
    print_table,
    section_parser,
    write_json,
)

MODEL = "openai/gpt-4o-mini"
METRICS = ("coverage", "defects")


async def _run(
    name: str, entries: list[tuple[str, Any]], config: Any, cache_dir: Path, server: Any
) -> dict[str, Any]:
    from judge.aggregate import summarize
    from judge.cache import JudgeCache
    from judge.engine import Grader

    cache = JudgeCache(cache_dir)
    server.reset_stats()
    grader = Grader(config, cache=cache)
    started = time.monotonic()
    results = []
    try:
        async for result in grader.grade_many(entries, config=config):
            results.append(result)
    finally:
        await grader.aclose()
        cache.close()
    elapsed = time.monotonic() - started
    summary = summarize(results)
    return {
        "run": name,
        "items": summary.items,
        "requests": server.stats().requests,
        "to_llm": summary.decided_by_llm if config.is_cascade else summary.items,
        "llm_share": summary.llm_share if config.is_cascade else 1.0,
        "calls_saved": summary.llm_calls_saved,
        "unscored": summary.unscored,
        "seconds": round(elapsed, 1),
    }


async def _matcher_cache(entries: list[tuple[str, Any]], cache_dir: Path) -> None:
    """Fill ``cache_dir`` with the matcher's verdicts on every item (the embedded judge's)."""
    from judge.cache import JudgeCache
    from judge.config import JudgeConfig
    from judge.engine import Grader

    cache = JudgeCache(cache_dir)
    config = JudgeConfig(metrics=("coverage",))
    grader = Grader(config, cache=cache)
    try:
        async for _ in grader.grade_many(entries, config=config):
            pass
    finally:
        await grader.aclose()
        cache.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the all-LLM baseline and the cascade at each target, and print the table."""
    args = parse_section_args(section_parser("bench.cascade", __doc__), argv, litellm=True)
    from judge.config import JudgeConfig
    from judge.matcher import load_params
    from standins.openai_server import OpenAIStandIn

    fitted = load_params().cascade
    targets = sorted(fitted.bands) if fitted is not None else []
    entries = load_requests()
    load_before = machine()["load_avg"]
    rows = []
    with OpenAIStandIn(record_requests=0) as server, tempfile.TemporaryDirectory() as tmp:
        base = JudgeConfig(model=MODEL, api_base=server.base_url, metrics=METRICS)
        matcher = Path(tmp) / "matcher"
        log(f"the matcher's verdicts on {len(entries)} items (not timed)")
        asyncio.run(_matcher_cache(entries, matcher))
        log("all-LLM run")
        rows.append(asyncio.run(_run("all-LLM", entries, base, Path(tmp) / "llm", server)))
        for target in targets:
            config = base.model_copy(update={"judge": "cascade", "cascade_agreement": target})
            run_cache = Path(tmp) / f"cascade-{target:g}"
            shutil.copytree(matcher, run_cache)
            log(f"cascade at agreement {target:g}")
            rows.append(
                asyncio.run(_run(f"cascade {target:g}", entries, config, run_cache, server))
            )
    baseline = rows[0]["requests"]
    for row in rows:
        row["requests_vs_all_llm"] = round(row["requests"] / baseline, 4) if baseline else None
    print_table(
        f"cascade vs all-LLM, {len(entries)} items, {'+'.join(METRICS)}, {MODEL} on the strict "
        "stand-in",
        [("run", "run", "<16"), ("items", "items", ">6"), ("requests", "requests", ">10"),
         ("vs all-LLM", "requests_vs_all_llm", ">11"), ("to LLM", "to_llm", ">8"),
         ("share", "llm_share", ">7.3f"), ("saved", "calls_saved", ">7"),
         ("unscored", "unscored", ">9"), ("s", "seconds", ">7")],
        rows, load_before=load_before,
    )
    write_json(args.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
