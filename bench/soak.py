"""Soak: the 1,035-item workload through the real client stack under injected judge faults.

Round after round, every item goes through litellm + instructor to the loopback stand-in, which
injects 30% malformed JSON, 10% 429 (half with Retry-After) and 10% 5xx. Each round checks every
result against the faults its own requests got (items are traced by a tag in their response, and
the stand-in's fault draws are replayed): nothing lost, nothing graded twice, coverage never
above 1, each unscored reason the predicted one, the aggregate over scored items only, retries
within the per-call limit and the run's budget, and the attempts each result reports equal to the
requests the server saw. Memory is sampled per round, so a leak shows as growth. The full HTTP
run is too slow for the test suite on a small machine (about 4,000 judge requests per round);
``tests/judge/test_rel_faults.py`` runs a sample of it and the full workload in process.

::

    python -m bench.soak                      # one round, instant backoff (delays recorded)
    python -m bench.soak --rounds 5 --json soak.json
    python -m bench.soak --real-sleep --items 200   # with the real backoff sleeps

Exit status 1 when any invariant is broken in any round.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from bench.common import log, parse_section_args, peak_rss_mb, section_parser, write_json

if TYPE_CHECKING:
    from standins.openai_server import FaultKind
    from tests.helpers.faults import Task

MIX: dict[FaultKind, float] = {
    "malformed_json": 0.30,
    "rate_limit": 0.05,
    "rate_limit_no_header": 0.05,
    "server_error": 0.10,
}
"""Fault probabilities per judge request (the issue's mix)."""


def _parser() -> argparse.ArgumentParser:
    parser = section_parser("bench.soak", __doc__)
    parser.add_argument("--items", type=int, default=None, help="first N items (default: all)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds to run (default 1)")
    parser.add_argument("--concurrency", type=int, default=64, help="items at once (default 64)")
    parser.add_argument("--latency", type=float, default=0.0, help="stand-in latency, seconds")
    parser.add_argument(
        "--metrics", default="coverage,defects", help="judge tasks (default coverage,defects)"
    )
    parser.add_argument("--seed", type=int, default=1, help="fault seed of round 1")
    parser.add_argument(
        "--real-sleep", action="store_true", help="sleep the backoff delays (default: record)"
    )
    return parser


async def _round(
    number: int,
    args: argparse.Namespace,
    workload: list[Any],
    server: Any,
) -> dict[str, Any]:
    from judge.config import JudgeConfig
    from judge.engine import Grader
    from judge.providers.litellm import LiteLLMProvider
    from judge.retry import CircuitBreaker, RetryBudget
    from standins.openai_server import FaultPlan
    from tests.helpers.faults import RecordingSleep, check_results, ledger_from_standin

    plan = FaultPlan(MIX, seed=args.seed + number, retry_after=1.0)
    server.faults = plan  # restarts the fault draws, so the replay starts at request 0
    server.clear_requests()
    server.reset_stats()
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    config = JudgeConfig(
        model="openai/standin",
        api_base=server.base_url,
        metrics=metrics,
        concurrency=args.concurrency,
        cache=False,
    )
    recorder = RecordingSleep()
    budget = RetryBudget(limit=max(20, 2 * len(workload)))  # the CLI's run-wide cap
    grader = Grader(
        config,
        provider=LiteLLMProvider(),
        retry_budget=budget,
        breaker=CircuitBreaker(),
        sleep=asyncio.sleep if args.real_sleep else recorder,
        rng=random.Random(number),
    )
    started = time.monotonic()
    results = [r async for r in grader.grade_many(workload)]
    elapsed = time.monotonic() - started
    await grader.aclose()
    sent = server.requests
    ledger = ledger_from_standin(sent, plan)
    report = check_results(
        results,
        dict(workload),
        metrics=[m for m in metrics if m in ("coverage", "defects")],
        ledger=ledger,
    )
    tasks = [m for m in metrics if m in ("coverage", "defects")]
    per_call = [ledger.retries(item_id, task) for item_id, _ in workload for task in tasks]
    mismatched = 0
    for result in results:
        for call in result.provenance.calls:
            task = cast("Task", call.task)
            mismatched += call.attempts != ledger.requests(result.id, task)
    violations = list(report.violations)
    if ledger.untraced:
        violations.append(f"{ledger.untraced} request(s) not traced to an item")
    if budget.spent != grader.stats.retries or budget.spent > (budget.limit or 0):
        violations.append(f"retries {grader.stats.retries} vs budget {budget}")
    if max(per_call, default=0) > config.retries:
        violations.append(f"a call retried {max(per_call)} times (limit {config.retries})")
    if mismatched:
        violations.append(f"{mismatched} call(s) report attempts unlike the server's count")
    delays = recorder.delays
    return {
        "round": number,
        "items": len(workload),
        "results": len(results),
        "requests": len(sent),
        "faults": {k: v for k, v in sorted(ledger.fault_counts().items()) if k != "ok"},
        "ok_requests": ledger.fault_counts()["ok"],
        "lost": len(report.lost),
        "graded_twice": len(report.duplicated),
        "coverage_over_1": len(report.coverage_over_one),
        "scored": report.summary.scored,
        "unscored": report.summary.unscored,
        "unscored_by_reason": dict(report.reasons),
        "bpc": report.summary.bpc,
        "retries": grader.stats.retries,
        "retry_budget": budget.limit,
        "max_retries_per_call": max(per_call, default=0),
        "backoff_s": {
            "n": len(delays),
            "mean": round(statistics.fmean(delays), 3) if delays else None,
            "max": round(max(delays), 3) if delays else None,
        },
        "breaker": grader.caller.gates.breaker_for(grader.config).snapshot(),
        "elapsed_s": round(elapsed, 2),
        "items_per_s": round(len(results) / elapsed, 2) if elapsed else None,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "violations": violations[:20],
    }


async def _soak(args: argparse.Namespace) -> list[dict[str, Any]]:
    from standins.openai_server import OpenAIStandIn
    from tests.helpers.faults import default_workload, load_workload

    path = default_workload()
    if path is None:
        raise SystemExit("workload not found: set BONUSJUDGE_WORKLOAD to the 1,035-item JSONL")
    workload = load_workload(path, limit=args.items)
    rounds = []
    with OpenAIStandIn(latency=args.latency, record_requests=1_000_000) as server:
        for number in range(1, args.rounds + 1):
            log(f"soak round {number}/{args.rounds}: {len(workload)} items")
            figures = await _round(number, args, workload, server)
            rounds.append(figures)
            _print_round(figures)
    return rounds


def _print_round(f: dict[str, Any]) -> None:
    faults = ", ".join(f"{k} {v}" for k, v in f["faults"].items())
    print(
        f"round {f['round']}: {f['results']}/{f['items']} results, {f['requests']} requests "
        f"({faults}); lost {f['lost']}, twice {f['graded_twice']}, coverage>1 "
        f"{f['coverage_over_1']}; unscored {f['unscored']} {f['unscored_by_reason']}; "
        f"BPC {f['bpc']}; retries {f['retries']}/{f['retry_budget']} (max per call "
        f"{f['max_retries_per_call']}); {f['elapsed_s']} s, {f['items_per_s']} items/s, "
        f"peak RSS {f['peak_rss_mb']} MB; violations {len(f['violations'])}"
    )
    for line in f["violations"]:
        print(f"  violation: {line}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak; 0 when every round kept every invariant, else 1."""
    args = parse_section_args(_parser(), argv, litellm=True)
    import logging

    # instructor logs every failed attempt at ERROR: thousands of lines by design here.
    logging.getLogger("instructor").setLevel(logging.CRITICAL)
    rounds = asyncio.run(_soak(args))
    broken = sum(len(r["violations"]) for r in rounds)
    write_json(args.json, {"mix": MIX, "rounds": rounds})
    print(f"soak: {len(rounds)} round(s), {broken} violation(s)")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
