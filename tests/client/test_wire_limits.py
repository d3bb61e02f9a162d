"""Limits of the wire contract that keep absurd input out of results, stores and error answers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.grading import MAX_CONTEXT_WINDOW, GradeRequest
from bonusjudge_client.wire.mcq import McqItem
from bonusjudge_client.wire.options import JudgeOverrides, shown_number

HUGE = "9" * 4000
ITEM = '{"question": "q?", "reference": "r.", "bonus_points": ["p"], "response": "x"'


def test_a_huge_context_window_is_refused_in_a_short_message() -> None:
    with pytest.raises(ValidationError) as caught:
        JudgeOverrides.model_validate_json('{"context_window": ' + HUGE + "}")
    field, message = first_error(caught.value)
    assert field == "context_window" and "4000 digits" in message and len(message) < 120

    with pytest.raises(ValidationError) as caught:
        GradeRequest.model_validate_json(ITEM + ', "context_window": ' + HUGE + "}")
    field, message = first_error(caught.value)
    assert field == "context_window" and len(message) < 120
    ok = GradeRequest.model_validate_json(ITEM + f', "context_window": {MAX_CONTEXT_WINDOW}}}')
    assert ok.context_window == MAX_CONTEXT_WINDOW


def test_shown_number_keeps_short_numbers_whole() -> None:
    assert shown_number(2001) == "2001"
    assert shown_number(-(10**30)) == "-1000000...0000, a number of 31 digits"


@pytest.mark.parametrize("model", ["grade", "mcq"])
def test_an_id_with_nul_is_refused_naming_the_field(model: str) -> None:
    with pytest.raises(ValidationError) as caught:
        if model == "grade":
            GradeRequest(question="q?", reference="r.", bonus_points=["p"], response="x",
                         id="a\x00b")
        else:
            McqItem(id="a\x00b", choices=["yes", "no"], answer="A", response="[[A]]")
    assert first_error(caught.value) == (
        "id", "id: Value error, must not contain a NUL character (\\u0000)")
