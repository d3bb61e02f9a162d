"""Human-rated calibration sets: the line format, the scale descriptor, loaders and the registry.

A calibration set is a JSONL file with one rated answer a line. Two line formats are accepted and
mapped onto one model, :class:`CalibrationItem`:

* the calibration format of ``/work/shared/calibration/README.md``: ``id``, ``source``,
  ``question``, ``context``, ``reference``, ``references``, ``candidate``, ``human_score``,
  ``score_scale``, ``key_point``/``key_point_category`` (K-QA), ``meta``; optionally
  ``annotator_scores`` (one score per annotator) and group fields (``dimension``, ``system``,
  ``question_id``);
* CharToM-QA items with a human score: ``question``, ``answer``, ``bonus_points``, ``response``,
  ``human_score``, ``tom_dimension``, ``book_name``, ``context_0/1000/2000``.

A set may also be a CSV (or TSV) table with a header row, the form a researcher's ratings are
most often in: columns ``question``, ``reference``, ``response`` (or ``candidate``) and
``human_score`` are required; ``id`` (or ``item_id``), ``source``, ``score_scale``, ``context``,
``references`` and ``bonus_points`` (a JSON list, or texts separated by ``|``),
``annotator_scores`` (likewise), ``key_point``, ``key_point_category``, ``dimension``,
``system`` and ``question_id`` are read as in the JSONL format, and any other column is kept in
``meta``. Each row is then validated exactly as a JSONL line is.

Loading never stops at the first bad line: every line is validated on its own, a bad line is
reported as a :class:`core.jsonl.BadLine` with its 1-based number and the reason, and the rest
still load. A set has one scale (``score_scale`` parsed into a :class:`Scale`); the statistics pick
their treatment from its kind (binary, graded range, or K-QA key-point verdicts).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
)

from core.errors import InputError, every_error
from core.jsonl import BadLine, read_jsonl
from judge.config import load_settings
from judge.mapping import KrippendorffLevel, Scale, ScaleKind, parse_scale

__all__ = [
    "ANNOTATOR_META_KEYS",
    "CALIBRATION_DIR_ENV",
    "CHARTOM_DEFAULT_SCALE",
    "CSV_REQUIRED_COLUMNS",
    "EXAMPLE_SETS",
    "SHARED_SETS",
    "CalibrationItem",
    "KrippendorffLevel",
    "LoadedSet",
    "Scale",
    "ScaleKind",
    "SharedSet",
    "example_set_path",
    "find_calibration_dir",
    "load_example_set",
    "load_set",
    "load_shared_set",
    "parse_scale",
    "resolve_calibration_dir",
]

CALIBRATION_DIR_ENV = "BONUSJUDGE_CALIBRATION_DIR"
"""Environment variable naming the folder that holds the shared calibration sets."""

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


# --- loading -----------------------------------------------------------------------------------


@dataclass
class LoadedSet:
    """A loaded calibration set: the items that loaded and the lines that did not.

    Attributes:
        name: The set's name (registry name or file stem).
        path: The file it was read from.
        sha256: Hex SHA-256 of the file's bytes: pins the exact set a figure was computed on.
        items: Items in file order.
        problems: Lines that did not load, with numbers and reasons.
        scale: The set's scale (of its first valid line, or the one given to the loader);
            ``None`` when nothing loaded.
    """

    name: str
    path: Path
    sha256: str
    items: list[CalibrationItem]
    problems: list[BadLine] = field(default_factory=list)
    scale: Scale | None = None

    @property
    def short_hash(self) -> str:
        """The first 16 hex digits of :attr:`sha256`, for tables and file names."""
        return self.sha256[:16]

    def by_id(self) -> dict[str, CalibrationItem]:
        """Items keyed by id."""
        return {item.id: item for item in self.items}

    def human_scores(self, *, normalized: bool = True) -> dict[str, float]:
        """Human scores keyed by item id, normalised to 0..1 or raw."""
        return {item.id: item.human_norm if normalized else item.human_score for item in self.items}


def _scale_signature(scale: Scale) -> tuple[str, float, float]:
    return (scale.kind, scale.lo, scale.hi)


def load_set(
    path: str | Path,
    *,
    name: str | None = None,
    scale: str | Scale | None = None,
    chartom_context: Literal[0, 1000, 2000] = 2000,
    strict: bool = False,
) -> LoadedSet:
    """Load a calibration set from a JSONL (or CSV/TSV) file, validating every line on its own.

    Blank lines are skipped. A line that is not JSON, not an object, fails validation, carries a
    duplicate id, or is on a different scale from the set's (one set has one scale) is reported
    in :attr:`LoadedSet.problems` and left out; the other lines still load. A ``.csv`` or
    ``.tsv`` file is read as a table (see the module's docstring); one without a required column
    is refused as a whole.

    Args:
        path: The JSONL, CSV or TSV file.
        name: The set's name (default: the file's stem).
        scale: Force a scale (text or :class:`Scale`) instead of each line's ``score_scale``.
        chartom_context: Which CharToM plot window (``context_0/1000/2000``) becomes ``context``.
        strict: Raise on the first problem instead of collecting problems.

    Returns:
        The loaded set with its items, problems, file hash and scale.

    Raises:
        InputError: When the file cannot be read, a table lacks a required column (or, with no
            ``score_scale`` column, a scale), or (``strict``) when a line is bad.
    """
    file = Path(path)
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read calibration set {file}: {exc}", field="path") from exc
    try:
        forced = parse_scale(scale) if isinstance(scale, str) else scale
    except ValueError as exc:
        raise InputError(str(exc), field="scale") from exc
    items: list[CalibrationItem] = []
    problems: list[BadLine] = []
    first_line_of: dict[str, int] = {}
    set_scale: Scale | None = forced
    suffix = file.suffix.lower()
    entries = (
        _csv_entries(data, file, scaled=forced is not None)
        if suffix in _TABLE_SUFFIXES
        else read_jsonl(data)
    )
    for entry in entries:
        problem, item = _load_line(entry, forced, chartom_context)
        if item is not None:
            if item.id in first_line_of:
                problem = BadLine(
                    item.line,
                    f"id: duplicate id (first on line {first_line_of[item.id]})",
                    field="id",
                    id=item.id,
                )
            elif set_scale is not None and _scale_signature(item.scale) != _scale_signature(
                set_scale
            ):
                problem = BadLine(
                    item.line,
                    f"score_scale: {item.scale.text!r} differs from the set's scale "
                    f"{set_scale.text!r} (one set has one scale)",
                    field="score_scale",
                    id=item.id,
                )
            else:
                set_scale = set_scale or item.scale
                first_line_of[item.id] = item.line
                items.append(item)
        if problem is not None:
            if strict:
                raise InputError(f"{file}: {problem}", field="line", line=problem.line)
            problems.append(problem)
    return LoadedSet(
        name=name or file.stem,
        path=file,
        sha256=hashlib.sha256(data).hexdigest(),
        items=items,
        problems=problems,
        scale=set_scale,
    )


def _load_line(
    entry: tuple[int, Any] | BadLine,
    forced: Scale | None,
    chartom_context: Literal[0, 1000, 2000],
) -> tuple[BadLine | None, CalibrationItem | None]:
    if isinstance(entry, BadLine):
        # This loader has always said "invalid JSON" (core.jsonl: "not valid JSON").
        message = entry.message.replace("not valid JSON", "invalid JSON", 1)
        return replace(entry, message=message), None
    number, raw = entry
    raw_id = raw.get("id")
    line_id = str(raw_id) if isinstance(raw_id, str | int) else None
    try:
        item = _item_from_line(
            raw, line=number, scale_override=forced, chartom_context=chartom_context
        )
    except ValidationError as exc:
        return BadLine(number, every_error(exc, whole="line"), id=line_id), None
    except ValueError as exc:
        return BadLine(number, str(exc), id=line_id), None
    return None, item


# --- CSV and TSV tables ------------------------------------------------------------------------

CSV_REQUIRED_COLUMNS = ("question", "reference", "response", "human_score")
"""Columns a CSV/TSV set must have (``candidate`` may stand for ``response``, ``answer`` for
``reference``, as in the JSONL formats)."""

_TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}
"""File suffixes read as tables, and their usual delimiter."""

_COLUMN_ALIASES = {"item_id": "id", "candidate": "response", "answer": "reference"}
"""Other names a column may have, and the calibration field it fills."""

_LIST_COLUMNS = frozenset({"references", "bonus_points", "annotator_scores"})
"""Columns holding several values: a JSON list, or values separated by ``|``."""

_TEXT_COLUMNS = frozenset(
    {"source", "score_scale", "context", "key_point", "key_point_category", "dimension",
     "system", "question_id"}
)
"""Optional columns that map onto the calibration format's fields of the same name."""


