"""Null answers graded as empty ones, invalid lines per respondent, unscored coverage and defects
counted apart, and the paper's English-only prompts flagged on Chinese items."""

from __future__ import annotations

import json
import random

import pytest

from bonusjudge_client.wire.grading import (
    PROMPT_LANGUAGE_FLAG,
    CoverageResult,
    DefectsResult,
    GradeRequest,
    GradeResult,
    Provenance,
)
from core.jsonl import BadLine
from judge.aggregate import Aggregator, format_table, summarize
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.io import read_items
from judge.providers.fake import FakeProvider, covering, defects
from tests.helpers.engine import ENGINE_CONFIG as CFG
from tests.helpers.engine import no_sleep

LINE = {
    "question": "How does Levin feel after Kitty refuses him?",
    "answer": "He feels humiliated and wants to return to his estate.",
    "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
    "tom_dimension": "emotion",
}

ZH = {
    "question": "列文被吉蒂拒绝后感觉如何？",
    "reference": "他感到羞辱，想回到自己的庄园。",
    "bonus_points": ["列文感到羞辱", "他想回到庄园"],
    "response": "他觉得很丢脸，回家了。",
}


def request(response: str | None, **fields: object) -> GradeRequest:
    data = {"id": "q1", "reference": LINE["answer"], "response": response, **fields}
    data.update({k: v for k, v in LINE.items() if k != "answer" and k not in data})
    return GradeRequest.model_validate(data)


def grader(provider: FakeProvider, config: JudgeConfig = CFG) -> Grader:
    return Grader(config, provider=provider, sleep=no_sleep, rng=random.Random(0))


# -- null answers -------------------------------------------------------------------------------


async def test_a_null_response_is_graded_as_empty_without_a_judge_call() -> None:
    fake = FakeProvider(outputs=[])
    result = await grader(fake).grade(request(None))
    assert result.status == "scored" and result.flags == ["null_response"]
    assert result.coverage is not None and result.coverage.coverage == 0.0
    assert (result.coverage.covered, result.coverage.total) == (0, 2)
    assert {v.rationale for v in result.coverage.verdicts} == {"null response"}
    assert result.defects is not None and result.defects.status == "scored"
    assert result.defects.penalized is False and result.defects.detail == "null response"
    assert fake.calls == []  # nothing to ask the judge about


async def test_a_null_response_is_another_input_than_an_empty_one() -> None:
    # A resumed run must not take the grade of "" for the grade of null, nor the reverse.
    assert request(None).content_hash() != request("").content_hash()
    result = await grader(FakeProvider(outputs=[])).grade(request(""))
    assert result.flags == ["empty_response"]


@pytest.mark.parametrize("response", [None, "", "  "])
async def test_a_blank_response_leaves_defects_not_assessed_by_the_embedded_matcher(
    response: str | None,
) -> None:
    """The matcher cannot judge defects; a blank answer does not make it able to."""
    g = Grader(JudgeConfig(metrics=("coverage", "defects")))
    result = await g.grade(request(response))
    await g.aclose()
    assert result.coverage is not None and result.coverage.coverage == 0.0
    assert result.defects is not None and result.defects.status == "not_assessed"
    assert result.defects.penalized is None
    summary = summarize([result])
    assert summary.defects_scored == 0 and summary.penalty_rate is None


