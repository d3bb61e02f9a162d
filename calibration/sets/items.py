"""A calibration set's line: the item model, the two JSONL line formats, scores and ratings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
)

from judge.mapping import Scale, parse_scale

# K-QA's physician labels, as they appear in ``meta.labels`` of the key-point set.
_KQA_LABELS: dict[str, int] = {"entailment": 1, "neutral": 0, "contradiction": -1}


class CalibrationItem(BaseModel):
    """One human-rated answer, whatever the line format it was read from.

    Attributes:
        id: Unique within the set; every statistic joins judge and human scores on it.
        source: Data set (calibration format) or book name (CharToM format).
        question: The question.
        context: The passage or story plot, if any.
        reference: The reference answer (several joined when the source had several).
        references: All reference answers (at least ``[reference]``).
        candidate: The rated answer.
        bonus_points: Points to judge coverage against (CharToM ``bonus_points``, K-QA
            must-have statements), when the set has them.
        key_point: K-QA key-point rows: the gold statement this row rates.
        key_point_category: K-QA key-point rows: ``Must_have`` or ``Nice_to_have``.
        human_score: The human rating as stored, on ``scale``.
        human_norm: The human rating mapped onto 0..1 (see :meth:`Scale.normalize`).
        annotator_scores: Individual annotators' raw ratings, when known (``None`` = missing).
        annotator_scores_from: Where they were read: ``annotator_scores``, or the ``meta``
            field that holds them (``meta.rater_correctness``).
        scale: The parsed scale.
        dimension: ToM dimension or another rated dimension, when known.
        system: The system that produced the candidate, when known.
        question_id: Identifies the question across candidates, when known.
        line: 1-based line number in the file.
        format: Which line format the item was read from.
        meta: Everything else from the line.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    source: str
    question: str
    context: str | None = None
    reference: str
    references: list[str]
    candidate: str
    bonus_points: list[str] | None = None
    key_point: str | None = None
    key_point_category: str | None = None
    human_score: float
    human_norm: float = Field(ge=0.0, le=1.0)
    annotator_scores: list[float | None] | None = None
    annotator_scores_from: str | None = None
    scale: Scale
    dimension: str | None = None
    system: str | None = None
    question_id: str | None = None
    line: int = Field(ge=1)
    format: Literal["calibration", "chartom"] = "calibration"
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def question_key(self) -> str:
        """Key that groups the candidates of one question (``question_id``, else the text).

        Cross-validation splits on it so that answers to one question never sit on both sides.
        """
        return self.question_id if self.question_id is not None else self.question.strip().lower()

    @property
    def is_contradicted(self) -> bool:
        """Whether the humans judged this key point contradicted (K-QA ``-1``)."""
        return self.scale.kind == "keypoint" and self.human_score == -1.0

    def group(self, field: str) -> str | None:
        """The item's value for a group field, for breakdowns.

        Looks at ``source``, ``dimension``, ``system``, ``key_point_category`` and
        ``question_id`` first, then at ``meta[field]`` when it holds a scalar.

        Args:
            field: The group field's name.

        Returns:
            The value as a string, or ``None`` when the item has none.
        """
        value = getattr(self, field) if field in _GROUP_ATTRIBUTES else self.meta.get(field)
        if value is None or isinstance(value, dict | list):
            return None
        return str(value)


_GROUP_ATTRIBUTES = frozenset(
    {"source", "dimension", "system", "key_point_category", "question_id"}
)


# --- raw line models ---------------------------------------------------------------------------


def _require_text(value: str, info: ValidationInfo) -> str:
    if not value.strip():
        raise ValueError(f"{info.field_name} is empty")
    return value


def _number_not_text(value: Any) -> Any:
    # "1" or true would coerce silently; a rating stored as text is a conversion bug.
    if isinstance(value, bool | str):
        raise ValueError(f"human_score must be a number, got {value!r}")
    return value


_Text = Annotated[str, AfterValidator(_require_text)]
"""A required text field that must not be blank."""

_HumanScore = Annotated[float, BeforeValidator(_number_not_text)]
"""A human score: a number, never a bool or a numeric string."""


class _CalibrationLine(BaseModel):
    """The calibration format as it appears on a line (validated before mapping)."""

    model_config = ConfigDict(extra="allow")

    id: str | int
    source: _Text
    question: _Text
    context: str | None = None
    reference: _Text
    references: list[str] | None = None
    candidate: str
    human_score: _HumanScore
    score_scale: str | None = None
    key_point: str | None = None
    key_point_category: str | None = None
    key_points: dict[str, list[str]] | list[str] | None = None
    annotator_scores: list[float | None] | None = None
    dimension: str | None = None
    system: str | None = None
    question_id: str | int | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class _CharToMLine(BaseModel):
    """A CharToM-QA item carrying a response and a human score."""

    model_config = ConfigDict(extra="allow")

    id: str | int | None = None
    book_name: str | None = None
    tom_dimension: str | None = None
    question: _Text
    answer: _Text
    bonus_points: list[str] | None = None
    misleading_choices: list[str] | None = None
    response: str
    human_score: _HumanScore
    score_scale: str | None = None
    annotator_scores: list[float | None] | None = None
    context_0: str | None = None
    context_1000: str | None = None
    context_2000: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


