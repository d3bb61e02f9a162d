"""``bonusjudge calibrate``: agreement of judges and metrics with human ratings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from calibration.runner import run_calibration
    from calibration.sets import load_set, load_shared_set
    from judge.cli import settings_from_args

    settings = settings_from_args(args)
    path = Path(args.set)
    dataset = load_set(path) if path.exists() else load_shared_set(args.set)
    for problem in dataset.problems:
        print(f"{dataset.path}: {problem}", file=sys.stderr)
    metrics = [m.strip() for m in args.calibration_metrics.split(",") if m.strip()]
    unknown = sorted(set(metrics) - {"rouge_l", "bertscore", "coverage"})
    if unknown:
        print(f"bonusjudge: error: unknown metric(s) {unknown} [metrics]", file=sys.stderr)
        return 2
    if "coverage" in metrics:
        from judge.provider import preflight

        # Every LLM judge is checked before the first pass: a missing key or a mistyped
        # model would otherwise cost a whole pass of unscored items.
        for model in args.judge or [settings.judge.model]:
            config = settings.judge.model_copy(update={"model": model})
            if not config.is_embedded:
                warning = preflight(config)
                if warning:
                    print(warning, file=sys.stderr)
    run = run_calibration(
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
    print(run.files.markdown.read_text(encoding="utf-8"))
    for label, figures in run.summaries.items():
        if label == "metrics":
            continue  # no judge: nothing is unscored
        print(
            f"{label}: {figures['items']} items, {figures['unscored']} unscored "
            f"(rate {_pct(figures['unscored_rate'])}); BPC {_pct(figures['bpc'])} over scored "
            f"items, bpc_all {_pct(figures['bpc_all'])} over all"
        )
        for warning in figures["warnings"]:
            print(f"warning: {warning}")
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in run.timings.items())
    print(f"\nreport: {run.files.json} ({timings})")
    return 0


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def register(subparsers: Any) -> None:
    """Add the ``calibrate`` subcommand to the ``bonusjudge`` parser."""
    from judge.cli import add_judge_options

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "calibrate", help="correlate judges and metrics with human ratings"
    )
    parser.add_argument(
        "set", help="calibration JSONL, or a shared set's name (e.g. kpqa/nrqa_mhpgm, evouna_tq)"
    )
    parser.add_argument(
        "--judge",
        action="append",
        help="judge model to calibrate (repeat for several; default: settings)",
    )
    parser.add_argument(
        "--metrics",
        dest="calibration_metrics",
        default="rouge_l,bertscore,coverage",
        help="comma list of rouge_l, bertscore, coverage",
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
    add_judge_options(parser, metrics=False)
    parser.set_defaults(func=_cmd_calibrate, context=None)
