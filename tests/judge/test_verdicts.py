"""Regression tests for the public scorer's defects (protocol.md section 4) and the models."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bonusjudge_client.wire.grading import CoverageResult, DefectsResult, PointVerdict
from core.errors import JudgeOutputError
from judge.verdicts import (
    BonusPointsExtraction,
    DefectJudgement,
    coverage_model,
    parse_paper_coverage,
    parse_paper_defects,
)


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ("[Included Bonus Points]: 1,2", 3, [1, 2]),
        ("[Included Bonus Points]: 2, 1, 2", 3, [1, 2]),
        ("[Included Bonus Points]: (1) and (3)", 3, [1, 3]),
        ("[Included Bonus Points]: None", 2, []),
        ("[included bonus points]：none.", 2, []),
        ("Reasoning... [Included Bonus Points]: 1\n...final [Included Bonus Points]: 2", 2, [2]),
    ],
)
def test_paper_coverage_parses_published_format(text, n, expected):
    assert parse_paper_coverage(text, n) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Null",  # the public scorer counted len(set("Null")) == 3 covered points
        "",
        "The response covers the first point.",
        "[Included Bonus Points]: 1,2,99",  # out of range
        "[Included Bonus Points]: 0",
        "[Included Bonus Points]: all of them",
        "[Included Bonus Points]: None of the above is wrong",
    ],
)
def test_paper_coverage_rejects_everything_else(text):
    with pytest.raises(JudgeOutputError) as info:
        parse_paper_coverage(text, 2)
    assert info.value.reason == "parse_failure"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Defect]: None", []),
        ("[Defects]: none.", []),
        ("[Defect]: None. The response is consistent with the plot.", []),
        (
            "[Defect]: None of the plot supports the claim that Kitty refused twice.",
            ["None of the plot supports the claim that Kitty refused twice."],
        ),
        (
            "[Defect]: The response says Anna stayed, but she left.",
            ["The response says Anna stayed, but she left."],
        ),
    ],
)
def test_paper_defects(text, expected):
    assert parse_paper_defects(text) == expected


@pytest.mark.parametrize("text", ["Null", "", "No problems here.", "[Defect]:   "])
def test_paper_defects_unparseable_is_an_error_not_a_penalty(text):
    with pytest.raises(JudgeOutputError):
        parse_paper_defects(text)


def test_coverage_model_constrains_indices():
    model = coverage_model(3)
    ok = model.model_validate({"points": [{"index": i, "covered": i == 2} for i in (3, 1, 2)]})
    assert sorted(p.index for p in ok.points) == [1, 2, 3]
    for bad in (
        [{"index": i, "covered": True} for i in (1, 2, 4)],  # out of range
        [{"index": i, "covered": True} for i in (1, 1, 2)],  # duplicate
        [{"index": i, "covered": True} for i in (1, 2)],  # missing
        [{"index": i, "covered": True} for i in (1, 2, 3, 3)],  # too many
    ):
        with pytest.raises(ValidationError):
            model.model_validate({"points": bad})
    schema = model.model_json_schema()
    assert "'enum': [1, 2, 3]" in str(schema)  # Literal[1..n] is in the schema the judge sees


def test_coverage_result_cannot_exceed_one():
    verdicts = [PointVerdict(index=1, text="a", covered=True)]
    with pytest.raises(ValidationError):
        CoverageResult(status="scored", verdicts=verdicts, covered=3, total=1, coverage=1.0)
    with pytest.raises(ValidationError):
        CoverageResult(status="scored", verdicts=verdicts, covered=1, total=1, coverage=3.0)
    with pytest.raises(ValidationError):  # unscored carries no numbers
        CoverageResult(status="unscored", reason="parse_failure", covered=0, coverage=0.0)


def test_defects_result_penalty_consistent():
    with pytest.raises(ValidationError):
        DefectsResult(status="scored", defects=[], penalized=True)
    with pytest.raises(ValidationError):
        DefectsResult(status="unscored", reason="parse_failure", penalized=False)


def test_defect_and_extraction_models():
    assert DefectJudgement.model_validate({"defects": []}).defects == []
    with pytest.raises(ValidationError):
        DefectJudgement.model_validate({"defects": [{"description": "x", "kind": "moral"}]})
    with pytest.raises(ValidationError):
        BonusPointsExtraction.model_validate({"points": ["Same", "same "]})
    assert BonusPointsExtraction.model_validate({"points": [" a "]}).points == ["a"]
