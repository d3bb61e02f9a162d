"""Fit the cascade judge's uncertain bands on the shared sets and ship them with the matcher.

Run as ``python -m calibration.fit.cascade [--data-dir DIR] [--targets 0.9,0.95,0.97]``.

The cascade judge (:mod:`judge.cascade`) lets the embedded matcher decide each point it is sure
of and sends an item with any point in the matcher's *uncertain band* to an LLM judge. A band is
``[low, high]`` around the model's threshold: below ``low`` the matcher is sure the point is not
covered, above ``high`` sure it is. This script chooses the bands:

1. It reads the human-rated sets and builds the matcher's features exactly as
   :mod:`calibration.fit.matcher` does (same rows, same embedding cache), and takes the
   *out-of-fold* probabilities of its cross-validation (5-fold, grouped by question): the
   probabilities the shipped models give points they were not fitted on. The Chinese models'
   rows are the English sets with their features (no Chinese set is rated), as in their fit.
2. Per model kind (English short points, English long points, Chinese, Chinese without the
   multilingual encoder) and per target agreement, it chooses the band that leaves the most
   points sure while the sure verdicts agree with people (labels cut at 0.5) at least at the
   target. Agreement and share are weighted so that each set counts as its fit weight, not as
   its number of rows (EVOUNA's 10,000 easy rows would otherwise buy a wide sure zone that the
   harder sets pay for).
3. It reports, per set, the share of points routed to the LLM and the agreement of the sure
   verdicts with people, out of fold: each fold's rows are judged with bands chosen on the
   other folds' rows only. K-QA's key points are also counted per answer (an answer goes to the
   LLM when any of its statements is uncertain), which is what the cascade routes.
4. It writes the bands fitted on every training row into the ``cascade`` section of
   ``judge/data/matcher_params.json`` (the rest of the file is left as it is), so they ship,
   and are hashed, with the matcher's parameters.

The K-QA answer-level rows (an answer's share of statements, not a verdict per statement) are
not a point-level label and are left out of both the fit and the table.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from calibration.fit.matcher import (
    DEFAULT_CACHE_DIR,
    N_FOLDS,
    SEED,
    SETS,
    _lexical_examples,
    _trains,
    build_examples,
    cross_validate,
    fit_parser,
    load_examples,
    run_fit,
)
from calibration.fit.multilingual import multilingual_examples
from calibration.fit.types import Example, FloatArray, SetSpec
from core import markdown
from judge.matcher import (
    FULL_FEATURES,
    LEXICAL_FEATURES,
    LONG_FEATURES,
    MODEL_KINDS,
    MULTILINGUAL_FEATURES,
    PARAMS_PATH,
    ModelKind,
    load_params,
)

__all__ = ["DEFAULT_TARGETS", "KindRows", "fit_band", "main", "run"]

DEFAULT_TARGETS: tuple[float, ...] = (0.9, 0.95, 0.97)
"""The target agreements a fit ships bands for (``--cascade-agreement`` picks one; 0.95 is the
default)."""

SUBSAMPLE: dict[str, int] = {"evouna_tq": 200, "medquad": 12}
"""Questions drawn (seeded, as the matcher's fit draws MedQuAD's) from the sets whose texts
dominate the encoding time: EVOUNA's 10,000 answers and MedQuAD's long ones. The whole fit
encodes 41,000 texts, about an hour at the 11 texts/s a loaded 2-core machine gives; this
draw encodes 14,000. The fold models are then fitted on the drawn rows (not the shipped
models' rows), which is what the reported out-of-fold figures are of."""

GRID = 400
"""Candidate band edges per side (quantiles of the probabilities on that side of the
threshold): finer than the probabilities' own resolution on the smaller sets."""

BoolArray = npt.NDArray[np.bool_]


@dataclass
class KindRows:
    """The out-of-fold probabilities of the rows one model kind decides, with their labels.

    Attributes:
        kind: The model kind.
        threshold: The shipped model's threshold (the band lies around it).
        sets: Each row's set name.
        items: Each row's answer (question and response): rows of one answer are routed together.
        probability: Each row's out-of-fold probability.
        positive: Whether people credited the row (label >= 0.5).
        weight: Each row's weight (its set's fit weight shared by the set's rows).
        fold: Each row's cross-validation fold.
        train: Whether the row may choose a band (a training row of a training set).
    """

    kind: ModelKind
    threshold: float
    sets: npt.NDArray[np.str_]
    items: npt.NDArray[np.str_]
    probability: FloatArray
    positive: BoolArray
    weight: FloatArray
    fold: npt.NDArray[np.int_]
    train: BoolArray


def fit_band(
    probability: FloatArray,
    positive: BoolArray,
    weight: FloatArray,
    threshold: float,
    target: float,
) -> tuple[float, float]:
    """The band ``[low, high]`` around ``threshold`` leaving the most weight sure at ``target``.

    Sure rows (``p < low`` called not covered, ``p > high`` called covered) must agree with
    people at least at ``target`` (weighted); among the bands that do, the one with the most
    sure weight wins. ``(0, 1)`` (nothing sure) when no band reaches the target.

    Args:
        probability: The rows' probabilities.
        positive: The people's verdicts.
        weight: The rows' weights.
        threshold: The model's threshold; ``low <= threshold <= high``.
        target: The agreement the sure verdicts must reach, in (0, 1).

    Returns:
        ``(low, high)``, rounded to 4 decimals and still around the threshold.
    """
    below = probability[probability <= threshold]
    above = probability[probability >= threshold]
    quantiles = np.linspace(0.0, 1.0, GRID + 1)
    lows = np.unique(
        np.concatenate([[0.0, threshold], np.quantile(below, quantiles) if len(below) else []])
    )
    highs = np.unique(
        np.concatenate([[threshold, 1.0], np.quantile(above, quantiles) if len(above) else []])
    )
    # Sure weight and disagreeing weight of each edge alone; a band's are the sums of its two.
    low_sure = np.array([weight[probability < low].sum() for low in lows])
    low_wrong = np.array([weight[(probability < low) & positive].sum() for low in lows])
    high_sure = np.array([weight[probability > high].sum() for high in highs])
    high_wrong = np.array([weight[(probability > high) & ~positive].sum() for high in highs])
    sure = low_sure[:, None] + high_sure[None, :]
    wrong = low_wrong[:, None] + high_wrong[None, :]
    feasible = wrong <= (1.0 - target) * sure + 1e-12
    feasible &= sure > 0
    if not feasible.any():
        return 0.0, 1.0
    masked = np.where(feasible, sure, -1.0)
    i, j = np.unravel_index(int(np.argmax(masked)), masked.shape)
    # Rounding must not move an edge across the threshold (the file's check refuses that).
    low = min(round(float(lows[i]), 4), threshold)
    high = max(round(float(highs[j]), 4), threshold)
    return low, min(high, 1.0)


def _folds(examples: Sequence[Example]) -> npt.NDArray[np.int_]:
    """Each row's fold, as :func:`calibration.fit.matcher.cross_validate` splits them."""
    from sklearn.model_selection import GroupKFold

    groups = np.array([ex.group for ex in examples])
    fold = np.zeros(len(examples), dtype=int)
    split = GroupKFold(n_splits=N_FOLDS, shuffle=True, random_state=SEED)
    for k, (_, test) in enumerate(split.split(np.zeros(len(examples)), groups=groups)):
        fold[test] = k
    return fold


def _rows(
    kind: ModelKind,
    threshold: float,
    examples: Sequence[Example],
    scores: FloatArray,
    keep: BoolArray,
    fold: npt.NDArray[np.int_],
    specs: dict[str, SetSpec],
) -> KindRows:
    """The rows of ``examples`` selected by ``keep``, as one kind's band data."""
    index = np.flatnonzero(keep)
    chosen = [examples[int(i)] for i in index]
    counts: dict[str, int] = {}
    for ex in examples:
        if _trains(ex, specs):
            counts[ex.set_name] = counts.get(ex.set_name, 0) + 1
    return KindRows(
        kind=kind,
        threshold=threshold,
        sets=np.array([ex.set_name for ex in chosen]),
        items=np.array([f"{ex.group}\0{ex.options[0][0].response}" for ex in chosen]),
        probability=scores[index],
        positive=np.array([ex.label >= 0.5 for ex in chosen], dtype=bool),
        weight=np.array(
            [specs[ex.set_name].weight / counts.get(ex.set_name, 1) for ex in chosen]
        ),
        fold=fold[index],
        train=np.array([_trains(ex, specs) for ex in chosen], dtype=bool),
    )


def kind_rows(
    examples: list[Example],
    multilingual: list[Example] | None,
    specs: dict[str, SetSpec],
    log: Callable[[str], None] = print,
) -> dict[ModelKind, KindRows]:
    """Cross-validate the matcher's models and split the out-of-fold rows by model kind.

    Args:
        examples: Rows with their English features (:func:`build_examples`).
        multilingual: The same rows with the multilingual encoder's features, or None to leave
            the Chinese model out.
        specs: The sets by name.
        log: Progress printer.

    Returns:
        Per model kind, its rows (K-QA's answer-level rows left out).
    """
    params = load_params()
    point_level = np.array([ex.aggregate != "mean" for ex in examples], dtype=bool)
    fold = _folds(examples)
    started = time.perf_counter()
    scores, _, long_rows = cross_validate(examples, FULL_FEATURES, specs, LONG_FEATURES)
    lexical = _lexical_examples(examples)
    lex_scores, _, _ = cross_validate(lexical, LEXICAL_FEATURES, specs)
    parts: dict[ModelKind, tuple[list[Example], FloatArray, BoolArray]] = {
        "full": (examples, scores, point_level & ~long_rows),
        "long": (examples, scores, point_level & long_rows),
        "lexical": (lexical, lex_scores, point_level),
    }
    if multilingual is not None:
        ml_scores, _, _ = cross_validate(multilingual, MULTILINGUAL_FEATURES, specs)
        parts["multilingual"] = (multilingual, ml_scores, point_level)
    log(f"cross-validated {len(parts)} models in {time.perf_counter() - started:.0f}s")
    return {
        kind: _rows(kind, params.model(kind).threshold, rows, s, keep, fold, specs)
        for kind, (rows, s, keep) in parts.items()
    }


def _sure(rows: KindRows, band: tuple[float, float], where: BoolArray) -> BoolArray:
    low, high = band
    p = rows.probability[where]
    sure: BoolArray = (p < low) | (p > high)
    return sure


def out_of_fold(rows: KindRows, target: float) -> BoolArray:
    """Whether each row is sure under the band chosen without its fold (the reported figures)."""
    sure = np.zeros(len(rows.probability), dtype=bool)
    for k in np.unique(rows.fold):
        test = rows.fold == k
        fit = rows.train & ~test
        band = fit_band(
            rows.probability[fit], rows.positive[fit], rows.weight[fit], rows.threshold, target
        )
        sure[test] = _sure(rows, band, test)
    return sure


def set_table(rows: KindRows, sure: BoolArray) -> list[dict[str, Any]]:
    """Per set: points, share routed to the LLM, agreement of the sure verdicts with people.

    Answers (rows of one question and response) are routed together: ``answers_routed`` is the
    share of answers with any uncertain row (K-QA's statements; one row per answer elsewhere).
    """
    covered = rows.probability >= rows.threshold
    table = []
    for name in dict.fromkeys(rows.sets.tolist()):
        here = rows.sets == name
        n = int(here.sum())
        n_sure = int((sure & here).sum())
        agree = int((sure & here & (covered == rows.positive)).sum())
        items: dict[str, bool] = {}
        for item, is_sure in zip(rows.items[here], sure[here], strict=True):
            items[item] = items.get(item, True) and bool(is_sure)
        table.append(
            {
                "set": name,
                "points": n,
                "routed": round(1.0 - n_sure / n, 4) if n else None,
                "answers": len(items),
                "answers_routed": round(sum(not s for s in items.values()) / len(items), 4)
                if items
                else None,
                "sure_agreement": round(agree / n_sure, 4) if n_sure else None,
                "matcher_agreement": round(int((here & (covered == rows.positive)).sum()) / n, 4),
            }
        )
    return table


def run(
    data_dir: Path,
    params_path: Path,
    targets: Sequence[float],
    cache_dir: Path | None,
    log: Callable[[str], None] = print,
    *,
    chinese: bool = True,
) -> dict[str, Any]:
    """Fit the bands, print the tables and write the ``cascade`` section of ``params_path``.

    Args:
        data_dir: Folder of the shared calibration sets.
        params_path: The matcher parameter file whose ``cascade`` section is written.
        targets: The target agreements.
        cache_dir: The matcher fit's embedding cache, or None.
        log: Progress printer.
        chinese: Fit the Chinese model's band too (encodes every text again with the
            multilingual encoder); without it the Chinese model's band is ``[0, 1]``: every
            Chinese item goes to the LLM.

    Returns:
        The section as written.
    """
    started = time.perf_counter()
    drawn = [
        dataclasses.replace(spec, subsample=SUBSAMPLE[spec.name]) if spec.name in SUBSAMPLE
        else spec
        for spec in SETS
    ]  # fmt: skip
    specs = {spec.name: spec for spec in drawn}
    examples = load_examples(data_dir, drawn)
    log(f"read {len(examples)} rows from {data_dir}")
    from judge.metrics import DEFAULT_ENCODER

    build_examples(examples, cache_dir, DEFAULT_ENCODER, log)
    multilingual = multilingual_examples(examples, cache_dir, log) if chinese else None
    by_kind = kind_rows(examples, multilingual, specs, log)
    bands: dict[str, dict[str, list[float]]] = {}
    tables: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for target in targets:
        key = f"{target:g}"
        bands[key], tables[key] = {}, {}
        for kind in MODEL_KINDS:
            if kind not in by_kind:
                bands[key][kind] = [0.0, 1.0]  # not fitted: nothing sure, every item to the LLM
                log(f"target {key} {kind}: not fitted, band [0, 1]")
                continue
            rows = by_kind[kind]
            fit = rows.train
            low, high = fit_band(
                rows.probability[fit], rows.positive[fit], rows.weight[fit], rows.threshold,
                target,
            )  # fmt: skip
            bands[key][kind] = [low, high]
            tables[key][kind] = set_table(rows, out_of_fold(rows, target))
            log(f"target {key} {kind}: band [{low:.4f}, {high:.4f}] (threshold {rows.threshold})")
        log(format_table(key, tables[key]))
    section = {
        "bands": bands,
        "training": {
            "fitted_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "script": "python -m calibration.fit.cascade",
            "subsample_questions": SUBSAMPLE,
            "chinese": "fitted on the English rows with the multilingual encoder's features (no "
            "Chinese set is rated)" if chinese else "not fitted: band [0, 1], every Chinese item "
            "goes to the LLM",
            "rule": "per model kind, the band around the threshold leaving the most points sure "
            "(sets weighted by their fit weight) whose sure verdicts agree with people (labels "
            "cut at 0.5) at least at the target; on out-of-fold probabilities "
            f"(GroupKFold({N_FOLDS}) by question, seed {SEED})",
            "out_of_fold": tables,
        },
    }
    data = json.loads(params_path.read_text(encoding="utf-8"))
    data["cascade"] = section
    params_path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    load_params(params_path)  # what was written must load
    log(f"wrote the cascade section of {params_path} in {time.perf_counter() - started:.0f}s")
    return section


def format_table(target: str, tables: dict[str, list[dict[str, Any]]]) -> str:
    """The out-of-fold table of one target, one line per set and model kind (Markdown)."""
    header = ("model", "set", "points", "routed to the LLM", "answers routed", "sure agreement",
              "matcher agreement")
    rows = (
        (kind, row["set"], row["points"], f"{row['routed']:.3f}", f"{row['answers_routed']:.3f}",
         "-" if row["sure_agreement"] is None else f"{row['sure_agreement']:.3f}",
         f"{row['matcher_agreement']:.3f}")
        for kind, table in tables.items()
        for row in table
    )
    return "\n".join([f"\ntarget agreement {target}, out of fold", *markdown.table(header, rows)])


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; 0 on success, 2 on a bad data folder, input line or target."""
    parser = fit_parser("calibration.fit.cascade", __doc__)
    parser.add_argument(
        "--params", type=Path, default=PARAMS_PATH, help="matcher parameter file to update"
    )
    parser.add_argument(
        "--targets",
        default=",".join(f"{t:g}" for t in DEFAULT_TARGETS),
        help="target agreements, comma-separated, each in [0.5, 1)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="the matcher fit's cache"
    )
    parser.add_argument(
        "--no-chinese",
        action="store_true",
        help="leave the Chinese model's band unfitted ([0, 1]: every Chinese item to the LLM) "
        "instead of encoding every text with the multilingual encoder",
    )
    args = parser.parse_args(argv)
    try:
        targets = [float(t) for t in args.targets.split(",") if t.strip()]
    except ValueError:
        targets = []
    if not targets or not all(0.5 <= t < 1.0 for t in targets):
        print("error: --targets must be agreements in [0.5, 1), comma-separated", file=sys.stderr)
        return 2
    return run_fit(args.data_dir, lambda data_dir: run(
        data_dir, args.params, targets, args.cache_dir, chinese=not args.no_chinese))


if __name__ == "__main__":
    raise SystemExit(main())
