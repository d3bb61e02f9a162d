"""Judge scores against binary labels: AUROC, cross-validated thresholds, K-QA point verdicts.

Binary human labels (binary sets; K-QA key points read as covered vs not) get AUROC with a
bootstrap interval, and accuracy, F1 and Cohen's kappa at a threshold chosen by cross-validation
(chosen on the other folds, scored on the held-out fold, so the figure is not in-sample). K-QA
key points also get point-level accuracy and kappa of per-point verdicts, and how often
contradicted points are flagged as defects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from calibration.correlation import Estimate, bootstrap_ci, cohen_kappa
from calibration.scores import FloatArray, join_scores

Objective = Literal["accuracy", "f1"]
"""What a threshold is chosen to maximise."""


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
"""A 1-d array of item positions."""


def _accuracy(labels: npt.NDArray[np.int_], predicted: npt.NDArray[np.int_]) -> float:
    """Share of 0/1 predictions equal to their labels: sklearn's ``accuracy_score``.

    Computed here because sklearn checks its input on every call (about 3 ms), and a matcher fit
    takes about 200 of them, more than its arithmetic.
    """
    return float(np.mean(labels == predicted))


def _f1(labels: npt.NDArray[np.int_], predicted: npt.NDArray[np.int_]) -> float:
    """F1 of the positive class, 0 when neither has a positive: ``f1_score(zero_division=0)``."""
    true_positives = int(np.sum((labels == 1) & (predicted == 1)))
    denominator = int(np.sum(labels == 1)) + int(np.sum(predicted == 1))
    return 2 * true_positives / denominator if denominator else 0.0


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
        from sklearn.model_selection import StratifiedKFold  # at use: see calibration/__init__

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
                accuracy=_accuracy(y_int[test], predicted[test]),
            )
        )
    return ThresholdCV(
        objective=objective,
        n_folds=len(folds),
        grouped=grouped,
        accuracy=_accuracy(y_int, predicted),
        f1=_f1(y_int, predicted),
        kappa=cohen_kappa(y_int, predicted),
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
        from sklearn.metrics import roc_auc_score  # at use: see calibration/__init__

        auroc = Estimate(
            value=float(roc_auc_score(ya.astype(int), xa)),
            ci_low=low,
            ci_high=high,
            n=len(ya),
            note=note,
        )
    cv = cv_threshold(xa, ya, groups=groups, n_folds=n_folds, seed=seed, objective=objective)
    return BinaryAgreement(n_positive=n_pos, n_negative=n_neg, auroc=auroc, cv=cv)


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
        kappa=cohen_kappa(human_covered, judge_covered) if joined.n else None,
        confusion=confusion,
        n_contradicted=n_contra,
        contradicted_judged_covered=(
            float(judge_covered[contradicted].mean()) if n_contra else None
        ),
        contradicted_defect_rate=_share(contra_flags),
        other_defect_rate=_share(other_flags),
        note=note,
    )
