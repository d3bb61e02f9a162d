"""Correlation of paired scores with seeded percentile-bootstrap intervals.

Pearson, Spearman and Kendall (tau-b) on scores already joined by id, each with a percentile
interval over items resampled with replacement; the bootstrap is vectorised (one resample a row)
so that thousands of resamples of thousands of items take seconds. Constant inputs give ``None``
with a note, never an exception. Also the two small helpers the other statistics share
(:func:`finite_or_none`, :func:`cohen_kappa`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, Unpack

import numpy as np
import numpy.typing as npt

from calibration.scores import FloatArray

CorrelationMethod = Literal["pearson", "spearman", "kendall"]
"""A correlation :func:`correlation` computes."""

Statistic = Literal["pearson", "spearman", "kendall", "auroc"]
"""A paired statistic :func:`bootstrap_ci` resamples."""

MIN_PAIRS = 3
"""Fewest joined pairs for which a correlation is reported."""

# Bootstrap draws are made in batches of at most this many resampled values (memory bound).
_BATCH_VALUES = 2_000_000
# Up to this many pairs, Kendall's tau is bootstrapped with the vectorised all-pairs form.
_PAIRWISE_MAX_N = 200


@dataclass(frozen=True)
class Estimate:
    """A statistic with its bootstrap interval.

    Attributes:
        value: The point estimate, ``None`` when undefined (see ``note``).
        ci_low: Lower end of the percentile-bootstrap interval.
        ci_high: Upper end of the interval.
        p_value: Two-sided p-value of the test of no association, when there is one.
        n: Pairs it was computed on.
        note: Why a figure is missing, when one is.
    """

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    n: int = 0
    note: str | None = None


def _constant_note(x: FloatArray, y: FloatArray, names: tuple[str, str]) -> str | None:
    if len(x) < MIN_PAIRS:
        return f"fewer than {MIN_PAIRS} pairs (n={len(x)})"
    if np.ptp(x) == 0:
        return f"constant {names[0]} scores: undefined"
    if np.ptp(y) == 0:
        return f"constant {names[1]} scores: undefined"
    return None


def _row_pearson(xs: FloatArray, ys: FloatArray) -> FloatArray:
    xm = xs - xs.mean(axis=1, keepdims=True)
    ym = ys - ys.mean(axis=1, keepdims=True)
    num = (xm * ym).sum(axis=1)
    den = np.sqrt((xm * xm).sum(axis=1) * (ym * ym).sum(axis=1))
    bad = (np.ptp(xs, axis=1) == 0) | (np.ptp(ys, axis=1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(bad, np.nan, num / np.where(bad, 1.0, den))
    return np.asarray(np.clip(out, -1.0, 1.0), dtype=np.float64)


def _row_kendall_pairwise(xs: FloatArray, ys: FloatArray) -> FloatArray:
    """Kendall tau-b per row from all pairs: sum(sx*sy) / sqrt(sum(sx^2) * sum(sy^2)).

    For small n this vectorised O(n^2) form beats calling scipy once per resample, whose
    fixed overhead (milliseconds) dominates at bootstrap sizes.
    """
    i, j = np.triu_indices(xs.shape[1], k=1)
    out = np.empty(xs.shape[0])
    # Rows in chunks so the (rows x pairs) sign matrices stay within the memory budget.
    step = max(1, _BATCH_VALUES // max(len(i), 1))
    for start in range(0, xs.shape[0], step):
        sx = np.sign(xs[start : start + step, i] - xs[start : start + step, j])
        sy = np.sign(ys[start : start + step, i] - ys[start : start + step, j])
        den = np.sqrt((sx * sx).sum(axis=1) * (sy * sy).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + step] = np.where(den > 0, (sx * sy).sum(axis=1) / den, np.nan)
    return out


def _row_stat(statistic: Statistic, xs: FloatArray, ys: FloatArray) -> FloatArray:
    """The statistic on each row of ``xs``/``ys`` (one bootstrap resample a row)."""
    from scipy import stats  # at use: see calibration/__init__

    if statistic == "pearson":
        return _row_pearson(xs, ys)
    if statistic == "spearman":
        rx = np.asarray(stats.rankdata(xs, axis=1), dtype=np.float64)
        ry = np.asarray(stats.rankdata(ys, axis=1), dtype=np.float64)
        out = _row_pearson(rx, ry)
        out[(np.ptp(xs, axis=1) == 0) | (np.ptp(ys, axis=1) == 0)] = np.nan
        return out
    if statistic == "auroc":
        # Mann-Whitney form of the AUC, with average ranks for ties; ys holds 0/1 labels.
        ranks = np.asarray(stats.rankdata(xs, axis=1), dtype=np.float64)
        n_pos = ys.sum(axis=1)
        n_neg = ys.shape[1] - n_pos
        rank_sum = (ranks * ys).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            auc = (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
        return np.asarray(np.where((n_pos == 0) | (n_neg == 0), np.nan, auc), dtype=np.float64)
    if xs.shape[1] <= _PAIRWISE_MAX_N:
        return _row_kendall_pairwise(xs, ys)
    # Large n: scipy's O(n log n) algorithm per resample; its per-call overhead is then minor.
    out = np.full(xs.shape[0], np.nan)
    for row in range(xs.shape[0]):
        if np.ptp(xs[row]) > 0 and np.ptp(ys[row]) > 0:
            out[row] = stats.kendalltau(xs[row], ys[row]).statistic
    return out


def bootstrap_ci(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    statistic: Statistic,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float | None, float | None, str | None]:
    """Percentile-bootstrap interval of a paired statistic, resampling items with replacement.

    Resamples on which the statistic is undefined (constant values, one class) are dropped;
    when more than half are, no interval is given.

    Args:
        x: Judge scores (or scores for AUROC).
        y: Human scores (0/1 labels for AUROC), aligned with ``x``.
        statistic: ``pearson``, ``spearman``, ``kendall`` or ``auroc``.
        n_resamples: Number of resamples.
        confidence: Interval coverage, e.g. 0.95.
        seed: Seed of the resampling generator: same seed, same interval.

    Returns:
        ``(low, high, note)``; ``low``/``high`` are ``None`` when no interval can be given.

    Raises:
        ValueError: When the arrays differ in length or the options are out of range.
    """
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    if xa.shape != ya.shape or xa.ndim != 1:
        raise ValueError(f"x and y must be 1-d and aligned, got {xa.shape} and {ya.shape}")
    if n_resamples < 1:
        raise ValueError("n_resamples must be at least 1")
    if not 0 < confidence < 1:
        raise ValueError("confidence must lie strictly between 0 and 1")
    n = len(xa)
    if n < MIN_PAIRS:
        return None, None, f"fewer than {MIN_PAIRS} pairs (n={n})"
    rng = np.random.default_rng(seed)
    batch = max(1, min(n_resamples, _BATCH_VALUES // n))
    values: list[FloatArray] = []
    done = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while done < n_resamples:
            size = min(batch, n_resamples - done)
            idx = rng.integers(0, n, size=(size, n))
            values.append(_row_stat(statistic, xa[idx], ya[idx]))
            done += size
    draws = np.concatenate(values)
    valid = draws[~np.isnan(draws)]
    dropped = n_resamples - len(valid)
    if len(valid) < n_resamples / 2:
        return None, None, f"{dropped} of {n_resamples} resamples undefined: no interval"
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(valid, [tail, 100 - tail])
    note = f"{dropped} of {n_resamples} resamples undefined and dropped" if dropped else None
    return float(low), float(high), note


class BootstrapOptions(TypedDict, total=False):
    """How :func:`bootstrap_ci` resamples; each option has its default there."""

    n_resamples: int
    confidence: float
    seed: int


def correlation(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    method: CorrelationMethod,
    *,
    names: tuple[str, str] = ("judge", "human"),
    **bootstrap: Unpack[BootstrapOptions],
) -> Estimate:
    """Pearson, Spearman or Kendall (tau-b) correlation with a bootstrap interval.

    Args:
        x: First scores.
        y: Second scores, aligned with ``x`` (already joined by id).
        method: Which correlation.
        names: What ``x`` and ``y`` are, for notes.
        **bootstrap: ``n_resamples`` (0 disables the interval), ``confidence`` and ``seed``, as
            for :func:`bootstrap_ci`.

    Returns:
        The estimate; ``value`` is ``None`` with a note for constant input or n < 3.
    """
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    note = _constant_note(xa, ya, names)
    if note is not None:
        return Estimate(value=None, n=len(xa), note=note)
    from scipy import stats  # at use: see calibration/__init__

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "pearson":
            result = stats.pearsonr(xa, ya)
        elif method == "spearman":
            result = stats.spearmanr(xa, ya)
        else:
            result = stats.kendalltau(xa, ya)
    low = high = None
    ci_note = None
    resamples = bootstrap.get("n_resamples")
    if resamples is None or resamples > 0:  # None: bootstrap_ci's default number
        low, high, ci_note = bootstrap_ci(xa, ya, method, **bootstrap)
    return Estimate(
        value=finite_or_none(result.statistic),
        ci_low=low,
        ci_high=high,
        p_value=finite_or_none(result.pvalue),
        n=len(xa),
        note=ci_note,
    )


def finite_or_none(value: Any) -> float | None:
    """``value`` as a float, or ``None`` when it is not a finite number (NaN, inf, text)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def cohen_kappa(
    a: npt.ArrayLike, b: npt.ArrayLike, weights: str | None = None
) -> float | None:
    """Cohen's kappa of two label sequences; ``None`` when undefined (one label throughout)."""
    from sklearn.metrics import cohen_kappa_score  # at use: see calibration/__init__

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return finite_or_none(cohen_kappa_score(a, b, weights=weights))


def correlations(x: npt.ArrayLike, y: npt.ArrayLike, **options: Any) -> dict[str, Estimate]:
    """Pearson, Spearman and Kendall of the same pairs, keyed by method.

    Args:
        x: First scores.
        y: Second scores, aligned with ``x``.
        **options: As for :func:`correlation` (``n_resamples``, ``seed``, ``names``...).
    """
    methods: tuple[CorrelationMethod, ...] = ("pearson", "spearman", "kendall")
    return {method: correlation(x, y, method, **options) for method in methods}
