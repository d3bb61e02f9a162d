"""Agreement between raters: annotators among themselves, two judges, one judge run twice.

Krippendorff's alpha over the annotators' own ratings, at the scale's level, is the human
ceiling a judge can be expected to reach. Two judge configurations, or one configuration run
twice (test-retest), are compared on the items both scored: correlations, kappa, exact agreement
and mean absolute difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import krippendorff
import numpy as np

from calibration.correlation import Estimate, cohen_kappa, correlations, finite_or_none
from calibration.scores import ScoreInput, join_pairs
from calibration.sets import CalibrationItem, KrippendorffLevel


@dataclass(frozen=True)
class AlphaResult:
    """Krippendorff's alpha among annotators: the ceiling a judge can be expected to reach.

    Attributes:
        alpha: The coefficient, ``None`` when undefined.
        level: Level of measurement used (nominal, ordinal or interval).
        n_items: Items with at least two ratings.
        n_annotators: Most ratings on one item (annotator slots).
        note: Why alpha is missing, when it is.
    """

    alpha: float | None
    level: KrippendorffLevel
    n_items: int
    n_annotators: int
    note: str | None = None


def krippendorff_alpha(
    ratings: Sequence[Sequence[float | None]], level: KrippendorffLevel
) -> AlphaResult:
    """Krippendorff's alpha over items, each with its annotators' ratings (``None`` = missing).

    Annotator slots are positional (the i-th rating of every item is annotator i); alpha does
    not depend on which annotator gave which rating beyond pairing within an item.

    Args:
        ratings: One sequence of ratings per item.
        level: ``nominal`` (binary, labels), ``ordinal`` (Likert) or ``interval`` (continuous).
    """
    if level not in ("nominal", "ordinal", "interval"):
        raise ValueError(f"level must be nominal, ordinal or interval, got {level!r}")
    width = max((len(r) for r in ratings), default=0)
    matrix = np.full((width, len(ratings)), np.nan)
    for col, row in enumerate(ratings):
        for slot, value in enumerate(row):
            if value is not None:
                matrix[slot, col] = float(value)
    pairable = int((np.sum(~np.isnan(matrix), axis=0) >= 2).sum()) if width else 0
    if pairable == 0:
        return AlphaResult(None, level, 0, width, note="no item has two or more ratings")
    try:
        alpha = krippendorff.alpha(reliability_data=matrix, level_of_measurement=level)
    except ValueError as exc:
        # The package refuses a single value in the domain (everyone always agrees on one value).
        return AlphaResult(None, level, pairable, width, note=f"undefined: {exc}")
    return AlphaResult(finite_or_none(alpha), level, pairable, width)


def inter_annotator_agreement(
    items: Sequence[CalibrationItem], *, level: KrippendorffLevel | None = None
) -> AlphaResult | None:
    """Krippendorff's alpha of the items' per-annotator ratings at their scale's level.

    Args:
        items: Items of one set (one scale).
        level: Override the scale's level.

    Returns:
        The alpha result, or ``None`` when no item has per-annotator ratings.
    """
    rated = [item for item in items if item.annotator_scores]
    if not rated:
        return None
    chosen = level or rated[0].scale.level
    return krippendorff_alpha([item.annotator_scores or [] for item in rated], chosen)


@dataclass(frozen=True)
class PairAgreement:
    """Agreement between two sets of scores for the same items (two judges, or one judge twice).

    Attributes:
        a: Name of the first scores.
        b: Name of the second scores.
        n: Items scored by both.
        left_out: Counts of left-out reasons by side.
        pearson: Pearson correlation with interval.
        spearman: Spearman correlation with interval.
        kendall: Kendall tau-b with interval.
        kappa: Cohen's kappa when both take few discrete values (unweighted for 0/1,
            quadratic-weighted for ordinal levels); ``None`` for continuous scores.
        kappa_weights: ``None`` (unweighted) or ``quadratic``.
        exact_agreement: Share of items with identical scores.
        mean_abs_diff: Mean absolute difference.
        note: Why kappa is missing, when it is.
    """

    a: str
    b: str
    n: int
    left_out: dict[str, dict[str, int]]
    pearson: Estimate
    spearman: Estimate
    kendall: Estimate
    kappa: float | None
    kappa_weights: str | None
    exact_agreement: float | None
    mean_abs_diff: float | None
    note: str | None = None


MAX_KAPPA_LEVELS = 10
"""Most distinct values two score sets may take between them for kappa to be reported."""


def judge_vs_judge(
    a: ScoreInput,
    b: ScoreInput,
    *,
    names: tuple[str, str] = ("a", "b"),
    unscored_reasons: tuple[Mapping[str, str] | None, Mapping[str, str] | None] = (None, None),
    n_resamples: int = 1000,
    seed: int = 0,
    tolerance: float = 1e-9,
) -> PairAgreement:
    """Agreement between two judge configurations on the same items, joined by id.

    Ids scored by only one side are left out with a reason; scores with no id in common are
    refused (:class:`JoinError`).

    Args:
        a: Scores of the first configuration.
        b: Scores of the second configuration.
        names: Their names.
        unscored_reasons: Unscored reasons for ``a`` and ``b``.
        n_resamples: Bootstrap resamples for the correlation intervals.
        seed: Bootstrap seed.
        tolerance: Largest difference counted as exact agreement.
    """
    joined = join_pairs(
        a,
        b,
        left_side=names[0],
        right_side=names[1],
        left_reasons=unscored_reasons[0],
        right_reasons=unscored_reasons[1],
        allow_extra_left=True,
    )
    x, y = joined.judge, joined.human
    kwargs: dict[str, Any] = {"n_resamples": n_resamples, "seed": seed, "names": names}
    kappa: float | None = None
    weights: str | None = None
    note: str | None = None
    levels = np.unique(np.concatenate([x, y])) if joined.n else np.array([])
    if joined.n == 0:
        note = "no item scored by both"
    elif len(levels) <= 2 and np.isin(levels, (0.0, 1.0)).all():
        kappa = cohen_kappa(x.astype(int), y.astype(int))
    elif len(levels) <= MAX_KAPPA_LEVELS:
        # Ordered levels: quadratic weights credit near misses, as for Likert ratings.
        codes = {float(v): i for i, v in enumerate(levels)}
        weights = "quadratic"
        kappa = cohen_kappa([codes[float(v)] for v in x], [codes[float(v)] for v in y], weights)
    else:
        note = "continuous scores: kappa not defined (see the correlations)"
    diffs = np.abs(x - y)
    return PairAgreement(
        a=names[0],
        b=names[1],
        n=joined.n,
        left_out={side: joined.reasons(side) for side in names},
        **correlations(x, y, **kwargs),
        kappa=kappa,
        kappa_weights=weights,
        exact_agreement=float(np.mean(diffs <= tolerance)) if joined.n else None,
        mean_abs_diff=float(diffs.mean()) if joined.n else None,
        note=note,
    )


def test_retest(
    first: ScoreInput,
    second: ScoreInput,
    *,
    name: str = "judge",
    n_resamples: int = 1000,
    seed: int = 0,
    tolerance: float = 1e-9,
) -> PairAgreement:
    """Consistency of one judge configuration run twice on the same items.

    The same figures as :func:`judge_vs_judge`, with the runs named ``<name>#1`` and
    ``<name>#2``: correlation, exact agreement share and mean absolute difference.
    """
    return judge_vs_judge(
        first,
        second,
        names=(f"{name}#1", f"{name}#2"),
        n_resamples=n_resamples,
        seed=seed,
        tolerance=tolerance,
    )


# pytest would otherwise try to collect the function above as a test when it is imported.
test_retest.__test__ = False  # type: ignore[attr-defined]
