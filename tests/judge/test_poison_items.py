"""Poison items: absurdly nested, huge or non-finite input is that item's problem, found when the
item is read (before any judge call), never a crash of the run or of a resume."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bonusjudge_client.wire.grading import (
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_METADATA_ENTRIES,
    GradeRequest,
    check_json_value,
)
from bonusjudge_client.wire.mcq import McqItem
from core.jsonl import BadLine, parse_line
from judge.io import read_items
from judge.mcq.runner import read_items as read_mcq_items
from tests.helpers.processes import run_cli

ROOT = Path(__file__).resolve().parents[2]
MCQ_EXAMPLES = ROOT / "judge" / "data" / "mcq_example_tombench.jsonl"

DEEP_LINE = "[" * 5000 + "]" * 5000
"""A line nested far past the JSON parser's recursion limit."""


def nested(levels: int) -> dict[str, Any]:
    """An object ``levels`` levels deep (itself included)."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def item(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"it-{n}",
        "question": "How does Levin feel?",
        "reference": "He feels humiliated and hurt.",
        "bonus_points": ["Levin feels humiliated", "Levin feels hurt"],
        "response": f"Levin is humiliated (answer-{n}).",
        **extra,
    }


def metadata_error(exc: pytest.ExceptionInfo[ValidationError]) -> str:
    errors = exc.value.errors()
    assert [e["loc"] for e in errors] == [("metadata",)], errors
    return str(errors[0]["msg"])


# -- the shared bounds -----------------------------------------------------------------------


def test_depth_limit_is_exact() -> None:
    check_json_value(nested(MAX_METADATA_DEPTH))
    with pytest.raises(ValueError, match=f"more than {MAX_METADATA_DEPTH} levels"):
        check_json_value(nested(MAX_METADATA_DEPTH + 1))
    # Lists count as levels too.
    with pytest.raises(ValueError, match="levels"):
        check_json_value({"a": json.loads("[" * MAX_METADATA_DEPTH + "]" * MAX_METADATA_DEPTH)})


def test_value_too_deep_for_recursion_is_reported_not_crashed_on() -> None:
    with pytest.raises(ValueError, match="levels"):
        check_json_value(nested(100_000))


def test_entry_and_size_limits() -> None:
    check_json_value({"xs": list(range(MAX_METADATA_ENTRIES - 1))})
    with pytest.raises(ValueError, match="keys and items"):
        check_json_value({"xs": list(range(MAX_METADATA_ENTRIES))})
    with pytest.raises(ValueError, match="keys and items"):
        check_json_value({f"k{i}": {"v": i} for i in range(MAX_METADATA_ENTRIES // 2 + 1)})
    check_json_value({"note": "x" * (MAX_METADATA_BYTES - 20)})
    with pytest.raises(ValueError, match="bytes"):
        check_json_value({"note": "x" * MAX_METADATA_BYTES})
    # UTF-8 bytes, not characters.
    with pytest.raises(ValueError, match="bytes"):
        check_json_value({"note": "情" * (MAX_METADATA_BYTES // 2)})


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_rejected(number: float) -> None:
    with pytest.raises(ValueError, match="NaN and Infinity"):
        check_json_value({"scores": [1.0, {"human": number}]})


# -- GradeRequest ----------------------------------------------------------------------------


def test_grade_request_rejects_deep_metadata_naming_the_field() -> None:
    GradeRequest.model_validate(item(1, metadata=nested(MAX_METADATA_DEPTH)))
    for levels in (256, 5000):
        with pytest.raises(ValidationError) as exc:
            GradeRequest.model_validate(item(1, metadata=nested(levels)))
        assert "levels deep" in metadata_error(exc)


def test_grade_request_rejects_large_and_non_finite_metadata() -> None:
    with pytest.raises(ValidationError) as exc:
        GradeRequest.model_validate(item(1, metadata={"blob": "x" * 100_000}))
    assert "bytes" in metadata_error(exc)
    with pytest.raises(ValidationError) as exc:
        GradeRequest.model_validate(item(1, metadata={"human_score": math.nan}))
    assert "NaN" in metadata_error(exc)
    with pytest.raises(ValidationError) as exc:
        GradeRequest.model_validate_json(json.dumps(item(1, metadata={"x": math.inf})))
    assert "NaN" in metadata_error(exc)


def test_accepted_metadata_round_trips() -> None:
    metadata = {"human_score": 2.5, "tags": ["a", "b"], "deep": nested(MAX_METADATA_DEPTH - 1)}
    request = GradeRequest.model_validate(item(1, metadata=metadata))
    assert request.metadata == metadata
    assert request.content_hash()


# -- the JSONL readers -----------------------------------------------------------------------


def test_parse_line_reports_deep_nesting_as_a_json_error() -> None:
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        parse_line(DEEP_LINE)
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        parse_line('{"metadata": {"x": ' + DEEP_LINE + "}}")
    assert parse_line('{"a": [1, 2]}') == {"a": [1, 2]}


def test_read_items_reports_each_poisoned_line_and_loads_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    lines = [
        json.dumps(item(1)),
        DEEP_LINE,
        json.dumps(item(3, metadata=nested(256))),
        json.dumps(item(4, metadata={"score": math.nan})),  # json.dumps writes NaN
        json.dumps(item(5, human_score=math.inf)),  # CharToM extras are kept in metadata
        json.dumps(item(6, metadata={"ok": [1, 2, 3]})),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    entries = list(read_items(path))
    problems = {e.line: e for e in entries if isinstance(e, BadLine)}
    good = [e for e in entries if not isinstance(e, BadLine)]
    assert [item_id for item_id, _ in good] == ["it-1", "it-6"]
    assert set(problems) == {2, 3, 4, 5}
    assert problems[2].field is None and "nested too deeply" in problems[2].message
    assert problems[3].field == "metadata" and "levels deep" in problems[3].message
    assert problems[4].field == "metadata" and "NaN" in problems[4].message
    assert problems[5].field == "metadata" and "NaN" in problems[5].message


def test_mcq_reader_reports_a_deep_line_as_bad(tmp_path: Path) -> None:
    good = [line for line in MCQ_EXAMPLES.read_text(encoding="utf-8").splitlines() if line][:2]
    path = tmp_path / "mcq.jsonl"
    path.write_text(
        "\n".join([good[0], '{"id": "deep", "x": ' + DEEP_LINE + "}", good[1]]) + "\n",
        encoding="utf-8",
    )
    entries = dict(read_mcq_items(path))
    assert isinstance(entries[1], McqItem) and isinstance(entries[3], McqItem)
    bad = entries[2]
    assert isinstance(bad, BadLine) and bad.line == 2 and "nested too deeply" in bad.message


# -- the CLI, as users run it ----------------------------------------------------------------


@pytest.mark.process
def test_cli_grade_skips_poisoned_lines_and_grades_the_rest(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    lines = [
        json.dumps(item(1)),
        DEEP_LINE,
        json.dumps(item(3, metadata=nested(256))),
        json.dumps(item(4)),
    ]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    args = ["grade", str(source), "--out", str(out), "--metrics", "rouge_l", "--summary",
            str(summary), "--quiet"]
    for _ in range(2):  # and again, as a resume: nothing left to crash on
        done = run_cli(args, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        assert "line 2: not valid JSON: nested too deeply" in done.stderr
        assert "line 3 (field metadata)" in done.stderr
        results = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert sorted(r["id"] for r in results) == ["it-1", "it-4"]
        invalid = json.loads(summary.read_text(encoding="utf-8"))["invalid_lines"]
        assert [(p["line"], p["field"]) for p in invalid] == [(2, None), (3, "metadata")]


@pytest.mark.process
def test_cli_mcq_skips_a_deep_line(tmp_path: Path) -> None:
    good = [line for line in MCQ_EXAMPLES.read_text(encoding="utf-8").splitlines() if line][:2]
    source = tmp_path / "mcq.jsonl"
    source.write_text("\n".join([good[0], DEEP_LINE, good[1]]) + "\n", encoding="utf-8")
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    done = run_cli(["mcq", str(source), "--out", str(out), "--summary", str(summary), "--quiet"],
                   timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    bad = json.loads(summary.read_text(encoding="utf-8"))["bad_lines"]
    assert [b["line"] for b in bad] == [2] and "nested too deeply" in bad[0]["error"]
