"""``bonusjudge grade IN.jsonl --out OUT.jsonl``: grade a CharToM-format file, resumably.

Grades locally (the judge of the settings and options) or, with ``--server URL``, through a
bonusjudge service. Lines are written as items finish, so a killed run keeps them; the next run
grades only what is missing or no longer holds (other content, judge or metrics).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.common import (
    Parser,
    add_judge_options,
    add_model_options,
    check_outputs,
    settings_from_args,
    write_output,
)
from core.errors import ConfigError
from core.jsonl import BadLine
from judge.config import CHARTOM_WINDOWS, JudgeConfig, JudgeOverrides, Settings
from judge.resume import JudgeStamp, stale_reason

if TYPE_CHECKING:
    from judge.aggregate import Summary

CLIENT_SIDE_OPTIONS = ("concurrency", "verbose")
"""Judge-group options that still mean something with ``--server`` (they shape this process), so
they are not refused there: every other option the service does not take per request is."""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``grade`` subcommand to the ``bonusjudge`` parser."""
    grade = subparsers.add_parser("grade", help="grade a JSONL file of CharToM-format items")
    grade.add_argument("input", type=Path, help="input JSONL (CharToM items with `response`)")
    grade.add_argument("--out", type=Path, required=True, help="results JSONL (resumable)")
    grade.add_argument("--summary", type=Path, help="write the aggregate summary JSON here")
    add_model_options(
        grade, JudgeConfig, ["context_window"],
        flags={"context_window": "--context"}, choices={"context_window": CHARTOM_WINDOWS},
    )
    grade.add_argument(
        "--retry-unscored",
        action="store_true",
        help="grade the unscored items of --out again (rewrites it atomically)",
    )
    grade.add_argument("--limit", type=int, help="grade at most N items of the input")
    grade.add_argument(
        "--server",
        help="grade through a bonusjudge service at this URL (several replicas: URLs separated "
        "by commas; batches go to each in turn)",
    )
    grade.add_argument(
        "--order",
        choices=["completion", "input"],
        default="completion",
        help="order of the output lines: as items finish (default; a killed run keeps them) or "
        "rewritten in input order at the end",
    )
    grade.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the one-token call that checks an LLM judge answers before grading "
        "(credentials and the model name are still checked)",
    )
    grade.add_argument("--quiet", action="store_true", help="no progress bar")
    add_judge_options(grade)
    grade.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Grade ``args.input`` into ``args.out``, print the table and the closing counts.

    Raises:
        ConfigError: an invalid option or setting, a judge that cannot work, a service that
            cannot be reached; nothing has been written yet.
        InputError: the input cannot be read.
        OSError: a file cannot be read or written (lines written before stay).
    """
    import asyncio  # here, not at the top: `grade --help` does not need it (~50 ms)

    from judge.aggregate import Aggregator, format_table
    from judge.io import ResultWriter, check_input_file
    from judge.types import GradeResult

    settings = settings_from_args(args)
    config = settings.judge
    check_input_file(args.input, "input")
    check_outputs({"out": args.out, "summary": args.summary})
    client = _server_client(args) if args.server else None
    # A first pass validates every line and keeps only the item ids: the requests themselves
    # are read again, one at a time, as grading takes them, so memory does not grow with the
    # input (16 copies of the 1,035-item workload held 16,560 requests).
    problems: list[BadLine] = []
    ids: list[str] = []
    first: tuple[str, Any] | None = None
    for entry in _entries(args, problems):
        first = first or entry
        ids.append(entry[0])
    probe = None
    if client is not None:
        # The service's configuration hash is known only from its answer: grade one item
        # first (before any output exists, so an unreachable service leaves no file behind).
        probe = _probe_server(client, [first] if first else [], _server_overrides(args))
    else:
        _check_judge(args, config)
    # Results stream to the file; only what it held before this run is kept in memory.
    writer = ResultWriter(args.out, keep=False).open()
    if writer.recovered_tail:
        print(f"{args.out}: dropped a torn last line left by an interrupted run", file=sys.stderr)
    if writer.corrupt_lines:
        print(
            f"{args.out}: skipped unreadable line(s) {writer.corrupt_lines[:10]}; their items "
            "are graded again",
            file=sys.stderr,
        )
    started = time.monotonic()
    try:
        if probe is not None:
            # The service's judge, as its answer names it (its matcher may not be ours).
            stamp = JudgeStamp(
                str(probe.provenance.config_hash),
                probe.provenance.judge_version,
                list(config.metrics),
            )
        else:
            stamp = JudgeStamp(
                config.config_hash() if client is None else "",
                config.judge_version,
                list(config.metrics),
            )
        _resume(args, ids, writer, stamp)
        aggregator = Aggregator()
        for problem in problems:
            aggregator.add_invalid(problem.respondent)
        for obj in writer.done.values():
            aggregator.add(GradeResult.model_validate(obj))
        skip = set(writer.done)
        writer.done.clear()  # counted; from here on only their ids matter
        if probe is not None and probe.id not in skip:
            writer.write(probe)  # the probe graded it already
            aggregator.add(probe)
            skip.add(probe.id)
        total = sum(1 for item_id in ids if item_id not in skip)
        todo = ((item_id, req) for item_id, req in _entries(args) if item_id not in skip)
        if client is not None:
            extra = _grade_via_server(client, todo, writer, aggregator, args, probe)
        else:
            extra = asyncio.run(
                _grade_local(
                    config, settings, todo, total, writer, aggregator, progress=not args.quiet
                )
            )
        if args.order == "input":
            order = {item_id: n for n, item_id in enumerate(ids)}
            writer.rewrite_sorted(lambda item_id: order.get(item_id, len(order)))
    finally:
        writer.close()
        if client is not None:
            client.close()
    summary = aggregator.summary(**extra)
    payload = summary.model_dump(mode="json")
    payload["invalid_lines"] = [
        {"line": p.line, "field": p.field, "message": p.message, "respondent": p.respondent}
        for p in problems
    ]
    payload["elapsed_s"] = round(time.monotonic() - started, 3)
    payload["config_hash"] = stamp.config_hash
    payload["judge_version"] = stamp.judge_version
    if args.summary:
        write_output(
            Path(args.summary), json.dumps(payload, indent=2, ensure_ascii=False) + "\n", "summary"
        )
    print(format_table(summary))
    print(
        f"\n{summary.items} graded ({_unscored_counts(summary)}), {len(problems)} invalid "
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
    return 0


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


def _call_counts(summary: Any, *, server: bool) -> str:
    """The closing line's judge calls: this process's, or with ``--server`` the service's.

    The service's are summed from the results' provenance; its metric cache is not visible
    there, so it is not counted.
    """
    if server:
        return (
            f"{summary.judge_calls} judge call(s) made by the service ({summary.cache_hits} "
            "from its cache)"
        )
    return (
        f"{summary.judge_calls} judge call(s), {summary.cache_hits} judge cache hit(s), "
        f"{summary.metric_cache_hits} metric cache hit(s)"
    )


def _check_judge(args: argparse.Namespace, config: JudgeConfig) -> None:
    """Say what an option will not do, and find out whether an LLM judge can work at all.

    Raises:
        ConfigError: the judge cannot work (missing credentials, unknown model, unreachable,
            refused); nothing has been written yet.
    """
    if config.is_embedded:
        if config.rubric != "chartom":
            print(
                f"note: --rubric {config.rubric} has no effect on the embedded matcher (it reads "
                "no prompts); pass --model for an LLM judge that uses it",
                file=sys.stderr,
            )
        return
    if not {"coverage", "defects"} & set(config.metrics):
        return  # ROUGE-L and BERTScore only: the judge is never called
    from judge.providers.routing import preflight

    warning = preflight(config, call=not args.no_preflight)
    if warning:
        print(warning, file=sys.stderr)


def _entries(
    args: argparse.Namespace, problems: list[BadLine] | None = None
) -> Iterator[tuple[str, Any]]:
    """The input's valid items, ``(item_id, request)``, in order and up to ``--limit``.

    Read lazily from the file. With ``problems``, each bad line is added to it and reported on
    stderr (the first pass); without, bad lines are skipped silently (the passes after it).
    """
    from judge.io import read_items

    taken = 0
    for entry in read_items(args.input, context_window=args.context_window):
        if isinstance(entry, BadLine):
            if problems is not None:
                problems.append(entry)
                print(f"{args.input}: {entry}", file=sys.stderr)
            continue
        yield entry
        taken += 1
        if args.limit is not None and taken >= args.limit:
            return


def _resume(args: argparse.Namespace, ids: list[str], writer: Any, stamp: JudgeStamp) -> None:
    """Drop the output lines that no longer hold; what stays in ``writer.done`` is not graded.

    A line is kept only when it grades the same content (input hash) with the same judge
    (:func:`judge.resume.stale_reason`: configuration, judge version and metrics); otherwise the
    item is graded again, so one file never mixes judges or holds a grade of an answer that has
    since been edited. ``--retry-unscored`` also drops unscored lines.
    """
    if not writer.done:
        return
    keep: list[dict[str, Any]] = []
    stale: dict[str, int] = {}
    # The content hashes of the input's items that have an output line (a pass over the input,
    # only when resuming).
    wanted = {
        item_id: request.content_hash()
        for item_id, request in _entries(args)
        if item_id in writer.done
    }
    for item_id, obj in writer.done.items():
        reason = stale_reason(obj, wanted.get(item_id), stamp)
        if reason is None and args.retry_unscored and obj.get("status") != "scored":
            reason = "unscored (--retry-unscored)"
        if reason is None:
            keep.append(obj)
        else:
            stale[reason] = stale.get(reason, 0) + 1
    if stale:
        writer.rewrite(keep)
        detail = ", ".join(f"{n} {why}" for why, n in sorted(stale.items()))
        print(f"{args.out}: grading {sum(stale.values())} item(s) again: {detail}",
              file=sys.stderr)
    kept = sum(1 for item_id in ids if item_id in writer.done)
    if kept:
        print(f"resuming: {kept} item(s) already graded in {args.out}", file=sys.stderr)


async def _grade_local(
    config: JudgeConfig,
    settings: Settings,
    todo: Iterable[Any],
    total: int,
    writer: Any,
    aggregator: Any,
    *,
    progress: bool,
) -> dict[str, Any]:
    """Grade ``todo`` (``total`` items, read as grading takes them) in this process.

    Returns:
        The run's counts for the summary.
    """
    from tqdm import tqdm

    from judge.cache import open_cache
    from judge.engine import Grader
    from judge.retry import RetryBudget

    cache = open_cache(settings, enabled=config.cache)  # the folder, or a shared Redis
    # A run-wide retry cap: a provider failing for everyone costs at most this many extra calls.
    budget = RetryBudget(limit=max(20, total * 2))
    grader = Grader(config, cache=cache, retry_budget=budget)
    bar = tqdm(total=total, disable=not progress, unit="item", dynamic_ncols=True)
    try:
        # Heavy imports and model loads before grading: the metric batch threads would
        # otherwise make their first imports concurrently, which crashes on a cold start.
        await grader.prepare(config)
        # What is loaded by now (modules, rubrics, schemas, encoders) lives as long as the run:
        # frozen, the cyclic collector stops walking it on every full collection, which cost
        # 10-20% of the CPU of a judge call. Frozen objects are still freed by reference count.
        gc.freeze()
        async for result in grader.grade_many(todo, config=config):
            writer.write(result)
            aggregator.add(result)
            bar.update(1)
    finally:
        bar.close()
        await grader.aclose()
        cache.close()
    stats = grader.stats.as_dict()
    return {
        "judge_calls": stats["judge_calls"],
        "cache_hits": stats["cache_hits"],
        "metric_cache_hits": stats["metric_cache_hits"],
        "reasks": stats["reasks"],
        "retries_by_reason": stats["retries_by_reason"],
        "prompt_tokens": stats["prompt_tokens"],
        "completion_tokens": stats["completion_tokens"],
        "cost_usd": stats["cost_usd"] or None,
        "retries": stats["retries"],
        "retry_budget": {"limit": budget.limit, "spent": budget.spent, "refused": budget.refused},
        "breaker": grader.breaker.snapshot(),
    }


# -- through a service ---------------------------------------------------------------------------


def _local_only_options() -> list[tuple[str, str]]:
    """``(dest, flag)`` of the options that configure this process's judge, in help order.

    Derived from the judge options themselves: whatever ``JudgeOverrides`` (what a service
    honours per request) does not hold, and that does not shape this process, is local-only.
    """
    scratch = Parser(prog="bonusjudge grade", add_help=False)
    return [
        (action.dest, action.option_strings[0])
        for action in add_judge_options(scratch)
        if action.dest not in JudgeOverrides.model_fields
        and action.dest not in CLIENT_SIDE_OPTIONS
    ]


def _server_client(args: argparse.Namespace) -> Any:
    """The client for ``--server``; refuses options the service would silently ignore.

    Raises:
        ConfigError: a local-only option was given with ``--server``.
    """
    from api.client import JudgeClient

    ignored = [
        (dest, flag) for dest, flag in _local_only_options()
        if getattr(args, dest, None) is not None
    ]
    if ignored:
        flags = ", ".join(flag for _, flag in ignored)
        raise ConfigError(
            f"{flags}: not honoured with --server (the service grades with its own provider, "
            f"encoder and cache); drop them or grade locally",
            field=ignored[0][0],
        )
    return JudgeClient(args.server)


def _server_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    """The judge options given on the command line, as the service's per-request overrides."""
    judge = {
        name: getattr(args, name) for name in JudgeOverrides.model_fields
        if getattr(args, name, None) is not None
    }
    return judge or None


