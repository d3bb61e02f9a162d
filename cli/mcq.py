"""The ``bonusjudge mcq`` subcommand: score a multiple-choice run and print per-group accuracy.

Wire it into the main CLI with ``register(subparsers)``; the subparser sets ``func`` to a callable
taking the parsed ``argparse.Namespace`` and returning the exit code. Run alone with
``python -m cli.mcq INPUT.jsonl --out OUT.jsonl --summary SUMMARY.json``.

Exit codes: 0 scored; 1 bad input lines were skipped and ``--fail-on-bad-lines`` was given;
2 the input could not be read, holds no valid item, or an option is invalid.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import judge
from api.settings import SERVICE_ONLY
from bonusjudge_client.wire.mcq_defaults import DEFAULT_FUZZY_THRESHOLD
from bonusjudge_client.wire.options import comma_list
from cli.common import (
    EXIT_BAD_LINES,
    add_api_key_env_option,
    add_fail_on_bad_lines_option,
    add_model_options,
    api_key_from_env,
    check_judge_name,
    check_outputs,
    no_items,
    pct,
)
from core.errors import JudgeError
from judge.config import JudgeConfig, Settings, load_settings

if TYPE_CHECKING:
    from bonusjudge_client.wire.mcq import McqMetrics, McqSummary

__all__ = [
    "add_arguments",
    "default_out",
    "format_report",
    "main",
    "register",
    "run",
    "summary_for",
]

_MAX_BAD_LINES_SHOWN = 20
# The bundled examples' folder inside the installed package: never a place to write results.
_PACKAGE_DATA = Path(judge.__file__).resolve().parent / "data"


def _threshold(text: str) -> float:
    """A rapidfuzz score between 0 and 100, or 101 (fuzzy matching off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 101:
        raise argparse.ArgumentTypeError("must be between 0 and 100 (101 disables fuzzy)")
    return value


def default_out(input_path: Path) -> Path:
    """Where result lines go without ``--out``: ``INPUT.mcq.jsonl`` next to the input.

    An input from the package's own data folder (the bundled examples) is scored into the
    working directory instead, so a run never writes into the installed package.
    """
    out = input_path.with_suffix(".mcq.jsonl")
    if input_path.resolve().is_relative_to(_PACKAGE_DATA):
        return Path(out.name)
    return out


def summary_for(out: Path) -> Path:
    """Where the summary goes without ``--summary``: ``<out stem>.summary.json`` next to ``out``."""
    return out.with_name(f"{out.stem}.summary.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``mcq`` options to a parser (the subcommand's or a standalone one)."""
    parser.add_argument("input", type=Path, help="JSONL file, one item per line")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="result lines (default: INPUT.mcq.jsonl; in the working directory for the "
        "package's bundled examples)",
    )
    parser.add_argument(
        "--summary",
        type=Path,
        default=None,
        help="summary JSON (default: next to --out, as <out stem>.summary.json)",
    )
    parser.add_argument(
        "--aggregate",
        choices=("mean", "majority"),
        default="mean",
        help="combine permuted runs of a question by mean accuracy (CogToM) or majority answer "
        "(ToMBench); default: mean",
    )
    parser.add_argument(
        "--fuzzy-threshold",
        type=_threshold,
        default=DEFAULT_FUZZY_THRESHOLD,
        help=f"rapidfuzz score an option's text must reach (default {DEFAULT_FUZZY_THRESHOLD:g}; "
        "101 disables fuzzy matching)",
    )
    parser.add_argument(
        "--group-by",
        default=None,
        help="comma-separated breakdown fields (default: task, ability, tom_dimension, language, "
        "and every tags key)",
    )
    add_fail_on_bad_lines_option(parser)
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.add_argument(
        "--llm-model",
        default=None,
        help="judge model (litellm string) that reads answers the rules cannot parse; "
        "its readings are reported as `llm` (default: rules only)",
    )
    # The judge options --llm-model needs, as `grade` has them: the judge's own messages (missing
    # credentials, no base URL) suggest --api-key-env, --api-base and --transport.
    add_model_options(parser, JudgeConfig, ["api_base"])
    add_api_key_env_option(parser)
    add_model_options(parser, JudgeConfig, ["transport"])
    add_model_options(parser, Settings, ["cache_dir"])


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``mcq`` subcommand to the main ``bonusjudge`` parser."""
    parser = subparsers.add_parser(
        "mcq",
        help="score multiple-choice answers (ToMBench, CogToM, XToM, ToMValley, CharToM MC)",
        description="Extract the chosen option from each response, score it, and summarise "
        "accuracy with breakdowns.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def _table(
    field: str, groups: dict[str, McqMetrics], macro: float | None, ungrouped: int | None = None
) -> list[str]:
    """One breakdown as aligned text: questions, result lines, accuracy, unparseable lines.

    The ``(macro)`` row says how many lines had no value for the field (``ungrouped``), since
    the average leaves them out.
    """
    width = max(len(field), *(len(name) for name in groups), len("(macro)"))
    lines = [
        f"{field:<{width}}  {'questions':>9}  {'lines':>5}  {'accuracy':>8}  {'unparseable':>11}"
    ]
    for name, metrics in groups.items():
        lines.append(
            f"{name:<{width}}  {metrics.questions:>9}  {metrics.items:>5}  "
            f"{pct(metrics.accuracy):>8}  {metrics.unparseable:>11}"
        )
    if macro is not None:
        row = f"{'(macro)':<{width}}  {'':>9}  {'':>5}  {pct(macro):>8}"
        if ungrouped is not None:
            row += f"  ungrouped: {ungrouped}"
        lines.append(row)
    return lines


def format_report(summary: McqSummary) -> str:
    """The human-readable report: totals, extraction methods, then one table per breakdown."""
    methods = ", ".join(f"{name} {count}" for name, count in summary.methods.items())
    lines = [
        f"items {summary.items}  questions {summary.questions}  accuracy {pct(summary.accuracy)}"
        f"  (parsed only {pct(summary.accuracy_parsed)})",
        f"unparseable {summary.unparseable} ({pct(summary.unparseable_rate)})  "
        f"skipped lines {len(summary.bad_lines)}",
        f"extraction: {methods}",
    ]
    if summary.permutation is not None:
        perm = summary.permutation
        lines.append(
            f"permutations: {perm.aggregate} over {perm.min_runs}-{perm.max_runs} runs, "
            f"position consistency {pct(perm.position_consistency)}, ties {perm.ties}, "
            f"no votes {perm.no_votes}"
        )
    if summary.coherent is not None:
        lines.append(
            f"coherent (story-level): {summary.coherent.coherent}/{summary.coherent.stories} "
            f"= {pct(summary.coherent.accuracy)}"
        )
    if summary.exact_match is not None:
        lines.append(
            f"slot exact match: {summary.exact_match.exact}/{summary.exact_match.groups} "
            f"= {pct(summary.exact_match.exact_match)}"
        )
    if summary.multi_select is not None:
        ms = summary.multi_select
        lines.append(
            f"multi-select: micro-F1 {ms.micro_f1:.3f}  macro-F1 {ms.macro_f1:.3f}  "
            f"exact {pct(ms.exact_set)}"
        )
    if summary.cross_lingual is not None:
        cl = summary.cross_lingual
        lines.append(
            f"cross-lingual ({', '.join(cl.languages)}; {cl.instances} ids): consistently right "
            f"{cl.consistently_right}, consistently wrong {cl.consistently_wrong}, inconsistent "
            f"{cl.inconsistent}"
        )
    for field, groups in summary.breakdowns.items():
        lines.append("")
        lines.extend(_table(field, groups, summary.macro.get(field), summary.ungrouped.get(field)))
    if summary.dimension_over_abilities:
        lines.append("")
        lines.append("ability view (per dimension, mean over its abilities)")
        for dimension, value in summary.dimension_over_abilities.items():
            lines.append(f"  {dimension}: {pct(value)}")
        lines.append(f"  (mean): {pct(summary.ability_view)}")
    return "\n".join(lines)


def _llm_extractor(args: argparse.Namespace) -> Any:
    """The judge-backed extractor when ``--llm-model`` is given, else None (rules only)."""
    if not getattr(args, "llm_model", None):
        return None
    check_judge_name(args.llm_model, "--llm-model", "llm_model")
    from judge.cache import open_cache
    from judge.engine import Grader
    from judge.mcq.llm import JudgeExtractor
    from judge.providers.routing import preflight

    given = {
        "api_base": args.api_base,
        "transport": args.transport,
        "api_key": api_key_from_env(args),
    }
    config = JudgeConfig.model_validate(
        {"model": args.llm_model, **{name: v for name, v in given.items() if v is not None}}
    )
    # A judge that cannot work is found out before any answer is read (one line, exit 2).
    warning = preflight(config).warning
    if warning:
        print(warning, file=sys.stderr)
    # BONUSJUDGE_CACHE_URL (or the settings file's cache_url) shares the judge's readings.
    cache = open_cache(
        load_settings(model=Settings, also_known=SERVICE_ONLY, cache_dir=args.cache_dir)
    )
    return JudgeExtractor(Grader(config, cache=cache))


def _check_has_items(path: Path, err_stream: TextIO) -> None:
    """Refuse an input without a valid item before any output is written or judge asked.

    Reads up to the first valid line (the whole file only when there is none), so scoring a
    real run reads its head twice, not all of it.

    Raises:
        InputError: (``input``) the file is empty or every line is invalid; the invalid lines
            are listed on ``err_stream`` first, as a run lists the lines it skipped.
    """
    from core.jsonl import BadLine
    from judge.mcq.runner import read_items

    bad: list[BadLine] = []
    for _, parsed in read_items(path):
        if not isinstance(parsed, BadLine):
            return
        bad.append(parsed)
    for line in bad[:_MAX_BAD_LINES_SHOWN]:
        print(f"{path}:{line.line}: skipped: {line.message}", file=err_stream)
    if len(bad) > _MAX_BAD_LINES_SHOWN:
        print(f"... and {len(bad) - _MAX_BAD_LINES_SHOWN} more invalid lines", file=err_stream)
    raise no_items(path, len(bad))


def run(
    args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Execute the subcommand for parsed arguments; return the exit code."""
    out_stream = stdout or sys.stdout
    err_stream = stderr or sys.stderr
    input_path: Path = args.input
    out = args.out or default_out(input_path)
    summary_path = args.summary or summary_for(out)
    group_by = list(comma_list(args.group_by)) if args.group_by else None
    from judge.io import check_input_file
    from judge.mcq.runner import score_file

    try:
        # Checked before anything is created or judged: a mistake leaves no output file behind.
        check_input_file(input_path, "input")
        check_outputs({"out": out, "summary": summary_path})
        _check_has_items(input_path, err_stream)
        summary = score_file(
            input_path,
            out,
            summary_path,
            aggregate=args.aggregate,
            fuzzy_threshold=args.fuzzy_threshold,
            group_by=group_by,
            llm_extractor=_llm_extractor(args),
        )
    except JudgeError as exc:
        print(f"bonusjudge mcq: error: {exc}", file=err_stream)
        return 2
    for bad in summary.bad_lines[:_MAX_BAD_LINES_SHOWN]:
        print(f"{input_path}:{bad.line}: skipped: {bad.error}", file=err_stream)
    if len(summary.bad_lines) > _MAX_BAD_LINES_SHOWN:
        hidden = len(summary.bad_lines) - _MAX_BAD_LINES_SHOWN
        print(f"... and {hidden} more skipped lines (see {summary_path})", file=err_stream)
    if not args.quiet:
        print(format_report(summary), file=out_stream)
        print(f"\nwrote results to {out}", file=out_stream)
        print(f"wrote summary to {summary_path}", file=out_stream)
    return EXIT_BAD_LINES if summary.bad_lines and args.fail_on_bad_lines else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mcq`` command standalone (``python -m cli.mcq``)."""
    parser = argparse.ArgumentParser(
        prog="bonusjudge mcq", description="Score multiple-choice answers and summarise accuracy."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
