"""CSV and TSV calibration sets: a header row, each row validated as a JSONL line is."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.jsonl import BadLine

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