def _delimiter(header: str, suffix: str) -> str:
    """The table's delimiter: the suffix's usual one, unless the header plainly uses another.

    Spreadsheets in many locales save "CSV" with semicolons; a header of four or more columns
    shows which of comma, semicolon and tab separates them.
    """
    usual = _TABLE_SUFFIXES.get(suffix, ",")
    counts = {sep: header.count(sep) for sep in (",", ";", "\t")}
    best = max(counts, key=lambda sep: counts[sep])
    return best if counts[best] > counts[usual] else usual


def _list_cell(text: str, column: str) -> list[Any]:
    """A cell holding several values: a JSON list, else values separated by ``|``.

    Raises:
        ValueError: A cell starting with ``[`` is not a JSON list.
    """
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, list):
            raise ValueError(f"{column}: not a JSON list: {text[:60]!r}")
        return value
    parts = [part.strip() for part in text.split("|")]
    values: list[Any] = [part for part in parts if part]
    if column == "annotator_scores":
        # Empty slots are missing ratings (an annotator who skipped the item).
        values = [None if not part else _number(part) for part in parts]
    return values


def _number(text: str) -> float | str:
    """A numeric cell as a float; text that is not a number is left for validation to name."""
    try:
        return float(text)
    except ValueError:
        return text


def _row_to_line(
    row: Mapping[str, str], *, source: str, line: int, labels: Mapping[str, str]
) -> dict[str, Any]:
    """One table row as a line of the calibration format (validated like any JSONL line).

    ``row`` is keyed by the columns' calibration names; ``labels`` gives a column's header as
    written, which names it in ``meta``.

    Raises:
        ValueError: A list cell is malformed.
    """
    raw: dict[str, Any] = {"id": f"line-{line}", "source": source}
    meta: dict[str, Any] = {}
    for column, cell in row.items():
        text = cell.strip()
        if not text:
            continue  # an empty cell is a field left out (required ones are then named)
        if column in ("question", "reference"):
            raw[column] = text
        elif column == "response":
            raw["candidate"] = cell  # as given: validation treats an empty answer like JSONL
        elif column == "id":
            raw["id"] = text
        elif column == "human_score":
            raw["human_score"] = _number(text)
        elif column in _LIST_COLUMNS:
            values = _list_cell(text, column)
            raw["key_points" if column == "bonus_points" else column] = values
        elif column in _TEXT_COLUMNS:
            raw[column] = text
        else:
            meta[labels.get(column, column)] = text
    raw.setdefault("candidate", row.get("response", ""))
    raw["meta"] = meta
    return raw