def _probe_server(
    client: Any, entries: list[tuple[str, Any]], overrides: dict[str, Any] | None
) -> Any:
    """Grade the first item through the service, to learn its configuration hash.

    Its result is written later if the output does not have it yet; otherwise it costs the
    service only a cache hit. None when the input has no valid item.

    Raises:
        ConfigError: the service cannot be reached or refused the request.
    """
    from api.client import JudgeClientError

    if not entries:
        return None
    item_id, request = entries[0]
    try:
        return client.grade(_with_id(item_id, request), judge=overrides)
    except JudgeClientError as exc:
        raise ConfigError(f"server: {exc}", field="server") from exc


def _with_id(item_id: str, request: Any) -> Any:
    """The request with its id set (the line number when the input gave none)."""
    return request if request.id else request.model_copy(update={"id": item_id})


def _grade_via_server(
    client: Any,
    todo: Iterable[Any],
    writer: Any,
    aggregator: Any,
    args: argparse.Namespace,
    probe: Any,
) -> dict[str, Any]:
    """Grade through a service, writing each result as its batch arrives.

    An item the service fails is reported on stderr and left for the next run; it never stops
    the others.

    Returns:
        The judge calls the service made for this run (the probe's included), summed from the
        results' provenance: this process made none.
    """
    from api.client import ClientItemError
    from judge.aggregate import ProvenanceCalls

    calls = ProvenanceCalls()
    if probe is not None:
        calls.add(probe)
    failed = 0
    requests = [_with_id(item_id, req) for item_id, req in todo]
    for _, outcome in client.grade_stream(
        requests, judge=_server_overrides(args), progress=not args.quiet
    ):
        if isinstance(outcome, ClientItemError):
            failed += 1
            print(f"item {outcome}: not graded (the next run tries it again)", file=sys.stderr)
            continue
        writer.write(outcome)
        aggregator.add(outcome)
        calls.add(outcome)
    if failed:
        print(f"{failed} item(s) failed at the service and were not written", file=sys.stderr)
    return calls.counters()
