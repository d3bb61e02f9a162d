"""Bad input: property-based tests of the request models and the faithful-mode parsers, and
malformed JSONL fed to the CLI.

Properties: any JSON either validates as a ``GradeRequest`` or raises pydantic's
``ValidationError`` (never another exception) and a valid request round-trips; the paper-format
parsers return a sorted, unique, in-range list or raise ``JudgeOutputError``, nothing else, for
any string (hostile, Unicode, empty, huge).
"""

from __future__ import annotations

import contextlib
import json
import re
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from bonusjudge_client.wire.grading import MAX_BONUS_POINTS, GradeRequest
from core.errors import InputError, JudgeOutputError
from judge.io import chartom_to_request
from judge.verdicts import _INDEX_LIST_RE, parse_paper_coverage, parse_paper_defects

SETTINGS = settings(
    max_examples=5 * settings().max_examples // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)

FIELDS = [*GradeRequest.model_fields, "answer", "respondent_model", "model_name"]

plausible_text = st.one_of(
    st.text(min_size=0, max_size=40),
    st.sampled_from(["", " ", "\u3000", "\x00", "\ufeff", "问题", "A" * 60_000]),
)
field_values = st.one_of(
    json_values,
    plausible_text,
    st.lists(plausible_text, max_size=MAX_BONUS_POINTS + 3),
    st.sampled_from(["en", "zh", "fr", 0, 1000, -1, 2**64]),
)
request_like = st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=len(FIELDS))
valid_base = {"question": "Why?", "reference": "Because.", "response": "No idea."}


@SETTINGS
@given(st.one_of(json_values, request_like, request_like.map(lambda d: {**valid_base, **d})))
def test_grade_request_validates_or_raises_validation_error(obj: Any) -> None:
    try:
        request = GradeRequest.model_validate(obj)
    except ValidationError:
        return
    # A valid request round-trips through JSON (the wire format) and through a dict.
    assert GradeRequest.model_validate_json(request.model_dump_json()) == request
    assert GradeRequest.model_validate(request.model_dump(mode="json")) == request
    # An empty response is valid (graded as covering nothing); question and reference are not.
    assert request.question.strip() and request.reference.strip()
    assert request.bonus_points is None or 1 <= len(request.bonus_points) <= MAX_BONUS_POINTS


@SETTINGS
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200), json_values.map(json.dumps)))
def test_grade_request_from_raw_json_text(raw: str | bytes) -> None:
    with contextlib.suppress(ValidationError):
        GradeRequest.model_validate_json(raw)


@SETTINGS
@given(st.one_of(json_values, request_like, request_like.map(lambda d: {**valid_base, **d})))
def test_chartom_lines_map_or_raise_input_error_naming_the_line(obj: Any) -> None:
    # The path every CLI line and job upload takes.
    try:
        request = chartom_to_request(obj, None, line=7)
    except InputError as exc:
        assert exc.line == 7
        return
    assert isinstance(request, GradeRequest)


# -- faithful-mode parsers -------------------------------------------------------------------

HOSTILE_COVERAGE = [
    "[Included Bonus Points]: 1,2,99",
    "[Included Bonus Points]: 0",
    "[Included Bonus Points]: -1",
    "[Included Bonus Points]: 1, 1, 1",
    "[Included Bonus Points]: None of the above is wrong",
    "[Included Bonus Points]: Null",
    "[Included Bonus Points]: all of them",
    "[Included Bonus Points]: 1-3",
    "[Included Bonus Points]: 1.5",
    "[Included Bonus Points]: ",
    "Null",
    "",
    "[Included Bonus Points]: 1\n[Included Bonus Points]: 99",
    "[Included Bonus Points]: 99\n[Included Bonus Points]: 2",
    "[Included Bonus Points]: ١,２",  # Arabic-Indic and fullwidth digits
    "[Included Bonus Points]: 99999999999999999999999999999999",
    "[Included Bonus Points]: " + "1" * 60 + "x",  # exponential backtracking before the fix
    "[Included Bonus Points]: " + "1 " * 20_000 + "x",
    "[Included Bonus Points]: " + ", ".join(["2"] * 50_000),
    "[INCLUDED BONUS POINTS]：1，2。",
    "[Included Bonus Points]: 1 and 2",
    "[Included Bonus Points]: (1) (2)",
    "\x00[Included Bonus Points]: 1\x00",
]
HOSTILE_DEFECTS = [
    "[Defect]: None of the above is wrong",
    "[Defect]: None of the plot supports this.",
    "[Defect]: None",
    "[Defect]: None.\nThe response is reasonable.",
    "[Defects]: null",
    "[Defect]:",
    "[Defect]:    \n  ",
    "Null",
    "",
    "[Defect]: 无",
    "[Defect]: 没有缺陷。",
    "[Defect]: Nonexistent motive invented.",
    "[Defect]: None\n[Defect]: Pip is not the target.",
    "[Defect]: " + "x" * 200_000,
]

