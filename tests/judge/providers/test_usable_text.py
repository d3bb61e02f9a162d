"""The one check both transports' text calls make of a reply (``usable_text``)."""

from __future__ import annotations

import pytest

from core.errors import JudgeOutputError
from judge.providers.base import failure_reason_of, usable_text


@pytest.mark.parametrize(
    ("refusal", "finish", "raw", "reason", "kept"),
    [
        ("I can't help with that.", "stop", None, "refusal", "I can't help with that."),
        (None, "length", "[Defect]: The mot", "truncated_output", "[Defect]: The mot"),
        (None, "stop", "  \n", "empty_output", None),
        (None, "stop", None, "empty_output", None),
    ],
)
def test_an_unusable_text_answer_says_why(
    refusal: str | None, finish: str, raw: str | None, reason: str, kept: str | None
) -> None:
    with pytest.raises(JudgeOutputError) as err:
        usable_text(refusal=refusal, finish_reason=finish, raw=raw)
    assert (err.value.reason, err.value.raw) == (reason, kept)
    # The same classification as an answer that failed validation gets.
    assert failure_reason_of(refused=bool(refusal), finish_reason=finish, raw=raw) == reason


def test_a_complete_text_answer_is_returned_as_is() -> None:
    assert usable_text(refusal=None, finish_reason="stop", raw=" [Defect]: None ") == (
        " [Defect]: None "
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{not json", "parse_failure"),
        ("{'points': [{'index': 1, 'covered': true}],}", "parse_failure"),
        ("I think point 1 is covered.", "parse_failure"),
        ('{"points": [{"index": 99}]}', "validation_failure"),
        ('```json\n{"points": []}\n```', "validation_failure"),
        ('Here it is: [{"index": 1}] as asked.', "validation_failure"),
    ],
)
def test_an_answer_that_is_not_json_failed_to_parse(raw: str, reason: str) -> None:
    # A reply with no JSON in it failed to parse; JSON that broke the schema failed validation.
    assert failure_reason_of(refused=False, finish_reason="stop", raw=raw) == reason


def test_a_text_answer_that_is_not_json_is_still_an_answer() -> None:
    assert usable_text(refusal=None, finish_reason="stop", raw="[Defect]: None") == "[Defect]: None"
