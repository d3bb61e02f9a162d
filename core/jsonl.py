r"""The one JSONL reader: CLI input, service uploads, MCQ input and calibration sets all read here.

A JSONL file from the wild breaks in a handful of known ways, and each must cost one line, never
the file: a byte-order mark from a Windows editor before line 1, a line of invalid UTF-8, a line
that is not JSON (or nests deeper than the parser's stack), and the Unicode line separators
U+2028/U+0085 that JSON allows raw inside strings (``str.splitlines`` would cut an item in two
there, so lines split on ``"\n"`` only). Callers get ``(line number, value)`` for each usable line
and a ``BadLine`` for each that is not, and decide what a value must be (a grading request, an
MCQ item, a rated answer) themselves.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from core.errors import InputError


@dataclass(frozen=True)
class BadLine:
    """A line of a JSONL input that could not be used; the rest of the input goes on.

    Attributes:
        line: 1-based line number.
        message: What is wrong, starting with the field when one is to blame
            (``"points.0: String should have at least 1 character"``).
        field: The offending field, when known.
        id: The line's item id, when it could be read.
        respondent: The model that wrote the line's answer, when it could be read: a summary
            counts each respondent's invalid lines, since its figures leave them out.
    """

    line: int
    message: str
    field: str | None = None
    id: str | None = None
    respondent: str | None = None

    def __str__(self) -> str:
        # Name the item when its id is known, else the field at fault, so a reader can find it.
        if self.id is not None:
            where = f" (id {self.id!r})"
        elif self.field is not None:
            where = f" (field {self.field})"
        else:
            where = ""
        return f"line {self.line}{where}: {self.message}"


def parse_line(raw: str | bytes) -> Any:
    """Parse one JSONL line: the one line parser every reader uses.

    Raises:
        json.JSONDecodeError: the line is not JSON, or nests too deep for the parser (which
            raises ``RecursionError`` for that): either way that line's problem, not the file's.
    """
    try:
        return json.loads(raw)
    except RecursionError:
        # The stack is unwound by now; report it like any other malformed line.
        text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deeply", text, 0) from None


def read_jsonl(
    source: str | Path | bytes | IO[bytes], *, objects: bool = True, field: str = "input"
) -> Iterator[tuple[int, Any] | BadLine]:
    """Stream a JSONL file or upload: ``(line, value)`` per usable line, ``BadLine`` per bad one.

    Blank lines are skipped. The input is read lazily, one line at a time, so a large input is
    never held whole (nor split into a list of its lines).

    Args:
        source: A path to read, the bytes of an upload, or a binary file open for reading
            (read from where it stands; the caller closes it).
        objects: Require each line to be a JSON object (every input bonusjudge reads is one
            object a line); a list or a number is then a bad line.
        field: The input's name in the error raised when the file cannot be opened.

    Raises:
        InputError: (``field``) the file cannot be opened; bad lines never raise.
    """
    if isinstance(source, bytes):
        # A view of the bytes, not a copy: iterating it splits on b"\n" as a file does.
        yield from _read_lines(io.BytesIO(source), objects)
        return
    if not isinstance(source, str | Path):
        yield from _read_lines(source, objects)
        return
    try:
        handle = open(source, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise InputError(f"cannot read {source}: {exc.strerror or exc}", field=field) from exc
    with handle:
        # Binary iteration splits on b"\n" only, which is what JSONL means by a line.
        yield from _read_lines(handle, objects)


def read_rows(path: str | Path, *, field: str = "input") -> list[dict[str, Any]]:
    """Read a whole JSONL file of objects that must be clean: the first bad line raises.

    For data a partial read would silently skew (calibration sets, fit inputs), not for user
    uploads, which keep their good lines (:func:`read_jsonl`).

    Args:
        path: The file.
        field: The input's name in the error raised when the file cannot be opened.

    Returns:
        The rows, in file order.

    Raises:
        InputError: the file cannot be opened (``field``), or a line is bad (``path:line:``
            and the line number).
    """
    rows: list[dict[str, Any]] = []
    for entry in read_jsonl(path, field=field):
        if isinstance(entry, BadLine):
            raise InputError(f"{path}:{entry.line}: {entry.message}", line=entry.line)
        rows.append(entry[1])
    return rows


def _read_lines(lines: Iterable[bytes], objects: bool) -> Iterator[tuple[int, Any] | BadLine]:
    for number, data in enumerate(lines, start=1):
        # Drop the terminator (a file's lines keep theirs) so errors point into the line itself.
        data = data.removesuffix(b"\n").removesuffix(b"\r")
        try:
            raw = data.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            yield BadLine(number, f"not valid UTF-8 ({exc.reason} at byte {exc.start})")
            continue
        if not raw.strip():
            continue
        try:
            value = parse_line(raw)
        except json.JSONDecodeError as exc:
            yield BadLine(number, f"not valid JSON: {exc.msg} (column {exc.colno})")
            continue
        if objects and not isinstance(value, dict):
            yield BadLine(number, f"expected a JSON object, got {type(value).__name__}")
            continue
        yield number, value
