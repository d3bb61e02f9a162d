"""The one JSONL reader: every known way a line breaks costs that line, never the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import InputError
from core.jsonl import BadLine, read_jsonl


def _read(data: bytes, tmp_path: Path, **kwargs: object) -> list[object]:
    """Read the same bytes as an upload, a file and an open file (a spooled upload); all agree."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    from_bytes = list(read_jsonl(data, **kwargs))  # type: ignore[arg-type]
    from_file = list(read_jsonl(path, **kwargs))  # type: ignore[arg-type]
    with path.open("rb") as handle:
        from_handle = list(read_jsonl(handle, **kwargs))  # type: ignore[arg-type]
    assert from_bytes == from_file == from_handle
    return from_bytes


def test_good_lines_bom_blank_lines_and_raw_line_separators(tmp_path: Path) -> None:
    data = b"\xef\xbb\xbf" + b'{"a": 1}\n\n  \n{"b": "x\xe2\x80\xa8y\xc2\x85z"}\r\n'
    assert _read(data, tmp_path) == [(1, {"a": 1}), (4, {"b": "x\u2028y\x85z"})]


def test_each_bad_line_is_named_and_the_rest_goes_on(tmp_path: Path) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    data = b'{"a": 1}\n{"a": \n\xff\xfe\n[1, 2]\n' + deep + b'\n{"z": 2}\n'
    out = _read(data, tmp_path)
    assert out[0] == (1, {"a": 1})
    assert out[-1] == (6, {"z": 2})
    bad = [item for item in out if isinstance(item, BadLine)]
    assert [b.line for b in bad] == [2, 3, 4, 5]
    assert bad[0].message.startswith("not valid JSON")
    assert bad[1].message.startswith("not valid UTF-8")
    assert bad[2].message == "expected a JSON object, got list"
    assert "nested too deeply" in bad[3].message
    assert str(bad[2]) == "line 4: expected a JSON object, got list"


def test_any_value_when_objects_are_not_required(tmp_path: Path) -> None:
    assert _read(b"[1]\n2\n", tmp_path, objects=False) == [(1, [1]), (2, 2)]


def test_a_missing_file_is_an_input_error_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        list(read_jsonl(tmp_path / "missing.jsonl", field="calibration_set"))
    assert caught.value.field == "calibration_set"
    assert "missing.jsonl" in str(caught.value)


def test_the_bad_line_str_names_the_id() -> None:
    bad = BadLine(3, "id: duplicate", field="id", id="q1")
    assert str(bad) == "line 3 (id 'q1'): id: duplicate"
    json.dumps(BadLine(3, "x").__dict__)  # plain data, serialisable as is
