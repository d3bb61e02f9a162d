"""Permutation bookkeeping: plans, seeds, and label mapping round-trips."""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bonusjudge_client.wire.mcq import McqItem, default_labels
from judge.mcq.extract import extract_answer
from judge.mcq.permute import (
    derive_seed,
    expand_item,
    plan_permutations,
    render_options,
    rotation,
    seeded_shuffle,
    to_canonical,
    to_displayed,
)
from judge.mcq.score import score_item


def test_rotations_are_cyclic() -> None:
    assert rotation(4, 0) == [0, 1, 2, 3]
    assert rotation(4, 1) == [1, 2, 3, 0]
    assert rotation(4, 3) == [3, 0, 1, 2]


def test_cogtom_plan_is_four_rotations_and_one_seeded_shuffle() -> None:
    plan = plan_permutations(4, item_id="q1", scheme="cogtom", seed=7)
    assert [p.kind for p in plan] == ["identity", "rotation", "rotation", "rotation", "shuffle"]
    assert [p.run for p in plan] == [0, 1, 2, 3, 4]
    assert [p.order for p in plan[:4]] == [rotation(4, k) for k in range(4)]
    assert plan[4].seed == derive_seed(7, "q1", 4)
    assert plan[4].order == seeded_shuffle(4, plan[4].seed)
    # Every option appears once at every position over the four rotations.
    for position in range(4):
        assert sorted(p.order[position] for p in plan[:4]) == [0, 1, 2, 3]


def test_tombench_plan_is_five_shuffles_reproducible_and_item_specific() -> None:
    plan = plan_permutations(4, item_id="q1", scheme="tombench", seed=1)
    assert len(plan) == 5 and all(p.kind == "shuffle" and p.seed is not None for p in plan)
    assert plan == plan_permutations(4, item_id="q1", scheme="tombench", seed=1)
    other = plan_permutations(4, item_id="q2", scheme="tombench", seed=1)
    assert [p.seed for p in plan] != [p.seed for p in other]
    assert all(p.seed is not None and p.seed < 2**53 for p in plan)  # exact in JSON doubles


def test_derive_seed_is_stable_across_processes() -> None:
    # A fixed value: hash() would differ per process; SHA-256 does not.
    assert derive_seed(0, "q", 0) == derive_seed(0, "q", 0)
    assert derive_seed(0, "q", 0) != derive_seed(0, "q", 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rotations": 5}, "only 4 options"),
        ({"rotations": 0, "shuffles": 0}, "no runs"),
        ({"shuffles": -1}, "negative"),
    ],
)
def test_bad_plans_raise(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_permutations(4, item_id="q", **kwargs)  # type: ignore[arg-type]


def test_rotations_scheme_covers_every_shift() -> None:
    assert [p.order for p in plan_permutations(3, item_id="q", scheme="rotations")] == [
        [0, 1, 2],
        [1, 2, 0],
        [2, 0, 1],
    ]


def test_expand_and_render_show_the_permuted_texts_under_fixed_labels() -> None:
    item = McqItem(id="q", choices=["w", "x", "y", "z"], answer="C", response="[[C]]")
    runs = expand_item(item, scheme="cogtom")
    assert len(runs) == 5
    assert all(run.response == "" and run.answer == "C" for run in runs)
    assert render_options(runs[1]) == "A. x\nB. y\nC. z\nD. w"
    assert (
        render_options(runs[1], template="({label}) {text}", sep=" ") == "(A) x (B) y (C) z (D) w"
    )
    with pytest.raises(ValueError, match="already carries"):
        expand_item(runs[0])


def test_scoring_maps_the_displayed_label_back() -> None:
    item = McqItem(id="q", choices=["the well", "the box", "the yard", "the zoo"], answer="C")
    rotated = expand_item(item, scheme="cogtom")[1]  # shows box, yard, zoo, well: C at B
    result = score_item(rotated.model_copy(update={"response": "[[B]]"}))
    assert (result.extracted, result.chosen, result.outcome) == (["B"], ["C"], "correct")
    result = score_item(rotated.model_copy(update={"response": "[[C]]"}))
    assert (result.extracted, result.chosen, result.outcome) == (["C"], ["D"], "wrong")
    # Fuzzy matching reads the displayed texts, and maps back the same way.
    result = score_item(rotated.model_copy(update={"response": "In the zoo."}))
    assert (result.method, result.chosen) == ("fuzzy", ["D"])


def test_mapping_rejects_unknown_labels() -> None:
    with pytest.raises(ValueError, match="not among"):
        to_canonical("E", ["A", "B"], [1, 0])
    with pytest.raises(ValueError, match="not among"):
        to_displayed("E", ["A", "B"], [1, 0])


@st.composite
def _orders(draw: st.DrawFn) -> tuple[list[str], list[int]]:
    count = draw(st.integers(min_value=2, max_value=16))
    style: Literal["upper", "lower", "digit"] = draw(st.sampled_from(["upper", "lower", "digit"]))
    order = draw(st.permutations(list(range(count))))
    return default_labels(count, style=style), list(order)


@given(_orders())
def test_label_mapping_round_trips(data: tuple[list[str], list[int]]) -> None:
    labels, order = data
    for label in labels:
        assert to_canonical(to_displayed(label, labels, order), labels, order) == label
        assert to_displayed(to_canonical(label, labels, order), labels, order) == label
    # The displayed label of a canonical option is where that option's text is shown.
    texts = [f"text {i}" for i in range(len(labels))]
    shown = [texts[i] for i in order]
    for index, label in enumerate(labels):
        assert shown[labels.index(to_displayed(label, labels, order))] == texts[index]


@given(_orders(), st.data())
def test_strict_answer_to_any_presentation_scores_correct(
    data: tuple[list[str], list[int]], pick: st.DataObject
) -> None:
    labels, order = data
    answer = pick.draw(st.sampled_from(labels))
    displayed = to_displayed(answer, labels, order)
    assert extract_answer(f"[[{displayed}]]", labels, ["t"] * len(labels)).labels == (displayed,)
    item = McqItem(
        id="q",
        choices=[f"option {i}" for i in range(len(labels))],
        labels=labels,
        answer=answer,
        response=f"[[{displayed}]]",
        permutation={"run": 0, "order": order},
    )
    assert score_item(item).correct is True
