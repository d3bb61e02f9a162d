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
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cli.common import (
    EXIT_BAD_LINES,
    PROG,
    Parser,
    add_fail_on_bad_lines_option,
    add_judge_options,
    add_model_options,
    check_outputs,
    no_items,
    settings_from_args,
    write_output,
)
from cli.estimate import add_estimate_options, check_estimate_options, run_estimate
from core.errors import ConfigError
from core.jsonl import BadLine
from judge.config import CHARTOM_WINDOWS, JudgeConfig, JudgeOverrides, Settings
from judge.resume import JudgeStamp, stale_reason

if TYPE_CHECKING:
    from bonusjudge_client import JudgeClient
    from bonusjudge_client.wire.grading import GradeRequest, GradeResult
    from judge.aggregate import Summary
    from judge.budget import Budget
    from judge.io import ResultWriter
    from judge.providers.base import Preflight

EXIT_BUDGET = 3
"""The exit code of a run stopped by ``--max-cost`` or ``--max-calls`` (what finished is written;
a re-run with a higher cap grades the rest)."""

CLIENT_SIDE_OPTIONS = ("concurrency", "verbose")
"""Judge-group options that still mean something with ``--server`` (they shape this process), so
they are not refused there: every other option the service does not take per request is."""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``grade`` subcommand to the ``bonusjudge`` parser."""
    grade = subparsers.add_parser("grade", help="grade a JSONL file of CharToM-format items")
    grade.add_argument("input", type=Path, help="input JSONL (CharToM items with `response`)")
    grade.add_argument(
        "--out", type=Path, help="results JSONL (resumable); required unless --estimate"
    )
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
    add_fail_on_bad_lines_option(grade)
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
    cap = grade.add_argument_group(
        "cost cap",
        f"stop sending judge calls at a limit: exit {EXIT_BUDGET}, resumable. Caps are totals "
        "for the --out file: what earlier runs spent into it counts (books in OUT.spend)",
    )
    cap.add_argument(
        "--max-cost", type=float, metavar="USD",
        help="spend at most this many USD on judge calls into --out, all runs together: each "
        "request reserves its estimated cost first; at the cap the run stops sending, finishes "
        f"what is in flight, writes it and exits {EXIT_BUDGET}; re-run with a higher cap to "
        "grade the rest (a model litellm does not price needs --price-in/--price-out)",
    )
    cap.add_argument(
        "--max-calls", type=int, metavar="N",
        help="send at most N requests to the judge into --out, all runs together (retries and "
        f"the preflight's probe included); exit {EXIT_BUDGET} at the cap, resumable as "
        "--max-cost",
    )
    add_estimate_options(grade)
    add_judge_options(grade)
    grade.set_defaults(func=run)


Entry = tuple[str, "GradeRequest"]
"""One valid input item: its id (the line number when the input gave none) and its request."""


class Grading(Protocol):
    """Where ``grade`` sends its items: this process's judge, or a service (``--server``).

    ``run`` is one pipeline over either (read the input, learn the judge, resume, grade, write
    and count, summarise); only what differs between them is behind this adapter.
    """

    server: bool
    """Whether a service grades (the closing line counts its calls, not this process's)."""

    def start(self, first: Entry | None) -> tuple[JudgeStamp, GradeResult | None]:
        """Check the judge can work before any output exists; the judge's stamp for resuming.

        Also the result of ``first`` when finding the judge out graded it (the service's probe).

        Raises:
            ConfigError: the judge or the service cannot work; nothing has been written.
        """
        ...

    def grade(
        self, todo: Iterable[Entry], total: int, emit: Callable[[GradeResult], None]
    ) -> dict[str, Any]:
        """Grade ``todo`` (``total`` items), passing each result to ``emit`` as it finishes.

        Returns:
            The run's counts for the summary.
        """
        ...

    def close(self) -> None:
        """Release what the grading holds (the service's connections)."""
        ...


def run(args: argparse.Namespace) -> int:
    """Grade ``args.input`` into ``args.out``, print the table and the closing counts.

    Raises:
        ConfigError: an invalid option or setting, a judge that cannot work, a service that
            cannot be reached; nothing has been written yet.
        InputError: the input cannot be read.
        OSError: a file cannot be read or written (lines written before stay).
    """
    from judge.io import check_input_file

    check_estimate_options(args)
    if args.estimate:
        return _estimate(args)
    settings = settings_from_args(args)
    if args.server and (args.max_cost is not None or args.max_calls is not None):
        raise ConfigError(
            "--max-cost, --max-calls: not with --server (the service caps each API key's "
            "spend per day, and a job's with its max_cost)",
            field="max_cost",
        )
    check_input_file(args.input, "input")
    check_outputs({"out": args.out, "summary": args.summary})
    if not args.server:
        _check_calibration(settings.judge)
    grading: Grading = (
        _ServerGrading(args, settings.judge) if args.server else _LocalGrading(args, settings)
    )
    try:
        problems, ids, first = _first_pass(args)
        if not ids:
            raise no_items(args.input, len(problems))
        stamp, early = grading.start(first)
        started = time.monotonic()
        summary, resumed = _grade_into(args, grading, ids, problems, stamp, early)
    finally:
        grading.close()
    _report(args, settings.judge, summary, problems, stamp, round(time.monotonic() - started, 3),
            resumed)
    capped = getattr(grading, "capped", None)
    if capped is not None:
        print(capped, file=sys.stderr)
        return EXIT_BUDGET
    # What was valid is graded and written either way; the status tells a pipeline lines were not.
    return EXIT_BAD_LINES if problems and args.fail_on_bad_lines else 0


def _estimate(args: argparse.Namespace) -> int:
    """``--estimate``: the cost of grading the input, here or by ``--server``; nothing graded.

    Raises:
        ConfigError: an invalid option or setting, or a service that cannot be reached.
        InputError: the input cannot be read, or only one of the prices was given.
    """
    from judge.io import check_input_file

    settings_from_args(args)  # an invalid option or setting stops it before reading the input
    check_input_file(args.input, "input")
    problems: list[BadLine] = []
    entries = [(item_id, with_id(item_id, request)) for item_id, request in
               entries_of(args, problems)]
    if not entries:
        raise no_items(args.input, len(problems))
    client = server_client(args) if args.server else None
    code = run_estimate(args, entries, len(problems), client, server_overrides(args))
    return EXIT_BAD_LINES if code == 0 and problems and args.fail_on_bad_lines else code


def _check_calibration(config: JudgeConfig) -> None:
    """Refuse a ``--calibration`` mapping this configuration cannot use, before any output.

    The grader checks the mapping too, but it is made once the output is open: a refused
    mapping then left an empty ``--out`` behind (or opened the file being resumed).

    Raises:
        ConfigError: (``calibration``) the file is unreadable, was fitted for another
            configuration, or maps a metric this run does not compute.
    """
    if not config.calibration:
        return  # judge.mapping loads numpy: not for a run without a mapping
    from judge.mapping import mapping_for_config

    mapping_for_config(config)


def _first_pass(args: argparse.Namespace) -> tuple[list[BadLine], list[str], Entry | None]:
    """Validate every line; keep the bad ones, the item ids and the first item.

    The requests themselves are read again, one at a time, as grading takes them, so memory
    does not grow with the input (16 copies of the 1,035-item workload held 16,560 requests).
    """
    problems: list[BadLine] = []
    ids: list[str] = []
    first: Entry | None = None
    for entry in entries_of(args, problems):
        first = first or entry
        ids.append(entry[0])
    return problems, ids, first


def _open_writer(out: Path) -> ResultWriter:
    """The output, opened to append (results stream to it; only its earlier lines are kept)."""
    from judge.io import ResultWriter

    writer = ResultWriter(out, keep=False).open()
    if writer.recovered_tail:
        print(f"{out}: dropped a torn last line left by an interrupted run", file=sys.stderr)
    if writer.corrupt_lines:
        print(
            f"{out}: skipped unreadable line(s) {writer.corrupt_lines[:10]}; their items "
            "are graded again",
            file=sys.stderr,
        )
    return writer


def _grade_into(
    args: argparse.Namespace,
    grading: Grading,
    ids: list[str],
    problems: list[BadLine],
    stamp: JudgeStamp,
    early: GradeResult | None,
) -> tuple[Summary, int]:
    """Resume from the output, grade what is missing into it, and count every result.

    Returns:
        The summary of every result in the output, and how many of them this run read from it
        (graded by an earlier run) rather than graded.
    """
    from bonusjudge_client.wire.grading import GradeResult
    from judge.aggregate import Aggregator

    writer = _open_writer(args.out)
    try:
        _resume(args, ids, writer, stamp)
        aggregator = Aggregator()
        for problem in problems:
            aggregator.add_invalid(problem.respondent)
        for obj in writer.done.values():
            aggregator.add(GradeResult.model_validate(obj))
        skip = set(writer.done)
        resumed = len(skip)
        writer.done.clear()  # counted; from here on only their ids matter

        def emit(result: GradeResult) -> None:
            writer.write(result)
            aggregator.add(result)

        if early is not None and early.id not in skip:
            emit(early)  # the service's probe graded it already
            skip.add(early.id)
        total = sum(1 for item_id in ids if item_id not in skip)
        todo = ((item_id, req) for item_id, req in entries_of(args) if item_id not in skip)
        extra = grading.grade(todo, total, emit)
        if args.order == "input":
            order = {item_id: n for n, item_id in enumerate(ids)}
            writer.rewrite_sorted(lambda item_id: order.get(item_id, len(order)))
    finally:
        writer.close()
    return aggregator.summary(**extra), resumed


def _report(
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


def _check_judge(
    args: argparse.Namespace, config: JudgeConfig, budget: Budget | None = None
) -> Preflight | None:
    """Say what an option will not do, and find out whether an LLM judge can work at all.

    Returns:
        The preflight (its warning printed), whose probe request goes on the bill and, under
        ``budget``, against the cap; None when no probe could be sent (no LLM judge, or a cap
        already spent).

    Raises:
        ConfigError: the judge cannot work (missing credentials, unknown model, unreachable,
            refused), or a cascade without an LLM or a band; nothing has been written yet.
    """
    from judge.engine import check_cascade

    check_cascade(config)
    if config.is_embedded:
        if config.rubric != "chartom":
            print(
                f"note: --rubric {config.rubric} has no effect on the embedded matcher (it reads "
                "no prompts); pass --model for an LLM judge that uses it",
                file=sys.stderr,
            )
        return None
    if not {"coverage", "defects"} & set(config.metrics):
        return None  # ROUGE-L and BERTScore only: the judge is never called
    from judge.budget import BudgetExhausted
    from judge.providers.routing import preflight

    call = not args.no_preflight
    held = None
    if budget is not None and call:
        # The probe is a billed request like any other: it holds its place under the cap, and
        # a cap already spent (by the runs before, into the same output) sends not even it.
        try:
            held = budget.reserve(0.0)
        except BudgetExhausted:
            return None
    try:
        checked = preflight(config, call=call)
    except BaseException:
        if budget is not None and held is not None:
            budget.settle(held, 0, answered=False)  # the run ends here: nothing to record
        raise
    if budget is not None and held is not None:
        budget.settle(
            held, checked.requests, prompt_tokens=checked.prompt_tokens,
            completion_tokens=checked.completion_tokens, cost_usd=checked.cost_usd,
            answered=checked.prompt_tokens is not None,
        )
    if checked.warning:
        print(checked.warning, file=sys.stderr)
    return checked


def entries_of(
    args: argparse.Namespace, problems: list[BadLine] | None = None
) -> Iterator[Entry]:
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


def _resume(
    args: argparse.Namespace, ids: list[str], writer: ResultWriter, stamp: JudgeStamp
) -> None:
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
        for item_id, request in entries_of(args)
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


class _LocalGrading:
    """Grading in this process, with the judge of the settings and options."""

    server = False

    def __init__(self, args: argparse.Namespace, settings: Settings) -> None:
        self._args = args
        self._settings = settings
        self._config = settings.judge
        self._budget: Budget | None = None
        self._preflight: Preflight | None = None
        self.capped: str | None = None
        """What the cost cap stopped (spent, items left), when it did."""

    def start(self, first: Entry | None) -> tuple[JudgeStamp, GradeResult | None]:
        """The cost cap, then the judge's check (``_check_judge``); this configuration's stamp."""
        self._budget = run_budget(self._args, self._config)
        self._preflight = _check_judge(self._args, self._config, self._budget)
        config = self._config
        return JudgeStamp.of(config), None

    def grade(
        self, todo: Iterable[Entry], total: int, emit: Callable[[GradeResult], None]
    ) -> dict[str, Any]:
        """Grade ``todo`` with ``Grader.grade_many`` on an event loop of its own."""
        import asyncio  # here, not at the top: `grade --help` does not need it (~50 ms)

        return asyncio.run(self._grade(todo, total, emit))

    async def _grade(
        self, todo: Iterable[Entry], total: int, emit: Callable[[GradeResult], None]
    ) -> dict[str, Any]:
        from tqdm import tqdm

        from judge.budget import BUDGET
        from judge.cache import open_cache
        from judge.engine import Grader
        from judge.retry import RetryBudget

        config = self._config
        cache = open_cache(self._settings, enabled=config.cache)  # the folder, or a shared Redis
        # A run-wide retry cap: a provider failing for everyone costs at most this many extra
        # calls.
        budget = RetryBudget(limit=max(20, total * 2))
        grader = Grader(config, cache=cache, retry_budget=budget)
        bar = tqdm(total=total, disable=self._args.quiet, unit="item", dynamic_ncols=True)
        try:
            # Heavy imports and model loads before grading: the metric batch threads would
            # otherwise make their first imports concurrently, which crashes on a cold start.
            await grader.prepare(config)
            # What is loaded by now (modules, rubrics, schemas, encoders) lives as long as the
            # run: frozen, the cyclic collector stops walking it on every full collection, which
            # cost 10-20% of the CPU of a judge call. Frozen objects are still freed by reference
            # count.
            gc.freeze()
            fed = [0]
            left = 0
            if self._budget is not None:
                BUDGET.set(self._budget)
                todo = _until_capped(todo, self._budget, fed)
            async for result in grader.grade_many(todo, config=config):
                emit(result)
                bar.update(1)
                left += any(r.endswith(": budget_exhausted") for r in result.unscored_reasons)
        finally:
            bar.close()
            await grader.aclose()
            cache.close()
        if self._budget is not None and self._budget.exhausted:
            left += total - fed[0]
            self.capped = capped_message(self._budget, left, Path(self._args.out))
        stats = grader.stats.as_dict()
        # The preflight's probe is on the bill: the provider charged it like any judge call.
        from judge.providers.base import Preflight

        probe = self._preflight or Preflight()
        cost = (stats["cost_usd"] or 0.0) + (probe.cost_usd or 0.0)
        return {
            "judge_calls": stats["judge_calls"] + probe.requests,
            "cache_hits": stats["cache_hits"],
            "metric_cache_hits": stats["metric_cache_hits"],
            "reasks": stats["reasks"],
            "retries_by_reason": stats["retries_by_reason"],
            "prompt_tokens": stats["prompt_tokens"] + (probe.prompt_tokens or 0),
            "completion_tokens": stats["completion_tokens"] + (probe.completion_tokens or 0),
            "cached_tokens": stats["cached_tokens"],
            "cost_usd": cost or None,
            "retries": stats["retries"],
            "retry_budget": {
                "limit": budget.limit, "spent": budget.spent, "refused": budget.refused
            },
            "breaker": grader.caller.breaker_for(grader.config).snapshot(),
        }

    def close(self) -> None:
        """Nothing to release: ``grade`` closes the grader and the cache it opened."""


def run_budget(args: argparse.Namespace, config: JudgeConfig) -> Budget | None:
    """The budget of ``--max-cost``/``--max-calls`` over the output file, or None.

    The caps are totals for ``--out``: what earlier runs spent into it (its
    :class:`~judge.budget.SpendLog`) counts against them. Every run that sends requests keeps
    those books, capped or not, so None only when no request can be sent and no cap is set.

    Raises:
        ConfigError: a negative or non-finite cap, or ``--max-cost`` for a model without a price
            (no ``--price-in``/``--price-out``); nothing has been written yet.
        InputError: only one of the prices, or a negative one.
    """
    import math

    max_cost, max_calls = args.max_cost, args.max_calls
    for flag, value in (("--max-cost", max_cost), ("--max-calls", max_calls)):
        if value is not None and (value < 0 or not math.isfinite(value)):
            raise ConfigError(
                f"{flag}: a cap is a finite number >= 0 (got {value:g}); leave it out for no cap",
                field=flag[2:].replace("-", "_"),
            )
    sends = not config.is_embedded and bool({"coverage", "defects"} & set(config.metrics))
    if max_cost is None and max_calls is None and not sends:
        return None
    from judge.budget import Budget, Cap, SpendLog

    books = SpendLog(Path(args.out))
    cap = Cap(
        "--max-cost", max_cost=max_cost, max_calls=max_calls,
        spent_cost=books.before_cost, spent_calls=books.before_calls, on_spend=books.add,
    )
    if max_cost is None:
        return Budget([cap])
    from judge.estimate import prices_for, request_cost

    prices = prices_for(config.model, args.price_in, args.price_out)
    if prices is None and not config.is_embedded:
        raise ConfigError(
            f"--max-cost: no price for {config.model}: pass --price-in and --price-out (USD per "
            "million tokens)",
            field="max_cost",
        )
    if prices is None:  # the embedded judge sends nothing: nothing to price
        return Budget([cap])
    return Budget([cap], request_cost(prices), prices)


def _until_capped(todo: Iterable[Entry], budget: Budget, fed: list[int]) -> Iterator[Entry]:
    """``todo`` until ``budget`` refuses a request: no item is started after that.

    ``fed[0]`` counts the items handed over, so the items left can be told.
    """
    for entry in todo:
        if budget.exhausted:
            return
        fed[0] += 1
        yield entry


def capped_message(budget: Budget, left: int, out: Path) -> str:
    """The closing line of a run the cap stopped: what was spent against it, and what is left.

    The caps are totals for ``out``: the spend said is every run's into it.
    """
    cap = next(cap for cap in budget.caps if cap.exhausted)
    limits = []
    if cap.max_cost is not None:
        limits.append(f"${cap.spent_cost:.6f} spent into {out} of --max-cost ${cap.max_cost:g}")
    if cap.max_calls is not None:
        limits.append(
            f"{cap.spent_calls} request(s) sent into {out} of --max-calls {cap.max_calls}"
        )
    return (
        f"{PROG}: stopped at the cost cap: {'; '.join(limits)} (the caps count every run into "
        f"that output); {left} item(s) left (unscored budget_exhausted or not started): re-run "
        "with a higher cap to grade them"
    )


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


def server_client(args: argparse.Namespace) -> JudgeClient:
    """The client for ``--server``; refuses options the service would silently ignore.

    Raises:
        ConfigError: a local-only option was given with ``--server``.
    """
    from bonusjudge_client import JudgeClient

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


def server_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    """The judge options given on the command line, as the service's per-request overrides."""
    judge = {
        name: getattr(args, name) for name in JudgeOverrides.model_fields
        if getattr(args, name, None) is not None
    }
    return judge or None


def with_id(item_id: str, request: GradeRequest) -> GradeRequest:
    """The request with its id set (the line number when the input gave none)."""
    return request if request.id else request.model_copy(update={"id": item_id})


class _ServerGrading:
    """Grading through a bonusjudge service (``--server``), with its judge.

    An item the service fails is reported on stderr and left for the next run; it never stops
    the others.
    """

    server = True

    def __init__(self, args: argparse.Namespace, config: JudgeConfig) -> None:
        self._args = args
        self._config = config
        self._client = server_client(args)
        self._overrides = server_overrides(args)
        self._probe: GradeResult | None = None

    def start(self, first: Entry | None) -> tuple[JudgeStamp, GradeResult | None]:
        """Grade the first item through the service, to learn its judge.

        The service's configuration hash is known only from its answer: the first item is graded
        before any output exists (so an unreachable service leaves no file behind). Its result is
        written later if the output does not have it yet; otherwise it costs the service only a
        cache hit.

        Raises:
            ConfigError: the service cannot be reached or refused the request.
        """
        from bonusjudge_client import JudgeClientError

        metrics = list(self._config.metrics)
        if first is None:
            return JudgeStamp("", self._config.judge_version, metrics), None
        item_id, request = first
        try:
            self._probe = self._client.grade(with_id(item_id, request), judge=self._overrides)
        except JudgeClientError as exc:
            raise ConfigError(f"server: {exc}", field="server") from exc
        # The service's judge, as its answer names it (its matcher may not be ours).
        provenance = self._probe.provenance
        return JudgeStamp(str(provenance.config_hash), provenance.judge_version, metrics), (
            self._probe
        )

    def grade(
        self, todo: Iterable[Entry], total: int, emit: Callable[[GradeResult], None]
    ) -> dict[str, Any]:
        """Grade ``todo`` with ``JudgeClient.grade_stream``, emitting each result as it arrives.

        Returns:
            The judge calls the service made for this run (the probe's included), summed from
            the results' provenance: this process made none.
        """
        from bonusjudge_client import ClientItemError
        from judge.aggregate import ProvenanceCalls

        calls = ProvenanceCalls()
        if self._probe is not None:
            calls.add(self._probe)
        failed = 0
        requests = [with_id(item_id, req) for item_id, req in todo]
        for _, outcome in self._client.grade_stream(
            requests, judge=self._overrides, progress=not self._args.quiet
        ):
            if isinstance(outcome, ClientItemError):
                failed += 1
                print(f"item {outcome}: not graded (the next run tries it again)",
                      file=sys.stderr)
                continue
            emit(outcome)
            calls.add(outcome)
        if failed:
            print(f"{failed} item(s) failed at the service and were not written", file=sys.stderr)
        return calls.counters()

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()