def _csv_entries(
    data: bytes, file: Path, *, scaled: bool
) -> Iterator[tuple[int, Any] | BadLine]:
    """The rows of a CSV/TSV set as calibration-format lines, numbered by their first line.

    Raises:
        InputError: The file is not UTF-8 text, has no header, lacks a required column, or
            (``scaled`` False) has no ``score_scale`` column; nothing is read then.
    """
    try:
        text = data.decode("utf-8-sig")  # a spreadsheet's byte-order mark is no column name
    except UnicodeDecodeError as exc:
        raise InputError(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})",
                         field="path") from exc
    header = text.split("\n", 1)[0]
    reader = csv.reader(
        io.StringIO(text, newline=""), delimiter=_delimiter(header, file.suffix.lower())
    )
    try:
        columns = next(reader)
    except StopIteration:
        raise InputError(f"{file}: empty table (no header row)", field="path") from None
    except csv.Error as exc:
        raise InputError(f"{file}: header row: {exc}", field="path") from exc
    names = [_COLUMN_ALIASES.get(name.strip().lower(), name.strip().lower()) for name in columns]
    labels = {name: label.strip() for name, label in zip(names, columns, strict=True)}
    missing = [name for name in CSV_REQUIRED_COLUMNS if name not in names]
    if missing:
        raise InputError(
            f"{file}: missing column(s) {', '.join(missing)}; a CSV set needs "
            f"{', '.join(CSV_REQUIRED_COLUMNS)} (found: {', '.join(columns) or 'none'})",
            field="columns",
        )
    if not scaled and "score_scale" not in names:
        raise InputError(
            f"{file}: no score_scale column: give the human scores' scale (--scale, e.g. 1-5, "
            "0/1 or 0.2-1.0)",
            field="scale",
        )
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        raise InputError(
            f"{file}: column(s) given twice: {', '.join(doubled)}", field="columns"
        )
    line = reader.line_num + 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield BadLine(line, f"unreadable row: {exc}")
            line = reader.line_num + 1
            continue
        number, line = line, reader.line_num + 1
        if not any(cell.strip() for cell in cells):
            continue  # a blank row, as a blank JSONL line
        if len(cells) > len(names):
            yield BadLine(number, f"{len(cells)} cells, but the header has {len(names)} columns")
            continue
        row = dict(zip(names, [*cells, *[""] * (len(names) - len(cells))], strict=True))
        try:
            yield number, _row_to_line(row, source=file.stem, line=number, labels=labels)
        except ValueError as exc:
            yield BadLine(number, str(exc))


