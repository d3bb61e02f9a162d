"""Reading grading inputs and writing results safely.

* ``read_items``: JSONL in (through ``core.jsonl``, the one reader), one ``(item_id,
  GradeRequest)`` per good line; a bad line becomes a ``core.jsonl.BadLine`` with its line number
  and the field at fault, and the rest still load.
* ``chartom_to_request``: a CharToM-QA item (``answer``, ``bonus_points``, ``context_0`` /
  ``context_1000`` / ``context_2000``, ``tom_dimension``...) plus ``response``, as a request.
* ``ResultWriter``: appends one JSON line per result and flushes it, so a killed run keeps every
  finished line; on open it drops a torn last line (a crash mid-write) and reports which ids are
  already done, so a re-run grades only the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ValidationError

from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.chartom import CHARTOM_CONTEXT_KEYS, REQUEST_KEYS, chosen_window
from bonusjudge_client.wire.grading import GradeRequest
from core.errors import ConfigError, InputError
from core.jsonl import BadLine, read_jsonl

_RESPONDENT_KEYS = tuple(key for key, name in REQUEST_KEYS.items() if name == "respondent")
"""The keys naming the model that wrote a line's answer."""

_REQUEST_FIELDS = set(REQUEST_KEYS)


def chartom_to_request(
    obj: dict[str, Any], context_window: int | None = None, *, line: int | None = None
) -> GradeRequest:
    """Map a CharToM-QA item (or a plain request object) to a ``GradeRequest``.

    Args:
        obj: The item. CharToM keys are mapped (``answer`` -> reference, ``context_N`` -> the
            plot window chosen by ``context_window``); request fields pass through; any other key
            (``misleading_choices``, ``human_score``...) is kept in ``metadata``.
        context_window: Which CharToM plot window the defect judge sees (0, 1000, 2000); None
            keeps an explicit ``context`` field or, failing that, the largest window present.
        line: Line number, for error messages.

    Raises:
        InputError: naming the field at fault.
    """
    if not isinstance(obj, dict):
        raise InputError("each line must be a JSON object", line=line)
    data: dict[str, Any] = {}
    given = obj.get("metadata")
    if given is not None and not isinstance(given, dict):
        raise InputError("metadata: must be a JSON object", field="metadata", line=line)
    metadata = dict(given or {})
    for key, value in obj.items():
        if key in _REQUEST_FIELDS:
            data[key] = value
        elif key not in CHARTOM_CONTEXT_KEYS.values() and key != "metadata":
            metadata[key] = value
    if "context" not in data:
        try:
            chosen = chosen_window(obj, context_window)
        except ValueError as exc:
            raise InputError(str(exc), field="context_window", line=line) from exc
        if chosen is not None:
            data["context"] = obj[CHARTOM_CONTEXT_KEYS[chosen]] or None
            data.setdefault("context_window", chosen)
    if data.get("id") is not None and not isinstance(data["id"], str):
        data["id"] = str(data["id"])
    data["metadata"] = metadata
    try:
        return GradeRequest.model_validate(data)
    except ValidationError as exc:
        field, message = first_error(exc)
        if field == "reference" and "reference" not in obj:
            # A missing reference is named after the first alias; a line without `reference`
            # is in CharToM's format (or none), whose key is `answer`: name the key it lacks.
            field, message = "answer", "answer" + message.removeprefix("reference")
        raise InputError(message, field=field, line=line) from exc


def respondent_of(obj: Any) -> str | None:
    """The respondent an input line names (under any of its keys), or None.

    Read from the raw line, so that a line too broken to grade can still be counted against the
    model that wrote it.
    """
    if not isinstance(obj, dict):
        return None
    for key in _RESPONDENT_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def read_items(
    path: str | Path, *, context_window: int | None = None
) -> Iterator[tuple[str, GradeRequest] | BadLine]:
    """Stream a JSONL input file: ``(item_id, request)`` per good line, ``BadLine`` per bad one.

    The item id is the line's ``id`` or, when absent, its 1-based line number as a string.
    Blank lines are skipped. Duplicate ids are problems (the second one is not graded), since an
    id must name one item for resuming and for joins.

    Raises:
        InputError: (``input``) the file cannot be opened; bad lines never raise.
    """
    seen: set[str] = set()
    for entry in read_jsonl(path, field="input"):
        if isinstance(entry, BadLine):
            yield entry
            continue
        number, obj = entry
        try:
            request = chartom_to_request(obj, context_window, line=number)
        except InputError as exc:
            yield BadLine(number, str(exc), field=exc.field, respondent=respondent_of(obj))
            continue
        item_id = request.id or str(number)
        if item_id in seen:
            yield BadLine(
                number, f"duplicate id {item_id!r}", field="id", respondent=request.respondent
            )
            continue
        seen.add(item_id)
        yield item_id, request