coverage_texts = st.one_of(
    st.text(max_size=300),
    st.sampled_from(HOSTILE_COVERAGE),
    st.builds(
        lambda body, pre, post: f"{pre}[Included Bonus Points]: {body}{post}",
        st.text(alphabet=string.digits + " ,，、;；.。()and-x\n", max_size=60),
        st.text(max_size=30),
        st.text(max_size=30),
    ),
)


def _check_coverage(text: str, n: int) -> None:
    try:
        found = parse_paper_coverage(text, n)
    except JudgeOutputError as exc:
        assert exc.reason == "parse_failure"
        return
    assert isinstance(found, list)
    assert found == sorted(set(found))
    assert all(isinstance(i, int) and 1 <= i <= n for i in found)


@SETTINGS
@given(coverage_texts, st.integers(min_value=1, max_value=40))
@example("[Included Bonus Points]: 1,2,99", 3)
def test_paper_coverage_is_in_range_sorted_unique_or_an_error(text: str, n: int) -> None:
    _check_coverage(text, n)


@pytest.mark.parametrize("text", HOSTILE_COVERAGE)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_paper_coverage_hostile_replies(text: str, n: int) -> None:
    _check_coverage(text, n)


def test_paper_coverage_never_counts_out_of_range_or_prose() -> None:
    with pytest.raises(JudgeOutputError):
        parse_paper_coverage("[Included Bonus Points]: 1,2,99", 3)
    with pytest.raises(JudgeOutputError):
        parse_paper_coverage("[Included Bonus Points]: None of the above is wrong", 3)
    with pytest.raises(JudgeOutputError):
        parse_paper_coverage("Null", 3)  # the public scorer counted this as 3 covered points
    assert parse_paper_coverage("[Included Bonus Points]: 2, 2 and 1.", 3) == [1, 2]


@SETTINGS
@given(
    st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=12),
    st.lists(st.sampled_from([",", ", ", " ", "，", "、", "; ", " and ", ",and "]), min_size=11),
    st.booleans(),
)
def test_paper_coverage_round_trips_every_published_format(
    indices: list[int], separators: list[str], parens: bool
) -> None:
    parts = [f"({i})" if parens else str(i) for i in indices]
    body = parts[0] + "".join(sep + p for sep, p in zip(separators, parts[1:], strict=False))
    assert parse_paper_coverage(f"[Included Bonus Points]: {body}", 12) == sorted(set(indices))


# The published pattern before the ReDoS fix, kept as the oracle of the language it accepts.
_ORIGINAL_INDEX_LIST = re.compile(
    r"^\s*\(?\d+\)?(\s*[,，、;；]?\s*(and\s+)?\(?\d+\)?)*\s*[.。]?\s*$"
)


@settings(max_examples=6 * settings().max_examples, deadline=None)
@given(st.text(alphabet="12 ,，、;；.。()andx\t", max_size=12))
def test_index_list_pattern_accepts_the_same_language_as_before_the_fix(body: str) -> None:
    # Short inputs only: the original pattern is exponential on long digit runs.
    assert bool(_INDEX_LIST_RE.match(body)) == bool(_ORIGINAL_INDEX_LIST.match(body))


