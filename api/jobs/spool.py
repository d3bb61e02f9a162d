"""An upload's items on disk, read one at a time: never the whole upload in memory at once.

A job submission can be 20 MB (``max_body_bytes``). Read whole and parsed at once, one took
about ten times that in memory and held the event loop for seconds (a JSON body parsed by
pydantic; 100,000 bad JSONL lines read into a list of errors). Here the body is kept in a
temporary file (``spooled``: in memory up to ``SPOOL_MEMORY``, on disk beyond) and read as JSON
Lines, one item at a time, in a worker thread (``api.jobs.staging``):

* a JSONL body or a multipart ``file`` is read as it is (``SpooledLines``), its lines numbered;
* a JSON body is split first (``split_json_body``): the elements of its ``items`` array are
  written one per line to a second spool, its other members (the judge, options) are returned.
  The JSON is parsed element by element (``json.JSONDecoder.raw_decode`` over a window of the
  text), so no call holds the interpreter for more than one element.
"""

from __future__ import annotations

import codecs
import json
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any

from core.errors import InputError
from core.jsonl import BadLine, read_jsonl

__all__ = [
    "SPOOL_MEMORY",
    "YIELD_EVERY_S",
    "GilCourtesy",
    "RawItem",
    "SpooledLines",
    "split_json_body",
    "spooled",
]

SPOOL_MEMORY = 1 << 20
"""Bytes of a spool kept in memory; beyond them it is a file on disk (as Starlette's uploads)."""

_READ = 1 << 20
"""Bytes of a JSON body decoded at a time."""

RawItem = tuple[int | None, Any, str | None]
"""One submitted item before validation: ``(line or None, parsed JSON or None, error or None)``."""

YIELD_EVERY_S = 0.001
"""Longest an upload thread keeps the interpreter before it lets other threads have it."""


class GilCourtesy:
    """Called once per item by a long read: lets the other threads run every millisecond.

    CPython hands the interpreter lock from a busy thread to a waiting one only after
    ``sys.getswitchinterval()`` (5 ms), and the event loop's thread wakes many times per request:
    behind two upload threads reading bad lines it waited that long each time (another key's
    ``/v1/grade`` p95 went from 0.06 to 0.37 s under eight uploads). ``time.sleep(0)`` releases
    the lock, so a thread waiting for it takes it at once (0.10 s then).
    """

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def __call__(self) -> None:
        """Let the other threads run if this one has kept the interpreter ``YIELD_EVERY_S``."""
        if time.perf_counter() - self.last >= YIELD_EVERY_S:
            time.sleep(0)
            self.last = time.perf_counter()

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def spooled() -> IO[bytes]:
    """A new temporary file for an upload: in memory up to ``SPOOL_MEMORY``, then on disk."""
    return tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)


class SpooledLines:
    """An upload's items as JSON Lines in a file, read as raw items each time it is iterated.

    A line that cannot be read (invalid UTF-8, not JSON, nested too deeply) is that item's error,
    by line number; blank lines are skipped.

    Args:
        file: The lines (read from the start; closed by :meth:`close`).
        numbered: Whether the items are lines of the caller's file (JSONL, multipart), numbered
            as such, or the elements of a JSON body's ``items`` (no line number).
    """

    def __init__(self, file: IO[bytes], *, numbered: bool) -> None:
        self.file = file
        self.numbered = numbered

    def __iter__(self) -> Iterator[RawItem]:
        """Each item of the file, in order: ``(line, value, None)`` or ``(line, None, error)``."""
        self.file.seek(0)
        # objects=False: whether an item must be an object is each kind's rule (and message).
        for entry in read_jsonl(self.file, objects=False):
            if isinstance(entry, BadLine):
                yield entry.line, None, str(entry)
            else:
                yield (entry[0] if self.numbered else None), entry[1], None

    def close(self) -> None:
        """Close (and so delete) the file."""
        self.file.close()


