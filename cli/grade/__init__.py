"""``bonusjudge grade IN.jsonl --out OUT.jsonl``: grade a CharToM-format file, resumably.

Grades locally (the judge of the settings and options; ``cli.grade.local``) or, with
``--server URL``, through a bonusjudge service (``cli.grade.server``); ``cli.grade.report`` prints
and writes what a run did. Lines are written as items finish, so a killed run keeps them; the
next run grades only what is missing or no longer holds (other content, judge or metrics).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cli.common import (
    EXIT_BAD_LINES,
    add_fail_on_bad_lines_option,
    add_judge_options,
    add_model_options,
    check_outputs,
    no_items,
    settings_from_args,
)
from cli.estimate import add_estimate_options, check_estimate_options, run_estimate
from cli.grade.local import LocalGrading
from cli.grade.report import report
from cli.grade.server import ServerGrading, server_client, server_overrides, with_id
from core.errors import ConfigError
from core.jsonl import BadLine
from judge.config import CHARTOM_WINDOWS, JudgeConfig
from judge.resume import JudgeStamp, stale_reason

if TYPE_CHECKING:
    from bonusjudge_client.wire.grading import GradeRequest, GradeResult
    from judge.aggregate import Summary
    from judge.io import ResultWriter

EXIT_BUDGET = 3
"""The exit code of a run stopped by ``--max-cost`` or ``--max-calls`` (what finished is written;
a re-run with a higher cap grades the rest)."""



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
        ServerGrading(args, settings.judge) if args.server else LocalGrading(args, settings)
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
    report(args, settings.judge, summary, problems, stamp, round(time.monotonic() - started, 3),
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


