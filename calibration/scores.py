"""Joining two score sets by item id: the step every agreement statistic starts from.

:func:`join_scores` pairs ``{item_id: judge_score}`` with ``{item_id: human_score}`` and says
which ids were left out and why. Filtering two lists separately and zipping them
(prometheus-eval's ``calculate_mean_scores``) lets one empty score shift one list against the
other; a join by id cannot.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.errors import InputError

FloatArray = npt.NDArray[np.float64]
"""A 1-d array of scores."""

ScoreInput = Mapping[str, float | None] | Iterable[tuple[str, float | None]]
"""Scores keyed by item id: a mapping, or (id, score) pairs (checked for duplicate ids)."""


class JoinError(InputError):
    """Judge and human scores cannot be joined safely (duplicate, foreign or non-text ids)."""


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


def join_pairs(
    left: ScoreInput,
    right: ScoreInput,
    *,
    left_side: str,
    right_side: str,
    left_reasons: Mapping[str, str] | None,
    right_reasons: Mapping[str, str] | None,
    allow_extra_left: bool,
) -> Joined:
    """Pair two score sets by item id; the right side defines the set (its order, its ids).

    :func:`join_scores` is this with a judge on the left and the humans on the right; two judge
    configurations (or one judge run twice) are joined with their own names on either side.

    Raises:
        JoinError: See :func:`join_scores`.
    """
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
    return join_pairs(
        judge,
        human,
        left_side="judge",
        right_side="human",
        left_reasons=unscored_reasons,
        right_reasons=None,
        allow_extra_left=allow_extra_judge_ids,
    )
