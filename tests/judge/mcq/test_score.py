"""Metric values checked by hand on small fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from bonusjudge_client.wire.mcq import McqItem, McqResult
from judge.mcq.score import compute_metrics, multi_label_f1, score_item, summarize

CHOICES = ["alpha", "bravo", "charlie", "delta"]
NONSENSE = "no idea at all"


def _result(response: str, answer: str | list[str] = "A", **fields: Any) -> McqResult:
    return score_item(
        McqItem(
            id=fields.pop("id", "q"), choices=CHOICES, answer=answer, response=response, **fields
        )
    )


def _runs(item_id: str, responses: list[str], answer: str = "A", **fields: Any) -> list[McqResult]:
    """Runs of one question; the identity order keeps displayed == canonical labels."""
    return [
        _result(r, answer, id=item_id, permutation={"run": k, "order": [0, 1, 2, 3]}, **fields)
        for k, r in enumerate(responses)
    ]


def test_accuracy_counts_unparseable_as_not_correct_and_reports_it_apart() -> None:
    results = [
        _result("[[A]]", id="1"),
        _result("Answer: B", id="2"),
        _result(NONSENSE, id="3"),
        _result("[[A]]", id="4"),
    ]
    assert [r.outcome for r in results] == ["correct", "wrong", "unparseable", "correct"]
    assert results[2].correct is None
    metrics = compute_metrics(results)
    assert metrics.items == metrics.questions == 4
    assert metrics.correct == 2
    assert metrics.accuracy == pytest.approx(0.5)
    assert metrics.accuracy_parsed == pytest.approx(2 / 3)
    assert (metrics.unparseable, metrics.unparseable_rate) == (1, 0.25)
    assert metrics.methods == {"strict": 2, "lenient": 1, "fuzzy": 0, "llm": 0, "unparseable": 1}


def test_empty_results_have_no_accuracy() -> None:
    metrics = compute_metrics([])
    assert (metrics.accuracy, metrics.accuracy_parsed, metrics.unparseable_rate) == (None,) * 3


def test_mean_aggregation_averages_runs_per_question() -> None:
    # q1: 4 of 5 right; q2: 1 of 5 right (one unparseable)
    results = _runs("q1", ["[[A]]"] * 4 + ["[[B]]"]) + _runs(
        "q2", ["[[A]]", "[[B]]", "[[B]]", NONSENSE, "[[C]]"]
    )
    metrics = compute_metrics(results, aggregate="mean")
    assert (metrics.items, metrics.questions) == (10, 2)
    assert metrics.accuracy == pytest.approx((0.8 + 0.2) / 2)
    assert metrics.accuracy_parsed == pytest.approx(5 / 9)
    perm = metrics.permutation
    assert perm is not None
    assert (perm.questions, perm.min_runs, perm.max_runs, perm.consistency_questions) == (
        2,
        5,
        5,
        2,
    )
    assert perm.position_consistency == 0.0


def test_majority_aggregation_votes_ties_and_no_votes() -> None:
    results = (
        _runs("win", ["[[A]]", "[[A]]", "[[B]]", NONSENSE, "[[A]]"])  # A x3 -> right
        + _runs("lose", ["[[B]]", "[[B]]", "[[A]]", "[[C]]", "[[B]]"])  # B x3 -> wrong
        + _runs("tie", ["[[A]]", "[[A]]", "[[B]]", "[[B]]", NONSENSE])  # 2-2 -> not correct
        + _runs("mute", [NONSENSE] * 3)  # nothing parsed
        + _runs("same", ["[[A]]"] * 5)  # consistent
    )
    metrics = compute_metrics(results, aggregate="majority")
    assert metrics.questions == 5
    assert metrics.correct == 2  # win, same
    assert metrics.accuracy == pytest.approx(0.4)
    perm = metrics.permutation
    assert perm is not None
    assert (perm.ties, perm.no_votes, perm.aggregate) == (1, 1, "majority")
    assert (perm.min_runs, perm.max_runs) == (3, 5)
    assert perm.position_consistency == pytest.approx(1 / 5)


def test_unparseable_runs_do_not_vote_but_a_single_parsed_run_can_win() -> None:
    results = _runs("q", [NONSENSE, NONSENSE, "[[A]]"])
    assert compute_metrics(results, aggregate="majority").accuracy == 1.0
    assert compute_metrics(results, aggregate="mean").accuracy == pytest.approx(1 / 3)


def test_coherent_story_accuracy() -> None:
    results = [
        _result("[[A]]", id="1", story_id="s1"),
        _result("[[A]]", id="2", story_id="s1"),
        _result("[[A]]", id="3", story_id="s2"),
        _result(NONSENSE, id="4", story_id="s2"),  # unparseable breaks the story
        _result("[[B]]", id="5", story_id="s3"),
        _result("[[A]]", id="6"),  # no story: not counted
    ]
    coherent = compute_metrics(results).coherent
    assert coherent is not None
    assert (coherent.stories, coherent.coherent) == (3, 1)
    assert coherent.accuracy == pytest.approx(1 / 3)


def test_story_in_two_languages_is_two_stories() -> None:
    results = [
        _result("[[A]]", id="1", story_id="s", language="en"),
        _result("[[B]]", id="1", story_id="s", language="zh"),
    ]
    coherent = compute_metrics(results).coherent
    assert coherent is not None and (coherent.stories, coherent.coherent) == (2, 1)


def test_slot_exact_match() -> None:
    results = [
        _result("[[A]]", id="n1-food", slot_group="n1"),
        _result("[[A]]", id="n1-water", slot_group="n1"),
        _result("[[A]]", id="n1-wood", slot_group="n1"),
        _result("[[A]]", id="n2-food", slot_group="n2"),
        _result("[[C]]", id="n2-water", slot_group="n2"),
        _result("[[A]]", id="n2-wood", slot_group="n2"),
    ]
    slots = compute_metrics(results).exact_match
    assert slots is not None
    assert (slots.groups, slots.exact, slots.exact_match) == (2, 1, 0.5)


def test_multi_label_f1_by_hand() -> None:
    # A: tp 1, fn 1 -> 2/3; B: fn 1 -> 0; C: tp 1 -> 1; D: fp 1 -> 0
    micro, macro = multi_label_f1([({"A", "B"}, {"A"}), ({"C"}, {"C", "D"}), ({"A"}, set())])
    assert micro == pytest.approx(4 / 7)  # tp 2, fp 1, fn 2
    assert macro == pytest.approx((2 / 3 + 0 + 1 + 0) / 4)
    assert multi_label_f1([]) == (1.0, 1.0)


def test_multi_select_metrics_from_results() -> None:
    results = [
        _result("[[A, B]]", ["A", "B"], id="1"),  # exact
        _result("[[A]]", ["A", "B"], id="2"),  # partial
        _result(NONSENSE, ["C"], id="3"),  # unparseable: chose nothing
    ]
    assert [r.f1 for r in results] == [1.0, pytest.approx(2 / 3), None]
    ms = compute_metrics(results).multi_select
    assert ms is not None
    assert (ms.items, ms.unparseable) == (3, 1)
    assert ms.exact_set == pytest.approx(1 / 3)
    # pooled: A tp2; B tp1 fn1; C fn1 -> tp 3, fn 2
    assert ms.micro_f1 == pytest.approx(6 / 8)
    assert ms.macro_f1 == pytest.approx((1 + 2 / 3 + 0) / 3)


def test_breakdowns_macro_and_tombench_ability_view() -> None:
    rows = [
        # (task, ability, dimension, right?)
        ("T1", "ab1", "Belief", True),
        ("T1", "ab1", "Belief", True),
        ("T1", "ab2", "Belief", False),
        ("T2", "ab3", "Emotion", True),
        ("T2", "ab3", "Emotion", False),
        ("T2", "ab3", "Emotion", False),
        ("T2", "ab3", "Emotion", False),
    ]
    results = [
        _result("[[A]]" if right else "[[B]]", id=str(i), task=t, ability=a, tom_dimension=d)
        for i, (t, a, d, right) in enumerate(rows)
    ]
    summary = summarize(results)
    assert summary.accuracy == pytest.approx(3 / 7)
    assert set(summary.breakdowns) == {"task", "ability", "tom_dimension"}  # no language given
    assert summary.breakdowns["task"]["T1"].accuracy == pytest.approx(2 / 3)
    assert summary.breakdowns["task"]["T2"].accuracy == pytest.approx(1 / 4)
    assert summary.macro["task"] == pytest.approx((2 / 3 + 1 / 4) / 2)
    # Belief: ab1 = 1.0, ab2 = 0.0 -> 0.5 (the item-weighted figure would be 2/3)
    assert summary.dimension_over_abilities == {"Belief": 0.5, "Emotion": 0.25}
    assert summary.ability_view == pytest.approx(0.375)


def test_missing_group_values_form_their_own_group_outside_the_macro() -> None:
    results = [
        _result("[[A]]", id="1", language="en"),
        _result("[[B]]", id="2"),
        _result("[[A]]", id="3", tags={"question_type": "influence"}),
    ]
    summary = summarize(results)
    assert set(summary.breakdowns["language"]) == {"en", "(none)"}
    assert summary.macro["language"] == 1.0
    assert summary.breakdowns["tags.question_type"]["influence"].accuracy == 1.0


def test_cross_lingual_consistency() -> None:
    results = []
    for item_id, verdicts in {
        "x1": {"en": "[[A]]", "zh": "[[A]]", "de": "[[A]]"},  # consistently right
        "x2": {"en": "[[B]]", "zh": NONSENSE, "de": "[[C]]"},  # consistently wrong
        "x3": {"en": "[[A]]", "zh": "[[B]]"},  # inconsistent
        "x4": {"en": "[[A]]"},  # one language only: not parallel
    }.items():
        results += [_result(r, id=item_id, language=lang) for lang, r in verdicts.items()]
    cl = summarize(results).cross_lingual
    assert cl is not None
    assert cl.languages == ["de", "en", "zh"]
    assert (cl.instances, cl.consistently_right, cl.consistently_wrong, cl.inconsistent) == (
        3,
        1,
        1,
        1,
    )
    assert cl.inconsistent_rate == pytest.approx(1 / 3)


def test_group_by_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="cannot group by 'response'"):
        summarize([_result("[[A]]")], group_by=["response"])


def test_summary_round_trips_through_json() -> None:
    results = _runs("q", ["[[A]]", "[[B]]"], story_id="s", language="en")
    summary = summarize(results, aggregate="majority")
    again = type(summary).model_validate_json(summary.model_dump_json())
    assert again == summary


def test_macro_says_how_many_lines_had_no_group() -> None:
    from cli.mcq import format_report

    results = [
        _result("[[A]]", id="1", task="T1", language="en"),
        _result("[[B]]", id="2", task="T2", language="en"),
        _result("[[A]]", id="3", language="en"),
        *_runs("4", ["[[A]]", "[[B]]"], language="en"),  # two lines of one question, no task
    ]
    summary = summarize(results)
    assert summary.macro["task"] == pytest.approx(0.5)  # over T1 and T2 only
    assert summary.ungrouped == {"task": 3, "language": 0}
    macro_rows = [line for line in format_report(summary).splitlines() if "(macro)" in line]
    assert [row.split()[-2:] for row in macro_rows] == [["ungrouped:", "3"], ["ungrouped:", "0"]]
