"""Loading a calibration set: every line validated on its own, bad lines reported, not fatal."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    ValidationError,
)

from calibration.sets.items import CalibrationItem, _item_from_line
from calibration.sets.tables import _TABLE_SUFFIXES, _csv_entries
from core.errors import InputError, every_error
from core.jsonl import BadLine, read_jsonl
from judge.mapping import Scale, parse_scale

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


