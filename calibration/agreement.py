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

The statistics live in :mod:`calibration.scores` (the join), :mod:`calibration.correlation`
(correlations and the bootstrap), :mod:`calibration.classification` (binary labels and key
points) and :mod:`calibration.raters` (annotators, judge vs judge, test-retest); this module
puts them together for one metric (:func:`metric_agreement`, :func:`breakdown`) and exports
them all under the names below.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibration.classification import (
    BinaryAgreement,
    FoldThreshold,
    KeyPointAgreement,
    ThresholdCV,
    best_threshold,
    binary_agreement,
    cv_threshold,
    keypoint_agreement,
    stratified_group_folds,
)
from calibration.classification import IntArray as IntArray
from calibration.classification import Objective as Objective
from calibration.correlation import MIN_PAIRS as MIN_PAIRS
from calibration.correlation import CorrelationMethod as CorrelationMethod
from calibration.correlation import (
    Estimate,
    bootstrap_ci,
    correlation,
    correlations,
    finite_or_none,
)
from calibration.correlation import Statistic as Statistic
from calibration.raters import MAX_KAPPA_LEVELS as MAX_KAPPA_LEVELS
from calibration.raters import (
    AlphaResult,
    PairAgreement,
    inter_annotator_agreement,
    judge_vs_judge,
    krippendorff_alpha,
    test_retest,
)
from calibration.scores import MISSING as MISSING
from calibration.scores import FloatArray as FloatArray
from calibration.scores import (
    Joined,
    JoinError,
    LeftOut,
    join_scores,
)
from calibration.scores import ScoreInput as ScoreInput
from calibration.sets import CalibrationItem

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
# The names imported "as" themselves above (MISSING, FloatArray, Objective...) are not in
# __all__ but stay importable from here, as before the modules were split: tests,
# calibration.mapping and calibration.report import them from this module.


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
        **correlations(joined.judge, joined.human, **kwargs),
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
        return finite_or_none(value)
    if hasattr(value, "model_dump"):
        return to_jsonable(value.model_dump(), drop=drop)
    return value
