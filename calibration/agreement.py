"""Agreement between judge scores and human ratings, computed only on data joined by item id.

Every statistic here starts from :func:`join_scores`, which pairs ``{item_id: judge_score}``
with ``{item_id: human_score}`` and says which ids were left out and why. Filtering two lists
separately and zipping them (prometheus-eval's ``calculate_mean_scores``) lets one empty score
shift one list against the other; a join by id cannot.

What is computed, by scale (see :class:`calibration.sets.Scale`):

* every scale: n, unscored items and their reasons, Pearson, Spearman and Kendall (tau-b), each
  with a seeded percentile-bootstrap 95% interval over items;
* binary human labels (binary sets; K-QA key points read as covered vs not): AUROC with a
  bootstrap interval, and accuracy, F1 and Cohen's kappa at a threshold chosen by
  cross-validation (chosen on the other folds, scored on the held-out fold);
* K-QA key points: point-level accuracy and kappa of per-point verdicts, and how often
  contradicted points are flagged as defects;
* per-annotator ratings: Krippendorff's alpha at the scale's level, the human ceiling;
* judge vs judge and test-retest: correlations, kappa, exact agreement, mean absolute difference.

Constant inputs give ``None`` with a note, never an exception.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import krippendorff
import numpy as np
import numpy.typing as npt
from scipy import stats
from sklearn.metrics import accuracy_score, cohen_kappa_score, f1_score, roc_auc_score
from sklearn.model_selection import StratifiedKFold

from calibration.sets import CalibrationItem, KrippendorffLevel
from core.errors import InputError

__all__ = [
    "AlphaResult",
    "BinaryAgreement",
    "Estimate",
    "FoldThreshold",
    "JoinError",
    "Joined",
    "KeyPointAgreement",
    "LeftOut",
    "MetricAgreement",
    "PairAgreement",
    "ThresholdCV",
    "best_threshold",
    "binary_agreement",
    "bootstrap_ci",
    "breakdown",
    "correlation",
    "cv_threshold",
    "inter_annotator_agreement",
    "join_scores",
    "judge_vs_judge",
    "keypoint_agreement",
    "krippendorff_alpha",
    "metric_agreement",
    "stratified_group_folds",
    "test_retest",
    "to_jsonable",
]

FloatArray = npt.NDArray[np.float64]
ScoreInput = Mapping[str, float | None] | Iterable[tuple[str, float | None]]
"""Scores keyed by item id: a mapping, or (id, score) pairs (checked for duplicate ids)."""

CorrelationMethod = Literal["pearson", "spearman", "kendall"]
Statistic = Literal["pearson", "spearman", "kendall", "auroc"]
Objective = Literal["accuracy", "f1"]

MIN_PAIRS = 3
"""Fewest joined pairs for which a correlation is reported."""

# Bootstrap draws are made in batches of at most this many resampled values (memory bound).
_BATCH_VALUES = 2_000_000
# Up to this many pairs, Kendall's tau is bootstrapped with the vectorised all-pairs form.
_PAIRWISE_MAX_N = 200


class JoinError(InputError):
    """Judge and human scores cannot be joined safely (duplicate, foreign or non-text ids)."""


# --- joining -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeftOut:
    """An item id that is not in the paired arrays.

    Attributes:
        id: The item id.
        side: Which side lacks a usable value (``judge``, ``human``, or a judge's name).
        reason: Why (an unscored reason, "missing", "non-finite score", ...).
    """

    id: str
    side: str
    reason: str


@dataclass(frozen=True)
class Joined:
    """Judge and human scores paired by item id.

    Attributes:
        ids: Paired ids, in the human (set) order.
        judge: Judge scores, aligned with ``ids``.
        human: Human scores, aligned with ``ids``.
        left_out: Ids left out on either side, with reasons.
    """

    ids: tuple[str, ...]
    judge: FloatArray
    human: FloatArray
    left_out: tuple[LeftOut, ...] = ()

    @property
    def n(self) -> int:
        """Number of pairs."""
        return len(self.ids)

    def reasons(self, side: str) -> dict[str, int]:
        """Counts of left-out reasons on one side, most frequent first."""
        counts = Counter(x.reason for x in self.left_out if x.side == side)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


MISSING = "missing: no score for this id"
"""Reason given for an id of the set that the scores do not mention at all."""


def _as_dict(scores: ScoreInput, side: str) -> dict[str, float | None]:
    pairs = scores.items() if isinstance(scores, Mapping) else scores
    out: dict[str, float | None] = {}
    for key, value in pairs:
        if not isinstance(key, str):
            # 1 vs "1" is the classic silent mismatch: refuse instead of coercing.
            raise JoinError(
                f"{side} scores: item ids must be strings, got {type(key).__name__} {key!r}",
                field=f"{side}.id",
            )
        if key in out:
            raise JoinError(f"{side} scores: duplicate item id {key!r}", field=f"{side}.id")
        if value is not None and (
            isinstance(value, str) or not isinstance(value, int | float | np.number)
        ):
            raise JoinError(
                f"{side} scores: item {key!r} has a non-numeric score {value!r}",
                field=f"{side}.{key}",
            )
        out[key] = None if value is None else float(value)
    return out


def _join(
    left: ScoreInput,
    right: ScoreInput,
    *,
    left_side: str,
    right_side: str,
    left_reasons: Mapping[str, str] | None,
    right_reasons: Mapping[str, str] | None,
    allow_extra_left: bool,
) -> Joined:
    lhs = _as_dict(left, left_side)
    rhs = _as_dict(right, right_side)
    if lhs and rhs and lhs.keys().isdisjoint(rhs.keys()):
        raise JoinError(
            f"{left_side} and {right_side} scores share no item id (e.g. {next(iter(lhs))!r} "
            f"vs {next(iter(rhs))!r}): are they from the same set?",
            field="id",
        )
    extra = [key for key in lhs if key not in rhs]
    if extra and not allow_extra_left:
        shown = ", ".join(repr(k) for k in extra[:5])
        raise JoinError(
            f"{len(extra)} {left_side} id(s) are not in the {right_side} set ({shown}"
            f"{', ...' if len(extra) > 5 else ''}): the scores belong to a different set",
            field=f"{left_side}.id",
        )
    ids: list[str] = []
    xs: list[float] = []
    ys: list[float] = []
    left_out: list[LeftOut] = []
    for key, human in rhs.items():
        if key not in lhs:
            left_out.append(LeftOut(key, left_side, MISSING))
            continue
        judge = lhs[key]
        if judge is None:
            reason = (left_reasons or {}).get(key) or "unscored (no reason given)"
            left_out.append(LeftOut(key, left_side, reason))
        elif not math.isfinite(judge):
            left_out.append(LeftOut(key, left_side, "non-finite score"))
        elif human is None:
            reason = (right_reasons or {}).get(key) or "unscored (no reason given)"
            left_out.append(LeftOut(key, right_side, reason))
        elif not math.isfinite(human):
            left_out.append(LeftOut(key, right_side, "non-finite score"))
        else:
            ids.append(key)
            xs.append(judge)
            ys.append(human)
    left_out.extend(LeftOut(key, right_side, MISSING) for key in extra)
    return Joined(
        ids=tuple(ids),
        judge=np.asarray(xs, dtype=np.float64),
        human=np.asarray(ys, dtype=np.float64),
        left_out=tuple(left_out),
    )


def join_scores(
    judge: ScoreInput,
    human: ScoreInput,
    *,
    unscored_reasons: Mapping[str, str] | None = None,
    allow_extra_judge_ids: bool = False,
) -> Joined:
    """Pair judge and human scores by item id.

    The human side defines the set: an id it has and the judge lacks is left out as missing;
    a judge score of ``None`` is left out with its reason from ``unscored_reasons``.

    Args:
        judge: Judge scores by item id (``None`` = unscored).
        human: Human scores by item id (``None`` = no rating).
        unscored_reasons: Why each unscored judge item is unscored.
        allow_extra_judge_ids: Leave out judge ids the human side does not have instead of
            refusing (by default such ids mean the scores belong to another set).

    Returns:
        The paired arrays, in the human side's order, and the ids left out with reasons.

    Raises:
        JoinError: On a duplicate id, a non-string id, a non-numeric score, no id in common, or
            (unless allowed) judge ids foreign to the human side.
    """
    return _join(
        judge,
        human,
        left_side="judge",
        right_side="human",
        left_reasons=unscored_reasons,
        right_reasons=None,
        allow_extra_left=allow_extra_judge_ids,
    )


# --- estimates and the bootstrap ---------------------------------------------------------------


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


def correlation(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    method: CorrelationMethod,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    names: tuple[str, str] = ("judge", "human"),
) -> Estimate:
    """Pearson, Spearman or Kendall (tau-b) correlation with a bootstrap interval.

    Args:
        x: First scores.
        y: Second scores, aligned with ``x`` (already joined by id).
        method: Which correlation.
        n_resamples: Bootstrap resamples (0 disables the interval).
        confidence: Interval coverage.
        seed: Bootstrap seed.
        names: What ``x`` and ``y`` are, for notes.

    Returns:
        The estimate; ``value`` is ``None`` with a note for constant input or n < 3.
    """
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    note = _constant_note(xa, ya, names)
    if note is not None:
        return Estimate(value=None, n=len(xa), note=note)
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
    if n_resamples > 0:
        low, high, ci_note = bootstrap_ci(
            xa, ya, method, n_resamples=n_resamples, confidence=confidence, seed=seed
        )
    return Estimate(
        value=_finite(result.statistic),
        ci_low=low,
        ci_high=high,
        p_value=_finite(result.pvalue),
        n=len(xa),
        note=ci_note,
    )


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _kappa(a: npt.ArrayLike, b: npt.ArrayLike, weights: str | None = None) -> float | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _finite(cohen_kappa_score(a, b, weights=weights))


# --- binary labels: AUROC and a cross-validated threshold ---------------------------------------


def _threshold_table(
    scores: FloatArray, labels: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Candidate thresholds (predict positive when score >= t) with their accuracy and F1."""
    order = np.sort(scores)
    unique = np.unique(scores)
    # Below-or-at the minimum (everything positive), between neighbours, above the maximum.
    mids = (unique[:-1] + unique[1:]) / 2
    candidates = np.concatenate([[unique[0]], mids, [unique[-1] + 1.0]])
    positives_sorted = labels[np.argsort(scores, kind="stable")]
    cum_pos = np.concatenate([[0.0], np.cumsum(positives_sorted)])
    below = np.searchsorted(order, candidates, side="left")
    n = len(scores)
    total_pos = float(labels.sum())
    predicted_pos = n - below
    tp = total_pos - cum_pos[below]
    fp = predicted_pos - tp
    fn = total_pos - tp
    tn = (n - total_pos) - fp
    accuracy = (tp + tn) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(2 * tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), 0.0)
    return candidates, accuracy, np.asarray(f1, dtype=np.float64)