# --- where the shared sets live ----------------------------------------------------------------

_REPO_ROOT = Path(__file__).resolve().parents[1]


def _candidate_dirs() -> list[Path]:
    relative = Path("..") / "shared" / "calibration"
    return [Path.cwd() / relative, _REPO_ROOT / relative]


def find_calibration_dir(directory: str | Path | None = None) -> Path | None:
    """Locate the folder of shared calibration sets, or ``None`` when it is absent.

    Order: ``directory`` if given, else ``$BONUSJUDGE_CALIBRATION_DIR`` if set (either must exist:
    an explicit choice never falls through to a default), else ``../shared/calibration``
    relative to the current directory, then relative to the repository root.

    Args:
        directory: An explicit folder.

    Returns:
        The resolved folder, or ``None`` when no default folder exists.

    Raises:
        InputError: When an explicitly given folder (argument or env var) does not exist.
    """
    # $BONUSJUDGE_CALIBRATION_DIR is read where every setting is, by Settings (a settings
    # file's calibration_dir counts too).
    explicit = directory if directory is not None else load_settings().calibration_dir
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_dir():
            origin = "directory" if directory is not None else CALIBRATION_DIR_ENV
            raise InputError(
                f"calibration folder {path} (from {origin}) does not exist", field=origin
            )
        return path.resolve()
    for candidate in _candidate_dirs():
        if candidate.is_dir():
            return candidate.resolve()
    return None


def resolve_calibration_dir(directory: str | Path | None = None) -> Path:
    """Like :func:`find_calibration_dir`, but raise when no folder is found.

    Raises:
        InputError: When no calibration folder can be found.
    """
    found = find_calibration_dir(directory)
    if found is None:
        tried = ", ".join(str(p) for p in _candidate_dirs())
        raise InputError(
            f"no calibration folder found: set {CALIBRATION_DIR_ENV} or pass a path "
            f"(tried {tried})",
            field=CALIBRATION_DIR_ENV,
        )
    return found


