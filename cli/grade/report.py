"""The closing report of ``bonusjudge grade``: the table, the summary file and the counts line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from cli.common import (
    write_output,
)
from core.jsonl import BadLine
from judge.config import JudgeConfig
from judge.resume import JudgeStamp

if TYPE_CHECKING:
    from judge.aggregate import Summary



def report(
    args: argparse.Namespace,
    config: JudgeConfig,
    summary: Summary,
    problems: list[BadLine],
    stamp: JudgeStamp,
    elapsed: float,
    resumed: int,
) -> None:
    """Write ``--summary`` and print the table and the closing counts.

    ``resumed``: the results read from ``--out`` (an earlier run's) among ``summary.items``.
    """
    from judge.aggregate import format_table

    payload = summary.model_dump(mode="json")
    payload["invalid_lines"] = [
        {"line": p.line, "field": p.field, "message": p.message, "respondent": p.respondent}
        for p in problems
    ]
    payload["elapsed_s"] = elapsed
    payload["config_hash"] = stamp.config_hash
    payload["judge_version"] = stamp.judge_version
    if args.summary:
        write_output(
            Path(args.summary), json.dumps(payload, indent=2, ensure_ascii=False) + "\n", "summary"
        )
    print(format_table(summary))
    print(
        f"\n{summary.items} graded{_graded_where(summary, resumed, args.out)} "
        f"({_unscored_counts(summary)}), {len(problems)} invalid "
        f"line(s){_invalid_counts(summary)}; judge {summary.judge}; "
        f"{_call_counts(summary, server=bool(args.server))}; {payload['elapsed_s']} s"
    )
    nulls = summary.flags.get("null_response", 0)
    if nulls:
        print(f"{nulls} null response(s) graded as empty answers: coverage 0, no judge call "
              "(flag null_response)")
    if summary.reasks or summary.retries:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(summary.retries_by_reason.items()))
        print(f"{summary.reasks} re-ask(s) after invalid answers; {summary.retries} retr"
              f"{'y' if summary.retries == 1 else 'ies'} of provider errors"
              + (f" ({reasons})" if reasons else ""))
    if config.is_embedded and not args.server and not args.quiet:
        print(
            "judge: embedded-matcher (offline, coverage only; defects not assessed). For an LLM "
            "judge pass --model openai/gpt-4o (OPENAI_API_KEY) or --model openai/NAME "
            "--api-base http://127.0.0.1:8080/v1 for a local server.",
        )


def _graded_where(summary: Summary, resumed: int, out: Path) -> str:
    """``: 554 now, 481 from results.jsonl`` when a resumed run counts an earlier run's results.

    The summary covers the whole output: without the split, a resumed run's count read as if
    this run had graded (and paid for) every item.
    """
    if not resumed:
        return ""
    return f": {summary.items - resumed} now, {resumed} from {out}"


def _unscored_counts(summary: Summary) -> str:
    """``N unscored`` for the closing line, with coverage and defects apart when any."""
    text = f"{summary.unscored} unscored"
    if summary.unscored:
        text += f": coverage {summary.coverage_unscored}, defects {summary.defects_unscored}"
    return text


def _invalid_counts(summary: Summary) -> str:
    """`` (model-a 0, model-b 2)``: the invalid lines per respondent, when lines name them."""
    counts = summary.invalid_lines_by_respondent
    if not counts:
        return ""
    return " (" + ", ".join(f"{name} {n}" for name, n in counts.items()) + ")"


def _call_counts(summary: Summary, *, server: bool) -> str:
    """The closing line's judge calls: this process's, or with ``--server`` the service's.

    The service's are summed from the results' provenance; its metric cache is not visible
    there, so it is not counted.
    """
    if server:
        return (
            f"{summary.judge_calls} judge call(s) made by the service ({summary.cache_hits} "
            f"from its cache){_bill(summary)}"
        )
    return (
        f"{summary.judge_calls} judge call(s), {summary.cache_hits} judge cache hit(s), "
        f"{summary.metric_cache_hits} metric cache hit(s){_bill(summary)}"
    )


def _bill(summary: Summary) -> str:
    """The closing line's bill: the tokens the provider reported and their cost, if any."""
    if not (summary.prompt_tokens or summary.completion_tokens):
        return ""
    cached = f" ({summary.cached_tokens:,} cached)" if summary.cached_tokens else ""
    cost = "" if summary.cost_usd is None else f", ${summary.cost_usd:.6f}"
    return (
        f"; {summary.prompt_tokens:,} prompt token(s){cached}, "
        f"{summary.completion_tokens:,} completion token(s){cost}"
    )