CHARTOM_DEFAULT_SCALE = "0-1"
"""Scale assumed for CharToM-format lines without ``score_scale``: the paper's 0-1 ratings."""


def _is_chartom(raw: Mapping[str, Any]) -> bool:
    return "answer" in raw and "response" in raw and "candidate" not in raw


ANNOTATOR_META_KEYS = ("annotators", "annotator_scores", "ratings", "raters")
"""``meta`` keys that may hold one rating per annotator when a line has no
``annotator_scores`` (NQ-301's ``meta.annotators``); so may any ``meta.rater_*`` key
(SQuALITY's ``meta.rater_correctness``), and K-QA's ``meta.labels`` on a key-point scale."""

_RATING_KEYS = ("score", "rating", "label", "judgment", "judgement", "correct", "value")
"""Keys of a per-annotator object (``{"annotator": "a1", "score": 1}``) that hold its rating."""

_BINARY_LABELS = {
    "1": 1.0, "0": 0.0, "true": 1.0, "false": 0.0, "yes": 1.0, "no": 0.0, "correct": 1.0,
    "incorrect": 0.0, "right": 1.0, "wrong": 0.0,
}
"""Words an annotator's 0/1 verdict is stored as."""


def _rating(value: Any, scale: Scale) -> float | None:
    """One annotator's rating as a number on ``scale``.

    Raises:
        ValueError: ``value`` is not a rating on this scale (an annotator's name, say).
    """
    if isinstance(value, Mapping):
        key = next((k for k in _RATING_KEYS if k in value), None)
        if key is None:
            raise ValueError("an object without a rating")
        value = value[key]
    if value is None:
        return None  # this annotator did not rate the item
    if isinstance(value, bool):
        if scale.kind != "binary":
            raise ValueError("a true/false rating on a graded scale")
        return float(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if scale.kind == "keypoint" and word in _KQA_LABELS:
            return float(_KQA_LABELS[word])
        if scale.kind == "binary" and word in _BINARY_LABELS:
            return _BINARY_LABELS[word]
        value = float(word)  # a number stored as text; anything else is not a rating
    if not isinstance(value, int | float):
        raise ValueError(f"not a rating: {value!r}")
    return scale.check(value, field="annotator rating")


def _ratings(value: Any, scale: Scale) -> list[float | None] | None:
    """A ``meta`` value as one rating per annotator, or None when it is not that."""
    entries = list(value.values()) if isinstance(value, Mapping) else value
    if not isinstance(entries, list) or not entries:
        return None
    try:
        ratings = [_rating(entry, scale) for entry in entries]
    except ValueError:
        return None
    return ratings if any(r is not None for r in ratings) else None


def _summarises(ratings: list[float | None], human_score: float) -> bool:
    """Whether ``human_score`` is the ratings' mean, median or majority (as sets combine them)."""
    given = sorted(r for r in ratings if r is not None)
    middle = len(given) // 2
    median = given[middle] if len(given) % 2 else (given[middle - 1] + given[middle]) / 2
    majority = max(set(given), key=given.count)
    return any(
        abs(summary - human_score) <= 1e-6
        for summary in (sum(given) / len(given), median, majority)
    )


def _annotators(
    values: list[float | None] | None,
    meta: Mapping[str, Any],
    scale: Scale,
    human_score: float,
) -> tuple[list[float | None] | None, str | None]:
    """The line's per-annotator ratings and where they were found, or ``(None, None)``.

    ``annotator_scores`` when the line has it; else a ``meta`` field holding one rating per
    annotator (:data:`ANNOTATOR_META_KEYS`, ``rater_*``, K-QA's ``labels``): a list, or an
    object by annotator, of numbers, 0/1 words or objects with a ``score``. When several such
    fields hold ratings (SQuALITY rates correctness, coverage and overall), the one the line's
    ``human_score`` summarises (mean, median or majority) is taken, and none if that is not one.

    Raises:
        ValueError: ``annotator_scores`` holds a rating off the scale.
    """
    if values is not None:
        return [
            None if v is None else scale.check(v, field="annotator_scores") for v in values
        ], "annotator_scores"
    found: list[tuple[str, list[float | None]]] = []
    for key, value in meta.items():
        wanted = key in ANNOTATOR_META_KEYS or key.startswith("rater_") or (
            key == "labels" and scale.kind == "keypoint"
        )
        ratings = _ratings(value, scale) if wanted else None
        if ratings is not None:
            found.append((key, ratings))
    if len(found) > 1:
        found = [(key, ratings) for key, ratings in found if _summarises(ratings, human_score)]
    if len(found) != 1:
        return None, None
    key, ratings = found[0]
    return ratings, f"meta.{key}"


def _fill_question(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """Use ``meta.original_question`` when ``question`` is blank.

    The LiveQA-Med conversion leaves ``question`` empty on 67 rows whose consumer question is
    kept in ``meta.original_question``; the rating is still valid, so recover the text and mark
    where it came from rather than drop the row.
    """
    question = raw.get("question")
    meta = raw.get("meta")
    if (question is None or (isinstance(question, str) and not question.strip())) and isinstance(
        meta, dict
    ):
        original = meta.get("original_question")
        if isinstance(original, str) and original.strip():
            return {
                **raw,
                "question": original,
                "meta": {**meta, "question_from": "original_question"},
            }
    return raw


def _item_from_line(
    raw: Mapping[str, Any],
    *,
    line: int,
    scale_override: Scale | None,
    chartom_context: Literal[0, 1000, 2000],
) -> CalibrationItem:
    """Validate one parsed line and map it onto :class:`CalibrationItem` (raises ValueError)."""
    if _is_chartom(raw):
        ch = _CharToMLine.model_validate(raw)
        scale = scale_override or parse_scale(ch.score_scale or CHARTOM_DEFAULT_SCALE)
        if ch.score_scale is None and scale_override is None:
            # Say where the 0-1 came from: a 1-5 rating here needs score_scale or scale=.
            try:
                scale.check(ch.human_score)
            except ValueError as exc:
                raise ValueError(
                    f"{exc}; the line has no score_scale, and CharToM lines default to "
                    f"{CHARTOM_DEFAULT_SCALE!r} (add score_scale or pass scale= to the loader)"
                ) from None
        extra = dict(ch.model_extra or {})
        contexts = {0: ch.context_0, 1000: ch.context_1000, 2000: ch.context_2000}
        context = contexts[chartom_context] or None
        meta: dict[str, Any] = {**extra, **ch.meta}
        if ch.misleading_choices:
            meta.setdefault("misleading_choices", ch.misleading_choices)
        annotators, annotators_from = _annotators(
            ch.annotator_scores, meta, scale, scale.check(ch.human_score)
        )
        return CalibrationItem(
            # Real CharToM items have no id; the line number is stable for a given file.
            id=str(ch.id) if ch.id is not None else f"line-{line}",
            source=ch.book_name or "chartom",
            question=ch.question,
            context=context,
            reference=ch.answer,
            references=[ch.answer],
            candidate=ch.response,
            bonus_points=list(ch.bonus_points) if ch.bonus_points else None,
            human_score=scale.check(ch.human_score),
            human_norm=scale.normalize(ch.human_score),
            annotator_scores=annotators,
            annotator_scores_from=annotators_from,
            scale=scale,
            dimension=ch.tom_dimension,
            system=_optional_str(meta.get("system")),
            question_id=_optional_str(meta.get("question_id")),
            line=line,
            format="chartom",
            meta=meta,
        )
    raw = _fill_question(raw)
    cal = _CalibrationLine.model_validate(raw)
    if cal.score_scale is None and scale_override is None:
        raise ValueError("score_scale: missing (and no scale was given to the loader)")
    scale = scale_override or parse_scale(cal.score_scale or "")
    if isinstance(cal.id, str) and not cal.id.strip():
        raise ValueError("id: is empty")
    meta = {**(cal.model_extra or {}), **cal.meta}
    bonus: list[str] | None = None
    if isinstance(cal.key_points, dict):
        bonus = cal.key_points.get("must_have") or None
        meta.setdefault("key_points", cal.key_points)
    elif isinstance(cal.key_points, list):
        bonus = cal.key_points or None
    if scale.kind == "keypoint" and not cal.key_point:
        raise ValueError("key_point: required on a key-point scale")
    annotators, annotators_from = _annotators(
        cal.annotator_scores, meta, scale, scale.check(cal.human_score)
    )
    return CalibrationItem(
        id=str(cal.id),
        source=cal.source,
        question=cal.question,
        context=cal.context or None,
        reference=cal.reference,
        references=list(cal.references) if cal.references else [cal.reference],
        candidate=cal.candidate,
        bonus_points=bonus,
        key_point=cal.key_point,
        key_point_category=cal.key_point_category,
        human_score=scale.check(cal.human_score),
        human_norm=scale.normalize(cal.human_score),
        annotator_scores=annotators,
        annotator_scores_from=annotators_from,
        scale=scale,
        dimension=cal.dimension or _optional_str(meta.get("dimension")),
        system=cal.system or _optional_str(meta.get("system")),
        question_id=_optional_str(cal.question_id)
        or _optional_str(meta.get("qid") or meta.get("question_id")),
        line=line,
        format="calibration",
        meta=meta,
    )


def _optional_str(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list) or value == "":
        return None
    return str(value)