class _Text:
    """A window of a JSON text decoded from a binary file, refilled as the parser needs more."""

    def __init__(self, source: IO[bytes]) -> None:
        self.source = source
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.consumed = 0  # characters dropped from the front of the window so far
        self.eof = False

    def more(self, at_least: int = _READ) -> bool:
        """Decode more of the file into the window; False at its end."""
        if self.eof:
            return False
        if self.pos > _READ:  # drop what was read: the window stays about one read long
            self.consumed += self.pos
            self.buf = self.buf[self.pos:]
            self.pos = 0
        data = self.source.read(max(at_least, _READ))
        try:
            self.buf += self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise _invalid(f"not valid UTF-8 ({exc.reason})") from None
        self.eof = not data
        return True

    def peek(self) -> str:
        """The next character after whitespace ("" at the end of the text)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos:self.pos + 1]

    def expect(self, char: str, what: str) -> None:
        """Consume ``char`` after whitespace, or refuse the body naming ``what`` was expected."""
        if self.peek() != char:
            raise self.error(f"Expecting {what}")
        self.pos += 1

    def value(self) -> tuple[Any, int, int]:
        """The next JSON value after whitespace: ``(value, start, end)`` in the window."""
        self.peek()
        start, size = self.pos, _READ
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, start)
            except json.JSONDecodeError as exc:
                # Maybe cut by the window's end: read more and parse the value again.
                if self.more(size):
                    size *= 2
                    start = self.pos
                    continue
                raise self.error(exc.msg, exc.pos) from None
            except RecursionError:
                raise self.error("nested too deeply", start) from None
            # A number at the window's end may go on past it: only a longer window tells.
            if end == len(self.buf) and self.more(size):
                size *= 2
                start = self.pos
                continue
            self.pos = end
            return value, start, end

    def key(self) -> str:
        """The next member name (a JSON string) and the colon after it."""
        if self.peek() != '"':
            raise self.error("Expecting property name enclosed in double quotes")
        name, _, _ = self.value()
        self.expect(":", "':' delimiter")
        return str(name)

    def error(self, message: str, at: int | None = None) -> InputError:
        """The 422 of a body that is not JSON, at ``at`` (default: here) in the window."""
        where = self.consumed + (self.pos if at is None else at)
        return _invalid(f"{message} (character {where})")


def _invalid(detail: str) -> InputError:
    # Worded as pydantic words a body it cannot parse (``first_error``), field ``body``.
    return InputError(f"body: invalid JSON: {detail}", field="body")


def split_json_body(
    source: IO[bytes], lines: IO[bytes], *, array: str = "items"
) -> tuple[dict[str, Any], int | None]:
    """Split a JSON object: its ``array`` member's elements to ``lines``, one JSON a line.

    The elements are copied as they were sent (their line breaks, whitespace between tokens,
    made spaces), so reading ``lines`` back parses each exactly as the body held it. A member
    ``array`` that is not an array is returned with the others, for the body's model to refuse.

    Args:
        source: The body (read from where it stands).
        lines: Where the elements go.
        array: The member to split out.

    Returns:
        The object's other members (``array`` too when it is not an array), and how many
        elements were written (None when ``array`` is not an array member).

    Raises:
        InputError: (``body``) not UTF-8, not JSON, not an object, or a member named twice
            (``array``).
    """
    text = _Text(source)
    if text.peek() != "{":
        raise InputError("body: expected a JSON object", field="body")
    text.pos += 1
    members: dict[str, Any] = {}
    count: int | None = None
    if text.peek() == "}":
        text.pos += 1
    else:
        while True:
            name = text.key()
            if name in members or (name == array and count is not None):
                raise InputError(f"{name}: given twice", field=name)
            if name == array and text.peek() == "[":
                count = _copy_elements(text, lines)
            else:
                members[name] = text.value()[0]
            if text.peek() == ",":
                text.pos += 1
                continue
            text.expect("}", "',' delimiter")
            break
    if text.peek() != "":
        raise text.error("Extra data")
    return members, count


def _copy_elements(text: _Text, lines: IO[bytes]) -> int:
    """Copy the elements of the array at ``text`` to ``lines``, one a line; how many."""
    text.pos += 1  # the "["
    count = 0
    if text.peek() == "]":
        text.pos += 1
        return count
    courtesy = GilCourtesy()
    while True:
        courtesy()
        _, start, end = text.value()
        element = text.buf[start:end]
        # A raw line break in JSON is whitespace between tokens (never inside a string).
        lines.write(element.replace("\n", " ").replace("\r", " ").encode("utf-8") + b"\n")
        count += 1
        if text.peek() == ",":
            text.pos += 1
            continue
        text.expect("]", "',' delimiter")
        return count