defect_texts = st.one_of(
    st.text(max_size=300),
    st.sampled_from(HOSTILE_DEFECTS),
    st.builds(
        lambda body, pre: f"{pre}[Defect]: {body}",
        st.one_of(st.text(max_size=60), st.sampled_from(["None", "none.", "None of it", "无"])),
        st.text(max_size=20),
    ),
)


@SETTINGS
@given(defect_texts)
@example("[Defect]: None of the above is wrong")
def test_paper_defects_is_none_one_defect_or_an_error(text: str) -> None:
    try:
        found = parse_paper_defects(text)
    except JudgeOutputError as exc:
        assert exc.reason == "parse_failure"
        return
    assert found == [] or (len(found) == 1 and found[0] == found[0].strip() and found[0])
    if found:
        # "None of ..." is a defect, never "no defect".
        assert not re.fullmatch(r"(?i)(none|null|无|没有)[.。!！]?", found[0])


@pytest.mark.parametrize("text", HOSTILE_DEFECTS)
def test_paper_defects_hostile_replies(text: str) -> None:
    try:
        found = parse_paper_defects(text)
    except JudgeOutputError:
        return
    assert found == [] or len(found) == 1


def test_paper_defects_none_of_is_a_defect() -> None:
    assert parse_paper_defects("[Defect]: None of the above is wrong") == [
        "None of the above is wrong"
    ]
    assert parse_paper_defects("[Defect]: None.\nThe response is fine.") == []
    with pytest.raises(JudgeOutputError):
        parse_paper_defects("Null")  # the public scorer counted this as a penalty


# -- malformed JSONL into the CLI --------------------------------------------------------------


def test_cli_reports_bad_lines_with_numbers_and_grades_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main
    from standins.openai_server import OpenAIStandIn

    good = {"question": "Why?", "answer": "Out of pride.", "response": "Pride.",
            "bonus_points": ["pride"]}  # fmt: skip
    lines: list[bytes] = [
        b"\xef\xbb\xbf" + json.dumps({**good, "id": "g1"}).encode(),  # 1: BOM, fine
        b'{"id": "bad-json", "question": ',  # 2: not JSON
        b"[1, 2, 3]",  # 3: not an object
        json.dumps({**good, "id": "no-q", "question": None}).encode(),  # 4
        b"",  # 5: blank, skipped
        json.dumps({**good, "id": "g2"}).encode(),  # 6
        json.dumps({**good, "id": "g1"}).encode(),  # 7: duplicate id
        json.dumps({**good, "id": "pts", "bonus_points": ["x"] * 40}).encode(),  # 8
        '{"id": "utf", "question": "caf\xe9"}'.encode("latin-1"),  # 9: not UTF-8
        json.dumps({**good, "id": "blank", "response": "   "}).encode(),  # 10: graded as empty
        json.dumps({**good, "id": "g3", "response": "Pride\u2028and prejudice."}).encode(),
    ]
    source, out, summary = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "s.json"
    source.write_bytes(b"\n".join(lines) + b"\n")
    with OpenAIStandIn() as srv:
        argv = [
            "grade", str(source), "--out", str(out), "--summary", str(summary),
            "--model", "openai/standin", "--api-base", srv.base_url,
            "--metrics", "coverage", "--no-cache", "--quiet",
        ]  # fmt: skip
        code = main(argv)
    assert code == 0
    err = capsys.readouterr().err
    expected = {
        2: None, 3: None, 4: "question", 7: "id", 8: "bonus_points", 9: None,
    }  # fmt: skip
    data = json.loads(summary.read_text())
    reported = {p["line"]: p["field"] for p in data["invalid_lines"]}
    assert reported == expected
    for line in expected:
        assert f"line {line}" in err
    graded = [json.loads(x)["id"] for x in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(graded) == ["blank", "g1", "g2", "g3"]
    assert data["items"] == 4
