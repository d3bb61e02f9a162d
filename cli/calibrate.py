"""``bonusjudge calibrate``: agreement of judges and metrics with human ratings.

The ``calibration`` package (scipy, scikit-learn, matplotlib) is imported only when the command
runs, so ``bonusjudge --help`` does not pay for it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bonusjudge_client.wire.options import comma_list
from bonusjudge_client.wire.vocab import CALIBRATION_METRICS
from cli.common import (
    add_judge_options,
    check_judge_name,
    check_outputs,
    pct,
    settings_from_args,
)
from core.errors import ConfigError, InputError


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``calibrate`` subcommand to the ``bonusjudge`` parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "calibrate", help="correlate judges and metrics with human ratings"
    )
    parser.add_argument(
        "set",
        help="calibration JSONL, a CSV/TSV table (columns question, reference, response, "
        "human_score; optional id, score_scale, bonus_points...), or a shared set's name "
        "(e.g. kpqa/nrqa_mhpgm, evouna_tq)",
    )
    parser.add_argument(
        "--scale",
        help="the human scores' scale (e.g. 1-5, 0/1, 0.2-1.0), over the set's score_scale; "
        "needed for a CSV without a score_scale column",
    )
    parser.add_argument(
        "--judge",
        action="append",
        help="judge model to calibrate (repeat for several; default: settings)",
    )
    parser.add_argument(
        "--metrics",
        dest="calibration_metrics",
        default=",".join(CALIBRATION_METRICS),
        help="comma list of " + ", ".join(CALIBRATION_METRICS),
    )
    parser.add_argument("--limit", type=int, help="use only the first N items")
    parser.add_argument(
        "--out", type=Path, default=Path("out/calibration"), help="report folder (resumable)"
    )
    parser.add_argument(
        "--retest",
        action="store_true",
        help="grade each judge twice with the cache off (test-retest)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument(
        "--quiet", action="store_true", help="no progress bars (they go to stderr, not the report)"
    )
    add_judge_options(parser, metrics=False, cascade=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Grade the set with each judge, correlate with the human scores and print the report.

    Raises:
        ConfigError: an invalid option or setting, or a judge that cannot work.
        InputError: the set cannot be read.
    """
    from calibration.runner import run_calibration
    from calibration.sets import load_set, load_shared_set

    settings = settings_from_args(args)
    for model in args.judge or []:
        check_judge_name(model, "--judge", "judge")
    # Before anything is read, created or judged (one rule with grade and mcq).
    check_outputs({}, {"out": args.out})
    path = Path(args.set)
    if path.exists():
        dataset = load_set(path, scale=args.scale)
    elif args.scale is not None:
        raise ConfigError(
            f"scale: --scale is for a set file; {args.set!r} is not a file (a shared set "
            "declares its scale)",
            field="scale",
        )
    else:
        dataset = load_shared_set(args.set)
    if not dataset.items:
        # Refused before the report folder or any grade file exists: nothing to calibrate on.
        first = "; ".join(str(p) for p in dataset.problems[:3]) or "the file is empty"
        raise InputError(
            f"set: no line of {dataset.path} loaded ({len(dataset.problems)} bad: {first})",
            field="set",
        )
    for problem in dataset.problems:
        print(f"{dataset.path}: {problem}", file=sys.stderr)
    metrics = list(comma_list(args.calibration_metrics))
    unknown = sorted(set(metrics) - set(CALIBRATION_METRICS))
    if unknown:
        raise ConfigError(f"unknown metric(s) {unknown}", field="metrics")
    if "coverage" in metrics:
        from judge.providers.routing import preflight

        # Every LLM judge is checked before the first pass: a missing key or a mistyped
        # model would otherwise cost a whole pass of unscored items.
        for model in args.judge or [settings.judge.model]:
            config = settings.judge.model_copy(update={"model": model})
            if not config.is_embedded:
                warning = preflight(config).warning
                if warning:
                    print(warning, file=sys.stderr)
    result = run_calibration(
        dataset,
        settings=settings,
        judges=args.judge or [],
        metrics=metrics,
        limit=args.limit,
        out_dir=args.out,
        retest=args.retest,
        seed=args.seed,
        n_resamples=args.resamples,
        progress=not args.quiet,
    )
    print(result.files.markdown.read_text(encoding="utf-8"))
    for label, figures in result.summaries.items():
        if label == "metrics":
            continue  # no judge: nothing is unscored
        print(
            f"{label}: {figures['items']} items, {figures['unscored']} unscored "
            f"(rate {pct(figures['unscored_rate'])}); BPC {pct(figures['bpc'])} over scored "
            f"items, bpc_all {pct(figures['bpc_all'])} over all"
        )
        for warning in figures["warnings"]:
            print(f"warning: {warning}")
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    print(f"\nreport: {result.files.json} ({timings})")
    return 0