class ResultWriter:
    """Appends result lines (one JSON object each), flushed per line, resumable.

    Args:
        path: The output JSONL file.
        id_field: The key holding each line's item id.
        keep: Also keep every result written in ``done`` (the default). A long run streaming to
            the file passes False: ``done`` then holds only what :meth:`open` read back (and
            :meth:`rewrite` kept), so memory does not grow with the number of items written
            (16,560 results held as dicts were ~0.4 GiB of a run's peak).

    Attributes:
        done: Item id -> result object: the lines read at open (and kept by a rewrite), plus the
            lines written since when ``keep`` is True.
    """

    def __init__(self, path: str | Path, *, id_field: str = "id", keep: bool = True) -> None:
        self.path = Path(path)
        self.id_field = id_field
        self.keep = keep
        self.done: dict[str, dict[str, Any]] = {}
        self.recovered_tail = False
        self.corrupt_lines: list[int] = []
        self._handle: IO[str] | None = None

    def open(self) -> ResultWriter:
        """Read what is already there (dropping a torn tail) and open for appending."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self._recover()
        # Kept open across writes on purpose (closed by close()/__exit__).
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        return self

    def _recover(self) -> None:
        data = self.path.read_bytes()
        # Only the last line can be torn (the process died while writing it): drop it. A bad line
        # in the middle is left in place and skipped, so the good lines after it are kept and
        # never graded again.
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        if tail:
            self.recovered_tail = True
            with open(self.path, "r+b") as handle:
                handle.truncate(len(data) - len(tail))
        # Any JSON value is a readable line here; only objects with an id are results.
        for entry in read_jsonl(b"\n".join(lines), objects=False):
            if isinstance(entry, BadLine):
                self.corrupt_lines.append(entry.line)
                continue
            _, obj = entry
            if isinstance(obj, dict) and obj.get(self.id_field) is not None:
                self.done[str(obj[self.id_field])] = obj

    def write(self, result: BaseModel | dict[str, Any]) -> None:
        """Append one result line and flush it to the OS (survives a SIGKILL of this process)."""
        if self._handle is None:
            raise RuntimeError("ResultWriter.open() first")
        obj = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        try:
            self._handle.write(json.dumps(obj, ensure_ascii=False) + "\n")
            self._handle.flush()
        except OSError as exc:
            # A full disk says "No space left on device" with no file name: name the file.
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
        if self.keep:
            self.done[str(obj.get(self.id_field))] = obj

    def close(self) -> None:
        """Flush and close (fsync, so the file survives a machine crash too)."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            handle.flush()
            os.fsync(handle.fileno())
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
        finally:
            with contextlib.suppress(OSError):  # the flush above already failed and said why
                handle.close()

    def rewrite(self, keep: list[dict[str, Any]]) -> None:
        """Atomically replace the file with ``keep`` (used to drop unscored lines for a retry)."""
        self.close()
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            for obj in keep:
                handle.write(json.dumps(obj, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        self.done = {str(o.get(self.id_field)): o for o in keep}
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def rewrite_sorted(self, position: Callable[[str], int]) -> None:
        """Atomically rewrite the file with its lines ordered by ``position(item id)``.

        The lines are read back from the file and moved as they are (never parsed into results
        and dumped again), so this works whatever ``keep`` is and holds only the file's text.
        Lines with equal positions keep their order.
        """
        self.close()
        lines: list[tuple[int, str]] = []
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None  # an unreadable line goes last, as it was kept on open
                item = obj.get(self.id_field) if isinstance(obj, dict) else None
                where = position(str(item)) if item is not None else sys.maxsize
                lines.append((where, line if line.endswith("\n") else line + "\n"))
        lines.sort(key=lambda pair: pair[0])
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.writelines(line for _, line in lines)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def __enter__(self) -> ResultWriter:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_input_file(path: Path, field: str) -> None:
    """Refuse an input that is missing or not a file, naming it.

    Raises:
        ConfigError: (``field``) the path does not name a readable file.
    """
    if not path.exists():
        raise ConfigError(f"{field}: no such file: {path}", field=field)
    if not path.is_file():
        raise ConfigError(f"{field}: not a file: {path}", field=field)
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{field}: not readable: {path}", field=field)


def check_output_path(path: Path, field: str, *, folder: bool = False) -> None:
    """Refuse an output path that cannot be written, before anything is created.

    Missing folders on the way are fine (they are created when the output is written); what
    must be writable is the nearest folder that exists.

    Args:
        path: The output file, or with ``folder`` the output folder.
        field: The option or setting naming it, for the message.
        folder: ``path`` is a folder to write files into (``calibrate --out``), not a file.

    Raises:
        ConfigError: (``field``) a file path is a folder or a folder path is a file, or the
            nearest existing folder is not writable (or is a file).
    """
    if folder:
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{field}: is a file, not a folder: {path}", field=field)
        if path.is_dir():
            if not os.access(path, os.W_OK | os.X_OK):
                raise ConfigError(f"{field}: cannot write in {path}", field=field)
            return
    elif path.is_dir():
        raise ConfigError(f"{field}: is a folder, not a file: {path}", field=field)
    if path.exists() and not path.is_file():
        raise ConfigError(f"{field}: not a regular file: {path}", field=field)
    if path.is_file() and not os.access(path, os.W_OK):
        raise ConfigError(f"{field}: cannot write {path}", field=field)
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{field}: {parent} is not a folder: {path}", field=field)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{field}: cannot write in {parent}: {path}", field=field)