@dataclass(frozen=True)
class SharedSet:
    """A registry entry for one of the shared human-rated sets.

    Attributes:
        name: Registry name.
        path: Path relative to the calibration folder.
        kind: The scale kind its ``score_scale`` parses to.
        description: What the set is.
    """

    name: str
    path: str
    kind: ScaleKind
    description: str


SHARED_SETS: dict[str, SharedSet] = {
    s.name: s
    for s in (
        SharedSet(
            "kpqa_nrqa_mhpgm", "kpqa/nrqa_mhpgm.jsonl", "range", "NarrativeQA answers, 0.2-1.0"
        ),
        SharedSet("kpqa_marco_all", "kpqa/marco_all.jsonl", "range", "MS MARCO, 1-5 mean"),
        SharedSet("kpqa_avsd_all", "kpqa/avsd_all.jsonl", "range", "AVSD, 1-5 mean"),
        SharedSet(
            "kpqa_marcomulti_unilm",
            "kpqa/marcomulti_unilm.jsonl",
            "range",
            "MS MARCO multi-span (UniLM), 1-5 mean",
        ),
        SharedSet("evouna_tq", "evouna/tq.jsonl", "binary", "EVOUNA TriviaQA, 0/1 correct"),
        SharedSet(
            "kqa_nli_keypoints",
            "kqa/kqa_nli_keypoints.jsonl",
            "keypoint",
            "K-QA gold statements: 1 covered, 0 not, -1 contradicted",
        ),
        SharedSet(
            "kqa_answer_level",
            "kqa/kqa_answer_level.jsonl",
            "range",
            "K-QA answers: share of must-have statements covered, 0-1",
        ),
        SharedSet(
            "liveqa_med",
            "liveqa_med/medquad_judged_answers.jsonl",
            "range",
            "LiveQA-Med 2017 judged answers, 1-4",
        ),
    )
}
"""The eight shared sets by name (paths relative to the calibration folder)."""


def load_shared_set(
    name: str, *, directory: str | Path | None = None, strict: bool = False
) -> LoadedSet:
    """Load one of the :data:`SHARED_SETS` by name.

    Args:
        name: Registry name, or the file's path relative to the folder (``kpqa/nrqa_mhpgm``).
        directory: The calibration folder (default: see :func:`find_calibration_dir`).
        strict: Raise on the first bad line.

    Raises:
        InputError: Unknown name, missing folder or file, or (``strict``) a bad line.
    """
    entry = SHARED_SETS.get(name)
    if entry is None:
        # Also accept the file's relative path, with or without ".jsonl" ("kpqa/nrqa_mhpgm").
        wanted = name.removesuffix(".jsonl")
        entry = next(
            (e for e in SHARED_SETS.values() if e.path.removesuffix(".jsonl") == wanted), None
        )
    if entry is None:
        known = ", ".join(sorted(SHARED_SETS))
        raise InputError(f"unknown calibration set {name!r}; known: {known}", field="name")
    base = resolve_calibration_dir(directory)
    return load_set(base / entry.path, name=entry.name, strict=strict)


EXAMPLE_SETS: dict[str, str] = {
    "example": "example.jsonl",
    "example_binary": "example_binary.jsonl",
    "example_keypoints": "example_keypoints.jsonl",
}
"""Small packaged sets of our own making (graded 0-1, binary, K-QA key points) for tests/demos."""


def example_set_path(name: str = "example") -> Path:
    """Path of a packaged example set.

    Raises:
        InputError: When ``name`` is not one of :data:`EXAMPLE_SETS`.
    """
    if name not in EXAMPLE_SETS:
        raise InputError(
            f"unknown example set {name!r}; known: {', '.join(sorted(EXAMPLE_SETS))}", field="name"
        )
    return Path(str(resources.files("calibration") / "data" / EXAMPLE_SETS[name]))


def load_example_set(name: str = "example") -> LoadedSet:
    """Load a packaged example set (strictly: they must always load cleanly)."""
    return load_set(example_set_path(name), name=name, strict=True)
