"""Fitting a calibrated, monotone mapping from one judge configuration's score to the human scale.

Graded scales get isotonic regression (sklearn), binary labels (and K-QA "covered") get a
one-feature logistic regression. The fit reports its *cross-validated* error next to two
baselines (the training mean, and the raw judge score used as-is when it lies in 0..1), so any
gain is measured on items the mapping did not see.

The fitted mapping itself (:class:`CalibratedMapping`, :func:`load_mapping`, the
:class:`~judge.mapping.Scale` it carries) lives in ``judge.mapping``: grading reads and applies
it without scikit-learn. It is imported here so that ``calibration.mapping`` keeps offering the
whole mapping API. A coverage mapping belongs to the judge configuration it was fitted on, a
ROUGE-L or BERTScore mapping to that metric's settings (``metric_config``; see
:class:`MappingConfigMismatch`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Required, TypedDict, Unpack

import numpy as np
import numpy.typing as npt

from calibration.agreement import FloatArray, ScoreInput, join_scores, stratified_group_folds
from calibration.sets import CalibrationItem
from core.errors import ConfigError, InputError
from judge.mapping import (
    MAPPING_FORMAT_VERSION,
    MIN_ITEMS,
    CalibratedMapping,
    CVErrors,
    CVFigures,
    MappingConfigMismatch,
    MappingKind,
    Scale,
    load_mapping,
)

__all__ = [
    "MAPPING_FORMAT_VERSION",
    "MIN_ITEMS",
    "CVErrors",
    "CVFigures",
    "CalibratedMapping",
    "MappingCV",
    "MappingConfigMismatch",
    "MappingKind",
    "ReliabilityBin",
    "cross_validate_mapping",
    "fit_mapping",
    "fit_mapping_with_cv",
    "load_mapping",
    "reliability_bins",
]

# Weak L2 penalty: keeps the slope finite when a judge separates the classes perfectly, without
# shrinking it noticeably on scores that live in 0..1.
_LOGISTIC_C = 100.0


@dataclass(frozen=True)
class _Params:
    knots_x: list[float] | None = None
    knots_y: list[float] | None = None
    coef: float | None = None
    intercept: float | None = None


def _fit(kind: MappingKind, x: FloatArray, y: FloatArray) -> _Params:
    from sklearn.isotonic import IsotonicRegression  # at use: see calibration/__init__
    from sklearn.linear_model import LogisticRegression

    if kind == "isotonic":
        # increasing=True: a judge score is meant to rise with quality; a judge that runs the
        # other way gets a flat map, and its CV error shows no gain over the constant baseline.
        model = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
        model.fit(x, y)
        return _Params(
            knots_x=[float(v) for v in model.X_thresholds_],
            knots_y=[float(v) for v in model.y_thresholds_],
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model_lr = LogisticRegression(C=_LOGISTIC_C)
        model_lr.fit(x.reshape(-1, 1), y.astype(int))
    return _Params(coef=float(model_lr.coef_[0][0]), intercept=float(model_lr.intercept_[0]))


def _predict(kind: MappingKind, params: _Params, x: FloatArray) -> FloatArray:
    if kind == "isotonic":
        return np.asarray(np.interp(x, params.knots_x or [], params.knots_y or []), np.float64)
    z = (params.coef or 0.0) * x + (params.intercept or 0.0)
    return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)


def _errors(predicted: FloatArray, observed: FloatArray) -> CVErrors:
    diff = predicted - observed
    return CVErrors(mae=float(np.mean(np.abs(diff))), brier=float(np.mean(diff * diff)))


@dataclass(frozen=True)
class MappingCV:
    """Cross-validation of a mapping: figures plus the held-out predictions behind them.

    Attributes:
        figures: Errors of the mapping and the baselines.
        ids: Item ids, aligned with the arrays.
        judge: Judge scores.
        human: Normalised human scores.
        predicted: Each item's prediction from the mapping fitted without its fold.
    """

    figures: CVFigures
    ids: tuple[str, ...]
    judge: FloatArray
    human: FloatArray
    predicted: FloatArray


def _default_kind(scale: Scale) -> MappingKind:
    return "logistic" if scale.is_binary_label else "isotonic"


def _prepare(
    items: Sequence[CalibrationItem],
    scores: ScoreInput,
    unscored_reasons: Mapping[str, str] | None,
    kind: MappingKind | None,
) -> tuple[MappingKind, Scale, tuple[str, ...], FloatArray, FloatArray]:
    if not items:
        raise InputError("cannot fit a mapping on an empty set", field="items")
    scale = items[0].scale
    chosen = kind or _default_kind(scale)
    joined = join_scores(
        scores, {i.id: i.human_norm for i in items}, unscored_reasons=unscored_reasons
    )
    if joined.n < MIN_ITEMS:
        raise InputError(
            f"a mapping needs at least {MIN_ITEMS} scored items, got {joined.n}", field="scores"
        )
    if chosen == "logistic":
        if not np.isin(joined.human, (0.0, 1.0)).all():
            raise InputError("a logistic mapping needs 0/1 human labels", field="kind")
        if len(np.unique(joined.human)) < 2:
            raise InputError("a logistic mapping needs both human labels present", field="scores")
    return chosen, scale, joined.ids, joined.judge, joined.human


def _splits(
    kind: MappingKind, y: FloatArray, groups: list[str] | None, n_folds: int, seed: int
) -> list[tuple[Any, Any]]:
    k = min(n_folds, len(y))
    if groups is not None:
        k = min(k, len(set(groups)))
    stratify = kind == "logistic"
    if stratify:
        k = min(k, int(y.sum()), int(len(y) - y.sum()))
    if k < 2:
        raise InputError(
            "too few items (or classes, or questions) for 2 cross-validation folds", field="scores"
        )
    from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold  # see __init__

    x_dummy = np.zeros(len(y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if stratify and groups is not None:
            return list(stratified_group_folds(y, groups, n_folds=k, seed=seed))
        if stratify:
            splitter: Any = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
            return list(splitter.split(x_dummy, y.astype(int)))
        if groups is not None:
            splitter = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
            return list(splitter.split(x_dummy, y, groups=groups))
        return list(KFold(n_splits=k, shuffle=True, random_state=seed).split(x_dummy))


def cross_validate_mapping(
    items: Sequence[CalibrationItem],
    scores: ScoreInput,
    *,
    unscored_reasons: Mapping[str, str] | None = None,
    kind: MappingKind | None = None,
    n_folds: int = 5,
    seed: int = 0,
    group_by_question: bool = True,
) -> MappingCV:
    """Cross-validate a mapping: fit on k-1 folds, predict the held-out fold, pool the errors.

    Args:
        items: The calibration set's items.
        scores: Judge score per item id.
        unscored_reasons: Why unscored items are unscored (they are left out).
        kind: Force ``isotonic`` or ``logistic`` (default: by the set's scale).
        n_folds: Folds.
        seed: Fold shuffling seed.
        group_by_question: Keep each question's candidates in one fold.

    Raises:
        InputError: Too few items, or labels unsuitable for the kind.
        JoinError: When the scores cannot be joined to the items.
    """
    chosen, scale, ids, x, y = _prepare(items, scores, unscored_reasons, kind)
    by_id = {item.id: item for item in items}
    groups = [by_id[i].question_key for i in ids] if group_by_question else None
    folds = _splits(chosen, y, groups, n_folds, seed)
    predicted = np.zeros(len(y))
    constant = np.zeros(len(y))
    for train, test in folds:
        train_y = y[train]
        if chosen == "logistic" and len(np.unique(train_y)) < 2:
            # A training split with one class cannot fit a slope: predict its base rate.
            predicted[test] = float(train_y.mean())
        else:
            predicted[test] = _predict(chosen, _fit(chosen, x[train], train_y), x[test])
        constant[test] = float(train_y.mean())
    identity = None
    if x.min() >= 0.0 and x.max() <= 1.0:
        identity = _errors(np.clip(x, 0.0, 1.0), y)
    mapped = _errors(predicted, y)
    span = scale.hi - scale.lo if scale.kind == "range" else 1.0
    figures = CVFigures(
        folds=len(folds),
        grouped=groups is not None,
        primary="brier" if chosen == "logistic" else "mae",
        mapped=mapped,
        constant=_errors(constant, y),
        identity=identity,
        mae_raw=mapped.mae * span,
        seed=seed,
    )
    return MappingCV(figures=figures, ids=ids, judge=x, human=y, predicted=predicted)


class CVOptions(TypedDict, total=False):
    """The options of :func:`cross_validate_mapping`, which the fits take too (all optional)."""

    unscored_reasons: Mapping[str, str] | None
    kind: MappingKind | None
    n_folds: int
    seed: int
    group_by_question: bool


class FitOptions(CVOptions, total=False):
    """The keyword arguments of :func:`fit_mapping`: what the mapping file records, and CV."""

    judge_config_hash: Required[str]
    set_name: Required[str]
    set_hash: Required[str]
    metric: str | None
    judge_version: str | None
    metric_config: Mapping[str, Any] | None


def fit_mapping(
    items: Sequence[CalibrationItem], scores: ScoreInput, **options: Unpack[FitOptions]
) -> CalibratedMapping:
    """Fit a monotone mapping from judge scores to the human scale, with its CV error.

    The saved mapping is fitted on all joined items; the figures in ``cv`` come from
    :func:`cross_validate_mapping` with the same options, so they describe unseen items.

    Args:
        items: The calibration set's items (one scale).
        scores: The judge configuration's score per item id.
        **options: ``judge_config_hash`` (hash of that judge configuration), ``set_name``,
            ``set_hash`` (the set file's SHA-256), and optionally ``metric`` (the metric's name,
            recorded in the file), ``judge_version`` (the embedded matcher's version),
            ``metric_config`` (for ROUGE-L and BERTScore: the metric's settings, which the
            mapping then belongs to instead of the judge configuration) and the
            options of :func:`cross_validate_mapping` (``unscored_reasons``, ``kind``,
            ``n_folds``, ``seed``, ``group_by_question``).

    Raises:
        ConfigError: When ``judge_config_hash`` is empty.
        InputError: Too few items, or labels unsuitable for the kind.
        JoinError: When the scores cannot be joined to the items.
    """
    mapping, _ = fit_mapping_with_cv(items, scores, **options)
    return mapping


def fit_mapping_with_cv(
    items: Sequence[CalibrationItem],
    scores: ScoreInput,
    *,
    judge_config_hash: str,
    set_name: str,
    set_hash: str,
    metric: str | None = None,
    judge_version: str | None = None,
    metric_config: Mapping[str, Any] | None = None,
    **cv_options: Unpack[CVOptions],
) -> tuple[CalibratedMapping, MappingCV]:
    """:func:`fit_mapping`, also returning the held-out predictions (for reliability diagrams).

    Takes the same arguments as :func:`fit_mapping`.
    """
    if not judge_config_hash:
        raise ConfigError("judge_config_hash is required", field="judge_config_hash")
    cv = cross_validate_mapping(items, scores, **cv_options)
    chosen = cv_options.get("kind") or _default_kind(items[0].scale)
    params = _fit(chosen, cv.judge, cv.human)
    mapping = CalibratedMapping(
        kind=chosen,
        judge_config_hash=judge_config_hash,
        judge_version=judge_version,
        metric=metric,
        metric_config=dict(metric_config) if metric_config is not None else None,
        set_name=set_name,
        set_hash=set_hash,
        n=len(cv.ids),
        scale=items[0].scale,
        knots_x=params.knots_x,
        knots_y=params.knots_y,
        coef=params.coef,
        intercept=params.intercept,
        cv=cv.figures,
    )
    return mapping, cv


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of a reliability diagram.

    Attributes:
        lo: Lower edge of the predicted-value bin.
        hi: Upper edge.
        n: Items whose prediction falls in the bin.
        mean_predicted: Mean prediction in the bin.
        mean_observed: Mean normalised human score in the bin.
    """

    lo: float
    hi: float
    n: int
    mean_predicted: float | None
    mean_observed: float | None


def reliability_bins(
    predicted: npt.ArrayLike,
    observed: npt.ArrayLike,
    *,
    n_bins: int = 10,
) -> list[ReliabilityBin]:
    """Equal-width bins over 0..1 of predictions, with the mean human score in each.

    A calibrated mapping puts every bin on the diagonal (mean observed = mean predicted).

    Args:
        predicted: Predictions on 0..1 (use held-out ones for an honest diagram).
        observed: Normalised human scores, aligned.
        n_bins: Number of bins.
    """
    p = np.clip(np.asarray(predicted, dtype=np.float64), 0.0, 1.0)
    o = np.asarray(observed, dtype=np.float64)
    if p.shape != o.shape:
        raise ValueError("predicted and observed must be aligned")
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.minimum(np.searchsorted(edges, p, side="right") - 1, n_bins - 1)
    out = []
    for b in range(n_bins):
        mask = which == b
        count = int(mask.sum())
        out.append(
            ReliabilityBin(
                lo=float(edges[b]),
                hi=float(edges[b + 1]),
                n=count,
                mean_predicted=float(p[mask].mean()) if count else None,
                mean_observed=float(o[mask].mean()) if count else None,
            )
        )
    return out
