"""Item validation: bad items raise ValidationError naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bonusjudge_client.wire.mcq import McqItem, default_labels
from judge.mcq.runner import format_validation_error

BASE: dict[str, Any] = {"id": "q1", "choices": ["a", "b", "c", "d"], "answer": "B", "response": ""}


def _error(**changes: Any) -> str:
    with pytest.raises(ValidationError) as info:
        McqItem.model_validate({**BASE, **changes})
    return format_validation_error(info.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"answer": "E"}, "answer: label 'E' is not among the labels A, B, C, D"),
        ({"answer": []}, "answer: the list of correct labels is empty"),
        ({"answer": ["A", "a"]}, "answer: label 'A' is listed twice"),
        ({"answer": ["A", "B"], "multi_select": False}, "multi_select is false"),
        ({"answer": "c", "labels": ["1", "2", "3", "4"]}, "answer: label 'c' is not among"),
        ({"choices": ["only one"]}, "choices: List should have at least 2 items"),
        ({"choices": ["a", "  "]}, "choices: choice 1 is blank"),
        ({"labels": ["A", "B", "C"]}, "labels: 3 labels given for 4 choices"),
        ({"labels": ["A", "B", "c", "D"]}, "labels: labels must be all upper-case"),
        ({"labels": ["A", "B", "B", "D"]}, "labels: labels must be distinct"),
        ({"labels": ["AA", "B", "C", "D"]}, "labels: label 'AA' must be one letter"),
        ({"id": "  "}, "id: id must not be blank"),
        ({"permutation": {"run": 0, "order": [0, 1, 2]}}, "permutation: order has 3 positions"),
        ({"permutation": {"run": 0, "order": [0, 1, 1, 2]}}, "order must be a permutation"),
        ({"permutation": {"run": -1, "order": [0, 1, 2, 3]}}, "permutation.run"),
    ],
)
def test_bad_items_name_the_field(changes: dict[str, Any], message: str) -> None:
    assert message in _error(**changes)


def test_missing_required_fields_are_named() -> None:
    with pytest.raises(ValidationError) as info:
        McqItem.model_validate({"choices": ["a", "b"]})
    text = format_validation_error(info.value)
    assert "id: Field required" in text and "answer: Field required" in text


def test_answer_is_normalised_to_the_labels_spelling() -> None:
    item = McqItem.model_validate({**BASE, "answer": "ｂ"})
    assert item.answer == "B" and item.answer_labels == ("B",)
    multi = McqItem.model_validate({**BASE, "answer": ["d", "A"]})
    assert multi.is_multi_select and multi.answer_labels == ("A", "D")


def test_numbers_and_nulls_from_harnesses_are_accepted() -> None:
    item = McqItem.model_validate(
        {"id": 7, "choices": ["x", "y"], "labels": [1, 2], "answer": 2, "response": None}
    )
    assert (item.id, item.labels, item.answer, item.response) == ("7", ["1", "2"], "2", "")


def test_extra_fields_of_the_benchmark_are_ignored() -> None:
    item = McqItem.model_validate({**BASE, "book_name": "Anna Karenina", "question": "Why?"})
    assert not hasattr(item, "book_name")


def test_default_labels() -> None:
    assert default_labels(3) == ["A", "B", "C"]
    assert default_labels(16, style="lower")[-1] == "p"
    assert default_labels(4, style="digit") == ["1", "2", "3", "4"]
    with pytest.raises(ValueError, match="between 1 and 26"):
        default_labels(27)


def test_schema_fields_all_have_descriptions() -> None:
    from bonusjudge_client.wire import mcq as types

    for model in (types.McqItem, types.McqResult, types.McqSummary, types.PermutationInfo):
        missing = [name for name, f in model.model_fields.items() if not f.description]
        assert missing == [], f"{model.__name__}: {missing}"