def best_threshold(
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    objective: Objective = "accuracy",
) -> float:
    """The threshold that maximises accuracy (or F1) when "score >= threshold" predicts 1.

    Candidates are the lowest score, the midpoints between neighbouring distinct scores, and
    one above the highest; among equally good candidates the middle one is taken, so the
    choice is deterministic and not pinned to an edge.

    Args:
        scores: Judge scores.
        labels: 0/1 human labels, aligned with ``scores``.
        objective: ``accuracy`` or ``f1``.

    Raises:
        ValueError: On empty or misaligned input.
    """
    xa = np.asarray(scores, dtype=np.float64)
    ya = np.asarray(labels, dtype=np.float64)
    if xa.size == 0 or xa.shape != ya.shape:
        raise ValueError("scores and labels must be non-empty and aligned")
    candidates, accuracy, f1 = _threshold_table(xa, ya)
    value = accuracy if objective == "accuracy" else f1
    best = np.flatnonzero(value >= value.max() - 1e-12)
    return float(candidates[best[len(best) // 2]])


IntArray = npt.NDArray[np.intp]


def stratified_group_folds(
    labels: npt.ArrayLike, groups: Sequence[str], *, n_folds: int, seed: int = 0
) -> list[tuple[IntArray, IntArray]]:
    """Seeded k-fold split that keeps each group in one fold and roughly balances the labels.

    Groups are shuffled with ``seed``, ordered (stably) by their share of positive labels, and
    dealt to the folds in turn, so every fold gets groups across the range of positive shares.
    sklearn's ``StratifiedGroupKFold`` balances more exactly but costs O(groups x folds) Python
    steps with a standard deviation each, which took minutes on a 10,000-item set.

    Args:
        labels: 0/1 label per item (any numbers: only their mean per group is used).
        groups: Group per item.
        n_folds: Folds (at most the number of groups).
        seed: Shuffling seed.

    Returns:
        ``(train_indices, test_indices)`` per fold.

    Raises:
        ValueError: When the inputs are misaligned or there are fewer than 2 groups or folds.
    """
    y = np.asarray(labels, dtype=np.float64)
    if len(y) != len(groups):
        raise ValueError("labels and groups must be aligned")
    names, codes = np.unique(np.asarray(groups, dtype=object), return_inverse=True)
    k = min(n_folds, len(names))
    if k < 2:
        raise ValueError("need at least 2 groups and 2 folds")
    rate = np.bincount(codes, weights=y, minlength=len(names)) / np.bincount(codes)
    shuffled = np.random.default_rng(seed).permutation(len(names))
    order = shuffled[np.argsort(rate[shuffled], kind="stable")]
    fold_of_group = np.empty(len(names), dtype=np.intp)
    fold_of_group[order] = np.arange(len(names)) % k
    fold_of_item = fold_of_group[codes]
    everything = np.arange(len(y))
    return [
        (everything[fold_of_item != fold], everything[fold_of_item == fold]) for fold in range(k)
    ]


@dataclass(frozen=True)
class FoldThreshold:
    """One cross-validation fold: the threshold chosen on the other folds and how it did here.

    Attributes:
        fold: Fold number (0-based).
        threshold: Threshold chosen on the training folds only.
        test_indices: Positions (in the joined arrays) of the held-out items.
        accuracy: Accuracy on the held-out items.
    """

    fold: int
    threshold: float
    test_indices: tuple[int, ...]
    accuracy: float


@dataclass(frozen=True)
class ThresholdCV:
    """Accuracy, F1 and kappa at a cross-validated threshold (pooled over held-out folds).

    Attributes:
        objective: What the threshold maximised on the training folds.
        n_folds: Folds used (may be fewer than asked when a class or the groups are few).
        grouped: Whether folds kept each question's candidates together.
        accuracy: Held-out accuracy, pooled over folds.
        f1: Held-out F1 of the positive class.
        kappa: Cohen's kappa between held-out predictions and labels.
        folds: Per-fold thresholds and accuracies.
        threshold_all_data: Threshold chosen on all items: the one to deploy; its in-sample
            accuracy is not an estimate and is not reported.
        note: Why figures are missing, when they are.
    """

    objective: Objective
    n_folds: int
    grouped: bool
    accuracy: float | None
    f1: float | None
    kappa: float | None
    folds: tuple[FoldThreshold, ...] = ()
    threshold_all_data: float | None = None
    note: str | None = None


def cv_threshold(
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    groups: Sequence[str] | None = None,
    n_folds: int = 5,
    seed: int = 0,
    objective: Objective = "accuracy",
) -> ThresholdCV:
    """Choose a threshold on k-1 folds, score it on the held-out fold, pool the held-out results.

    Folds are stratified by label and shuffled with ``seed``; with ``groups`` (e.g. question ids)
    no group is split across folds, so one question's candidates cannot inform their own
    threshold.

    Args:
        scores: Judge scores.
        labels: 0/1 human labels.
        groups: Group of each item, or ``None``.
        n_folds: Folds wanted (reduced to the smaller class size or the number of groups).
        seed: Fold shuffling seed.
        objective: ``accuracy`` or ``f1``.

    Returns:
        Held-out accuracy, F1 and kappa, per-fold thresholds, and the all-data threshold.
    """
    xa = np.asarray(scores, dtype=np.float64)
    ya = np.asarray(labels, dtype=np.float64)
    if xa.shape != ya.shape:
        raise ValueError("scores and labels must be aligned")
    grouped = groups is not None
    n_pos = int(ya.sum())
    smaller = min(n_pos, len(ya) - n_pos)
    k = min(n_folds, smaller)
    if grouped:
        k = min(k, len(set(groups or ())))
    if len(ya) == 0 or k < 2:
        return ThresholdCV(
            objective=objective,
            n_folds=max(k, 0),
            grouped=grouped,
            accuracy=None,
            f1=None,
            kappa=None,
            note=f"too few items per class{' or groups' if grouped else ''} for 2 folds "
            f"(positives {n_pos}, negatives {len(ya) - n_pos})",
        )
    y_int = ya.astype(int)
    if grouped:
        split_list = stratified_group_folds(y_int, list(groups or ()), n_folds=k, seed=seed)
    else:
        split_list = list(
            StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(xa, y_int)
        )
    predicted = np.zeros(len(ya), dtype=int)
    folds: list[FoldThreshold] = []
    for number, (train, test) in enumerate(split_list):
        threshold = best_threshold(xa[train], ya[train], objective)
        predicted[test] = (xa[test] >= threshold).astype(int)
        folds.append(
            FoldThreshold(
                fold=number,
                threshold=threshold,
                test_indices=tuple(int(i) for i in test),
                accuracy=float(accuracy_score(y_int[test], predicted[test])),
            )
        )
    return ThresholdCV(
        objective=objective,
        n_folds=len(folds),
        grouped=grouped,
        accuracy=float(accuracy_score(y_int, predicted)),
        f1=float(f1_score(y_int, predicted, zero_division=0)),
        kappa=_kappa(y_int, predicted),
        folds=tuple(folds),
        threshold_all_data=best_threshold(xa, ya, objective),
    )


@dataclass(frozen=True)
class BinaryAgreement:
    """How well judge scores separate binary human labels.

    Attributes:
        n_positive: Items labelled 1 (correct / covered).
        n_negative: Items labelled 0.
        auroc: Area under the ROC curve with a bootstrap interval.
        cv: Accuracy, F1 and kappa at a cross-validated threshold.
    """

    n_positive: int
    n_negative: int
    auroc: Estimate
    cv: ThresholdCV


def binary_agreement(
    scores: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    groups: Sequence[str] | None = None,
    n_folds: int = 5,
    n_resamples: int = 1000,
    seed: int = 0,
    objective: Objective = "accuracy",
) -> BinaryAgreement:
    """AUROC (with interval) and cross-validated threshold metrics for 0/1 human labels.

    Args:
        scores: Judge scores (joined by id).
        labels: 0/1 human labels, aligned.
        groups: Question of each item, to keep questions within one fold.
        n_folds: Cross-validation folds.
        n_resamples: Bootstrap resamples for the AUROC interval.
        seed: Seed for folds and bootstrap.
        objective: What the threshold maximises.

    Raises:
        ValueError: When a label is not 0 or 1.
    """
    xa = np.asarray(scores, dtype=np.float64)
    ya = np.asarray(labels, dtype=np.float64)
    if not np.isin(ya, (0.0, 1.0)).all():
        raise ValueError("binary agreement needs 0/1 labels")
    n_pos = int(ya.sum())
    n_neg = len(ya) - n_pos
    if n_pos == 0 or n_neg == 0:
        auroc = Estimate(value=None, n=len(ya), note="only one class among the human labels")
    elif np.ptp(xa) == 0:
        auroc = Estimate(value=0.5, n=len(ya), note="constant judge scores: AUROC is 0.5")
    else:
        low, high, note = (None, None, None)
        if n_resamples > 0:
            low, high, note = bootstrap_ci(xa, ya, "auroc", n_resamples=n_resamples, seed=seed)
        auroc = Estimate(
            value=float(roc_auc_score(ya.astype(int), xa)),
            ci_low=low,
            ci_high=high,
            n=len(ya),
            note=note,
        )
    cv = cv_threshold(xa, ya, groups=groups, n_folds=n_folds, seed=seed, objective=objective)
    return BinaryAgreement(n_positive=n_pos, n_negative=n_neg, auroc=auroc, cv=cv)


# --- K-QA key points ----------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyPointAgreement:
    """Per-point verdicts of the judge against K-QA's covered / not covered / contradicted.

    Attributes:
        n: Points with both a judge verdict and a human label.
        n_unscored: Points whose verdict is missing or unscored.
        accuracy: Share of points where "judge says covered" equals "humans say covered".
        kappa: Cohen's kappa of the same two binary labels.
        confusion: Counts by human label (``covered``/``not_covered``/``contradicted``) and
            judge verdict (``covered``/``not_covered``).
        n_contradicted: Contradicted points among the joined ones.
        contradicted_judged_covered: Share of contradicted points the judge called covered.
        contradicted_defect_rate: Share of contradicted points whose answer the judge flagged
            as having a defect (how often contradictions show up as defects).
        other_defect_rate: The same share among points that are not contradicted (baseline).
        note: Why figures are missing, when they are.
    """

    n: int
    n_unscored: int
    accuracy: float | None
    kappa: float | None
    confusion: dict[str, dict[str, int]]
    n_contradicted: int
    contradicted_judged_covered: float | None
    contradicted_defect_rate: float | None
    other_defect_rate: float | None
    note: str | None = None


def _share(flags: Sequence[bool | None]) -> float | None:
    known = [bool(f) for f in flags if f is not None]
    return sum(known) / len(known) if known else None


_HUMAN_POINT = {1.0: "covered", 0.0: "not_covered", -1.0: "contradicted"}


def keypoint_agreement(
    verdicts: Mapping[str, bool | None],
    human: Mapping[str, float | None],
    *,
    defects: Mapping[str, bool | None] | None = None,
    unscored_reasons: Mapping[str, str] | None = None,
) -> KeyPointAgreement:
    """Agreement of per-point "covered" verdicts with K-QA labels (1 / 0 / -1), joined by id.

    Args:
        verdicts: Judge verdict per key-point row id (``None`` = unscored).
        human: Human label per row id: 1 covered, 0 not covered, -1 contradicted.
        defects: Whether the judge found a defect in the row's answer, per row id.
        unscored_reasons: Why unscored verdicts are unscored.

    Raises:
        JoinError: On mismatched ids (see :func:`join_scores`).
        ValueError: When a human label is not 1, 0 or -1.
    """
    numeric = {k: (None if v is None else float(bool(v))) for k, v in verdicts.items()}
    joined = join_scores(numeric, human, unscored_reasons=unscored_reasons)
    if not np.isin(joined.human, (-1.0, 0.0, 1.0)).all():
        raise ValueError("key-point human labels must be 1, 0 or -1")
    n_unscored = sum(1 for x in joined.left_out if x.side == "judge")
    confusion = {h: {"covered": 0, "not_covered": 0} for h in _HUMAN_POINT.values()}
    for judge_value, human_value in zip(joined.judge, joined.human, strict=True):
        confusion[_HUMAN_POINT[float(human_value)]][
            "covered" if judge_value == 1.0 else "not_covered"
        ] += 1
    human_covered = (joined.human == 1.0).astype(int)
    judge_covered = joined.judge.astype(int)
    contradicted = joined.human == -1.0
    n_contra = int(contradicted.sum())
    flags = {} if defects is None else defects
    contra_flags = [
        flags[i]
        for i, c in zip(joined.ids, contradicted, strict=True)
        if c and flags.get(i) is not None
    ]
    other_flags = [
        flags[i]
        for i, c in zip(joined.ids, contradicted, strict=True)
        if not c and flags.get(i) is not None
    ]
    note = None
    if joined.n == 0:
        note = "no point has both a verdict and a human label"
    elif defects is None:
        note = "no defect flags given: defect rates not computed"
    return KeyPointAgreement(
        n=joined.n,
        n_unscored=n_unscored,
        accuracy=float(np.mean(human_covered == judge_covered)) if joined.n else None,
        kappa=_kappa(human_covered, judge_covered) if joined.n else None,
        confusion=confusion,
        n_contradicted=n_contra,
        contradicted_judged_covered=(
            float(judge_covered[contradicted].mean()) if n_contra else None
        ),
        contradicted_defect_rate=_share(contra_flags),
        other_defect_rate=_share(other_flags),
        note=note,
    )


# --- inter-annotator agreement ------------------------------------------------------------------


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
    return AlphaResult(_finite(alpha), level, pairable, width)


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


# --- judge vs judge, test-retest ----------------------------------------------------------------


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
    joined = _join(
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
        kappa = _kappa(x.astype(int), y.astype(int))
    elif len(levels) <= MAX_KAPPA_LEVELS:
        # Ordered levels: quadratic weights credit near misses, as for Likert ratings.
        codes = {float(v): i for i, v in enumerate(levels)}
        weights = "quadratic"
        kappa = _kappa([codes[float(v)] for v in x], [codes[float(v)] for v in y], weights)
    else:
        note = "continuous scores: kappa not defined (see the correlations)"
    diffs = np.abs(x - y)
    return PairAgreement(
        a=names[0],
        b=names[1],
        n=joined.n,
        left_out={side: joined.reasons(side) for side in names},
        pearson=correlation(x, y, "pearson", **kwargs),
        spearman=correlation(x, y, "spearman", **kwargs),
        kendall=correlation(x, y, "kendall", **kwargs),
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


# --- one metric against the humans --------------------------------------------------------------


@dataclass(frozen=True)
class MetricAgreement:
    """Everything about one metric's agreement with the humans on one set (or one group).

    Attributes:
        metric: The metric's name.
        n: Items with both a judge score and a human score.
        n_items: Items in the set (or group).
        n_unscored: Items the judge left unscored.
        unscored_reasons: Counts of unscored reasons.
        n_missing: Set items absent from the judge's scores.
        pearson: Pearson correlation with interval.
        spearman: Spearman correlation with interval.
        kendall: Kendall tau-b with interval.
        binary: AUROC and threshold metrics, for binary human labels.
        keypoints: Per-point verdict agreement, for K-QA key-point sets with verdicts.
        mean_judge: Mean judge score over the joined items.
        mean_human: Mean normalised human score over the joined items.
        left_out: Every left-out id with its reason.
    """

    metric: str
    n: int
    n_items: int
    n_unscored: int
    unscored_reasons: dict[str, int]
    n_missing: int
    pearson: Estimate
    spearman: Estimate
    kendall: Estimate
    binary: BinaryAgreement | None = None
    keypoints: KeyPointAgreement | None = None
    mean_judge: float | None = None
    mean_human: float | None = None
    left_out: tuple[LeftOut, ...] = field(default=(), repr=False)


def metric_agreement(
    items: Sequence[CalibrationItem],
    scores: ScoreInput,
    *,
    metric: str = "judge",
    unscored_reasons: Mapping[str, str] | None = None,
    point_verdicts: Mapping[str, bool | None] | None = None,
    defects: Mapping[str, bool | None] | None = None,
    n_resamples: int = 1000,
    n_folds: int = 5,
    seed: int = 0,
    group_by_question: bool = True,
    objective: Objective = "accuracy",
    allow_extra_ids: bool = False,
) -> MetricAgreement:
    """All statistics of one metric's scores against the items' human scores.

    Human scores are the normalised ones (0..1); correlations are unchanged by the linear
    rescaling, and binary treatment applies when the scale is binary or K-QA key points.

    Args:
        items: The set's items (one scale).
        scores: Judge score per item id (``None`` = unscored).
        metric: The metric's name.
        unscored_reasons: Why unscored items are unscored.
        point_verdicts: Per-point verdicts (key-point sets), by item id.
        defects: Per-item defect flags (key-point sets), by item id.
        n_resamples: Bootstrap resamples.
        n_folds: Folds for the threshold cross-validation.
        seed: Seed for the bootstrap and folds.
        group_by_question: Keep each question's candidates in one fold.
        objective: What the cross-validated threshold maximises.
        allow_extra_ids: Leave out score ids not in ``items`` instead of refusing them.

    Raises:
        JoinError: When scores and items cannot be joined safely.
    """
    human = {item.id: item.human_norm for item in items}
    joined = join_scores(
        scores, human, unscored_reasons=unscored_reasons, allow_extra_judge_ids=allow_extra_ids
    )
    judge_out = [x for x in joined.left_out if x.side == "judge"]
    n_missing = sum(1 for x in judge_out if x.reason == MISSING)
    reasons = Counter(x.reason for x in judge_out if x.reason != MISSING)
    kwargs: dict[str, Any] = {"n_resamples": n_resamples, "seed": seed}
    binary = None
    scale = items[0].scale if items else None
    if scale is not None and scale.is_binary_label and joined.n:
        by_id = {item.id: item for item in items}
        groups = [by_id[i].question_key for i in joined.ids] if group_by_question else None
        binary = binary_agreement(
            joined.judge,
            joined.human,
            groups=groups,
            n_folds=n_folds,
            objective=objective,
            **kwargs,
        )
    keypoints = None
    if scale is not None and scale.kind == "keypoint" and point_verdicts is not None:
        keypoints = keypoint_agreement(
            point_verdicts,
            {item.id: item.human_score for item in items},
            defects=defects,
            unscored_reasons=unscored_reasons,
        )
    return MetricAgreement(
        metric=metric,
        n=joined.n,
        n_items=len(items),
        n_unscored=sum(reasons.values()),
        unscored_reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        n_missing=n_missing,
        pearson=correlation(joined.judge, joined.human, "pearson", **kwargs),
        spearman=correlation(joined.judge, joined.human, "spearman", **kwargs),
        kendall=correlation(joined.judge, joined.human, "kendall", **kwargs),
        binary=binary,
        keypoints=keypoints,
        mean_judge=float(joined.judge.mean()) if joined.n else None,
        mean_human=float(joined.human.mean()) if joined.n else None,
        left_out=joined.left_out,
    )


def breakdown(
    items: Sequence[CalibrationItem],
    scores: Mapping[str, float | None],
    group_field: str,
    **kwargs: Any,
) -> dict[str, MetricAgreement]:
    """:func:`metric_agreement` per value of a group field (source, dimension, system...).

    Items without a value for the field are left out of every group. Scores are restricted to
    each group's ids, so unscored counts are per group too.

    Args:
        items: The set's items.
        scores: Judge score per item id.
        group_field: The field to group by (see :meth:`CalibrationItem.group`).
        **kwargs: Passed on to :func:`metric_agreement` (per-item mappings are restricted too).

    Returns:
        Statistics per group value, in sorted order of the values.
    """
    groups: dict[str, list[CalibrationItem]] = {}
    for item in items:
        value = item.group(group_field)
        if value is not None:
            groups.setdefault(value, []).append(item)
    known = {item.id for item in items}
    foreign = [key for key in scores if key not in known]
    if foreign and not kwargs.get("allow_extra_ids", False):
        raise JoinError(
            f"{len(foreign)} score id(s) are not in the set (e.g. {foreign[0]!r})", field="id"
        )
    out: dict[str, MetricAgreement] = {}
    for value in sorted(groups):
        members = groups[value]
        ids = {item.id for item in members}
        sub_kwargs: dict[str, Any] = {
            key: ({k: v for k, v in arg.items() if k in ids} if isinstance(arg, Mapping) else arg)
            for key, arg in kwargs.items()
        }
        sub_kwargs["allow_extra_ids"] = False
        out[value] = metric_agreement(
            members, {k: v for k, v in scores.items() if k in ids}, **sub_kwargs
        )
    return out


# --- serialisation ------------------------------------------------------------------------------


def to_jsonable(value: Any, *, drop: Callable[[str], bool] | None = None) -> Any:
    """Turn dataclasses, numpy values and non-finite floats into plain JSON values.

    NaN and infinities become ``None`` (JSON has no NaN); tuples become lists.

    Args:
        value: What to convert.
        drop: Field names to leave out of dataclasses (e.g. bulky per-item lists).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_jsonable(getattr(value, f.name), drop=drop)
            for f in dataclasses.fields(value)
            if drop is None or not drop(f.name)
        }
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v, drop=drop) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v, drop=drop) for v in value]
    if isinstance(value, np.ndarray):
        return [to_jsonable(v, drop=drop) for v in value.tolist()]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return _finite(value)
    if hasattr(value, "model_dump"):
        return to_jsonable(value.model_dump(), drop=drop)
    return value