def test_read_items_takes_null_answers_and_refuses_other_non_strings(tmp_path) -> None:
    path = tmp_path / "in.jsonl"
    rows = [
        {**LINE, "id": "null", "response": None, "respondent": "m-b"},
        {**LINE, "id": "number", "response": 42, "model_name": "m-b"},
        {**LINE, "id": "object", "response": {"error": "timeout"}, "respondent_model": "m-c"},
        {**LINE, "id": "list", "response": ["a"]},
        {**LINE, "id": "bool", "response": False, "respondent": "m-b"},
        {**LINE, "id": "missing", "respondent": "m-b"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = list(read_items(path))
    good = [e for e in out if not isinstance(e, BadLine)]
    assert [(item_id, req.response) for item_id, req in good] == [("null", None)]
    bad = [e for e in out if isinstance(e, BadLine)]
    assert [(p.line, p.field, p.respondent) for p in bad] == [
        (2, "response", "m-b"), (3, "response", "m-c"), (4, "response", None),
        (5, "response", "m-b"), (6, "response", "m-b"),
    ]
    assert bad[0].message == "response: must be text, or null for no answer (got a number)"
    assert bad[1].message.endswith("(got an object)") and bad[3].message.endswith("a boolean)")
    assert bad[4].message == "response: Field required"


# -- the summary --------------------------------------------------------------------------------


def result(
    n: int,
    respondent: str,
    *,
    coverage: str = "scored",
    defects: str = "scored",
    flags: tuple[str, ...] = (),
) -> GradeResult:
    """A result of one bonus point, covered when coverage is scored."""
    cov = (
        CoverageResult.model_validate(
            {"status": "scored", "covered": 1, "total": 1, "coverage": 1.0,
             "verdicts": [{"index": 1, "text": "p", "covered": True}]}
        )
        if coverage == "scored"
        else CoverageResult(status="unscored", reason="parse_failure", total=1)
    )
    dfx = (
        DefectsResult(status="scored", defects=[], penalized=False)
        if defects == "scored"
        else DefectsResult(status="unscored", reason="parse_failure")
    )
    unscored = [f"{task}: parse_failure" for task, state in
                (("coverage", coverage), ("defects", defects)) if state != "scored"]
    return GradeResult(
        id=f"{respondent}-{n}", status="unscored" if unscored else "scored",
        unscored_reasons=unscored, flags=list(flags), language="en", coverage=cov,
        defects=dfx, respondent=respondent,
        provenance=Provenance(judge="fake/judge", config_hash="x", bonusjudge_version="0"),
    )


def test_unscored_defects_are_not_reported_as_unscored_coverage() -> None:
    """The paper's mode: defects unparseable, coverage scored. BPC is over every item."""
    summary = summarize([result(n, "m-a", defects="unscored") for n in range(10)])
    assert (summary.coverage_unscored, summary.defects_unscored) == (0, 10)
    assert summary.bpc == 1.0 and summary.bpc_all == 1.0
    assert not any("bpc counts" in w for w in summary.warnings)
    assert any(w.startswith("10 of 10 items' defect verdict is unscored") for w in
               summary.warnings)
    overall = next(row for row in format_table(summary).splitlines() if row.startswith("overall"))
    assert overall.split()[:7] == ["overall", "10", "0", "10", "100.0", "100.0", "-"]


def test_unscored_coverage_is_warned_about_bpc_and_rates_compared_per_task() -> None:
    results = [result(n, "m-a") for n in range(10)]
    results += [result(n, "m-b", coverage="unscored") for n in range(2)]
    results += [result(n, "m-b") for n in range(2, 10)]
    summary = summarize(results)
    assert any(w.startswith("2 of 20 items' coverage is unscored (10.0%): bpc counts "
                            "coverage-scored items only (100.0%)") for w in summary.warnings)
    assert ("coverage unscored rates differ between respondents: m-b 20.0% vs m-a 0.0%; "
            "compare them on bpc_all, not bpc.") in summary.warnings
    assert not any("defect" in w for w in summary.warnings)


def test_invalid_lines_that_differ_between_respondents_are_warned_per_respondent() -> None:
    aggregator = Aggregator().extend([result(n, r) for n in range(3) for r in ("m-a", "m-b")])
    for respondent in ("m-b", "m-b", "m-c", None):
        aggregator.add_invalid(respondent)
    summary = aggregator.summary()
    # m-c wrote nothing valid: it is counted all the same; a line naming no one is not.
    assert summary.invalid_lines_by_respondent == {"m-a": 0, "m-b": 2, "m-c": 1}
    assert summary.warnings == [
        "invalid lines differ between respondents: m-b 2, m-c 1, m-a 0. Invalid lines are not "
        "graded, so these respondents' bpc and bpc_all are over different item sets; fix the "
        "lines (see invalid_lines) and grade again."
    ]

    even = Aggregator().extend([result(n, r) for n in range(3) for r in ("m-a", "m-b")])
    even.add_invalid("m-a")
    even.add_invalid("m-b")
    assert even.summary().warnings == []  # the same number each: the same items left out


# -- the paper's English-only prompts -----------------------------------------------------------


@pytest.mark.parametrize(
    ("rubric", "fields", "flagged"),
    [
        ("chartom-paper", ZH, True),
        ("chartom-paper", {}, False),  # English: the paper's own language
        ("chartom", ZH, False),  # Chinese prompts
    ],
)
async def test_chinese_items_judged_with_the_paper_prompts_are_flagged(
    rubric: str, fields: dict[str, object], flagged: bool
) -> None:
    config = CFG.model_copy(update={"rubric": rubric})
    paper = rubric == "chartom-paper"
    fake = FakeProvider(
        outputs=["[Included Bonus Points]: 1", "[Defect]: None"] if paper
        else [covering(1, n=2), defects()]
    )
    item = request(**{"response": "He is humiliated.", **fields})  # type: ignore[arg-type]
    result = await grader(fake, config).grade(item)
    assert len(fake.calls) == 2 and result.status == "scored"
    assert (PROMPT_LANGUAGE_FLAG in result.flags) is flagged
    if flagged:
        assert result.language == "zh"
        assert {ref.language for ref in result.provenance.rubrics.values()} == {"en"}
        summary = summarize([result])
        assert summary.flags == {PROMPT_LANGUAGE_FLAG: 1}
        assert any("--rubric chartom has Chinese prompts" in w for w in summary.warnings)
