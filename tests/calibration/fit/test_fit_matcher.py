"""Tests of the matcher's fit: the balanced threshold, out-of-fold verdicts, a whole fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calibration.fit import matcher as fit_matcher
from calibration.fit.evaluate import (
    balanced_accuracy,
    format_verdicts,
    long_threshold,
    verdict_figures,
)
from calibration.fit.matcher import (
    SETS,
    _routed_scores,
    choose_threshold,
    fit_logistic,
    load_examples,
    main,
)
from calibration.fit.multilingual import parallel_texts
from calibration.fit.types import Example, FittedModel, SetSpec
from judge.matcher import EmbeddedMatcher, MatchInput, PointFeatures, load_params


def test_balanced_accuracy() -> None:
    positive = np.array([True, True, True, False])
    assert balanced_accuracy(np.array([True, True, True, True]), positive) == 0.5
    assert balanced_accuracy(np.array([True, True, False, False]), positive) == pytest.approx(
        0.5 * (2 / 3 + 1)
    )
    # One class only: plain accuracy.
    assert balanced_accuracy(np.array([True, False]), np.array([True, True])) == 0.5


def test_threshold_maximises_the_sets_mean_balanced_accuracy() -> None:
    # Set a separates anywhere in (0.3, 0.6], set b only in (0.5, 0.55]: both at once there.
    p = np.array([0.2, 0.3, 0.6, 0.7, 0.1, 0.5, 0.55, 0.9])
    y = np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=float)
    sets = ["a"] * 4 + ["b"] * 4
    t = choose_threshold(p, y, np.full(8, 0.25), sets, "balanced")
    assert 0.5 < t <= 0.55


def test_threshold_is_not_dragged_by_a_set_of_mostly_right_answers() -> None:
    # Set "many" has 9 right answers in 10; plain accuracy on the pool would credit everything
    # of it above its one wrong answer's score only, and a balanced rule must still separate
    # set "few"'s answers (right above 0.6, wrong below 0.4).
    many_p = np.array([0.45, 0.5, 0.55, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.42])
    many_y = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 0], dtype=float)
    few_p = np.array([0.1, 0.2, 0.3, 0.35, 0.38, 0.62, 0.7])
    few_y = np.array([0, 0, 0, 0, 0, 1, 1], dtype=float)
    p = np.concatenate([many_p, few_p])
    y = np.concatenate([many_y, few_y])
    sets = ["many"] * len(many_p) + ["few"] * len(few_p)
    # Each set's rows share the set's weight of 1.
    w = np.array([1 / len(many_p)] * len(many_p) + [1 / len(few_p)] * len(few_p))
    t = choose_threshold(p, y, w, sets, "balanced")
    assert 0.42 < t <= 0.45
    verdicts = p >= t
    assert verdicts[: len(many_p)].sum() == 9
    assert verdicts[len(many_p) :].sum() == 2


def test_the_accuracy_rule_follows_the_pool_and_the_balanced_rule_needs_the_sets() -> None:
    # Nine right answers in ten, the wrong one scored highest of the low ones: plain accuracy
    # credits all but the lowest, as matcher-v2 did.
    p = np.array([0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.36])
    y = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 0], dtype=float)
    assert choose_threshold(p, y, np.ones(10), objective="accuracy") <= 0.3
    with pytest.raises(ValueError, match="set"):
        choose_threshold(p, y, np.ones(10), objective="balanced")


def _row(set_name: str, label: float, *points: tuple[float, bool], mean: bool = False) -> Example:
    """A row whose options have whole-response similarity ``sim`` and are long or not."""
    item = MatchInput("q", "p", ["p"], "r", "en")
    features = [PointFeatures({"sim_whole": sim}, None, False, (), long) for sim, long in points]
    return Example(
        set_name, set_name, label, [(item, "p")] * len(points), "mean" if mean else "max", features
    )


def test_a_row_is_long_when_a_long_point_decides_its_score() -> None:
    # The short model scores sim 0.9 at 0.5, the long one at 0.9: the routes differ.
    short = FittedModel(("sim_whole",), np.array([0.0]), 0.0)
    long = FittedModel(("sim_whole",), np.array([0.0]), float(np.log(9.0)))
    rows = [
        _row("s", 1.0, (0.9, False)),
        _row("s", 1.0, (0.9, False), (0.9, True)),  # the long option scores higher
        _row("s", 1.0, (0.9, True), (0.9, True), (0.9, False), mean=True),
        _row("s", 1.0, (0.9, True), (0.9, False), (0.9, False), mean=True),
    ]
    scores, long_rows = _routed_scores(short, rows, long)
    assert long_rows.tolist() == [False, True, True, False]
    assert scores == pytest.approx([0.5, 0.9, (0.9 + 0.9 + 0.5) / 3, (0.9 + 0.5 + 0.5) / 3])
    # Without a long-point model every point is the short model's, and so is every verdict.
    assert not _routed_scores(short, rows, None)[1].any()


def test_the_long_threshold_is_chosen_on_the_long_rows_only() -> None:
    specs = {name: SetSpec(name, f"{name}.jsonl", "graded", 0, 1) for name in ("med", "qa")}
    # Long rows: one right answer in eight, the wrong ones scored up to 0.6, the right one at
    # 0.7: accuracy keeps all but it out. The short rows (right answers at 0.3) would pull a
    # pooled threshold down to 0.3.
    long_p = [0.1, 0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 0.7]
    rows = [_row("med", 1.0 if p == 0.7 else 0.0, (p, True)) for p in long_p]
    rows += [_row("qa", 1.0, (0.3, False)) for _ in range(20)]
    scores = np.array(long_p + [0.3] * 20)
    long_rows = np.array([True] * len(long_p) + [False] * 20)
    t = long_threshold(rows, scores, long_rows, specs, fallback=0.41)
    assert 0.6 < t <= 0.7
    # No long row: the short-point threshold judges them all.
    assert long_threshold(rows, scores, np.zeros(len(rows), dtype=bool), specs, 0.41) == 0.41


def test_fit_logistic_on_soft_labels_orders_by_the_feature() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(200, 2))
    y = np.clip(x[:, 0] + rng.normal(0, 0.05, 200), 0, 1)  # soft labels follow feature 0
    model = fit_logistic(x, y, np.ones(200), ["signal", "noise"])
    assert model.weights[0] > 3 * abs(model.weights[1])
    p = model.probability(np.array([[0.1, 0.5], [0.9, 0.5]]))
    assert p[0] < 0.3 < 0.7 < p[1]


def test_verdict_figures_and_their_table() -> None:
    scores = np.array([0.9, 0.8, 0.2, 0.7, 0.1, 0.6])
    labels = np.array([1, 1, 0, 0, 0, 1], dtype=float)
    figures = verdict_figures(scores, np.full(6, 0.5), labels, ["q1", "q2", "q3", "q4", "q5", "q6"])
    assert figures["accuracy"] == pytest.approx(5 / 6)
    assert figures["positive_rate"] == pytest.approx(4 / 6)
    assert figures["human_positive_rate"] == pytest.approx(0.5)
    assert figures["majority"] == pytest.approx(0.5)
    assert figures["balanced_accuracy"] == pytest.approx(0.5 * (1 + 2 / 3))
    row = {f"verdict_{k}": v for k, v in figures.items()}
    row.update(set="toy", threshold_mean=0.5)
    text = format_verdicts("title", [row])
    assert "toy" in text and "0.833" in text


# ------------------------------------------------------------------------------------------------
# A whole fit on a small data folder of the shared layout


_FACTS = [
    ("Who wrote Anna Karenina?", "Leo Tolstoy"),
    ("What is the capital of France?", "Paris"),
    ("Which planet is known as the red planet?", "Mars"),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci"),
    ("What gas do plants absorb?", "carbon dioxide"),
    ("Who discovered penicillin?", "Alexander Fleming"),
    ("What is the largest ocean?", "the Pacific Ocean"),
    ("Which composer wrote the Ninth Symphony with the Ode to Joy?", "Beethoven"),
    ("What is the hardest natural mineral?", "diamond"),
    ("Who was the first man on the moon?", "Neil Armstrong"),
    ("Which river flows through Cairo?", "the Nile"),
    ("What language is spoken in Brazil?", "Portuguese"),
]
_WRONG = "I am not sure, perhaps it was something else entirely."
_LONG = (
    "Noonan syndrome is a genetic disorder that affects many parts of the body. People with it "
    "often have a short stature, distinctive facial features, heart defects present from birth, "
    "bleeding problems, skeletal malformations and delayed development, and the condition is "
    "inherited in an autosomal dominant pattern in most families that have been studied so far."
)


def _rows(kind: str) -> list[dict[str, Any]]:
    rows = []
    for i, (question, answer) in enumerate(_FACTS):
        right = i % 2 == 0
        candidate = f"I believe it is {answer}." if right else _WRONG
        row: dict[str, Any] = {
            "id": f"{kind}-{i}",
            "question": question,
            "reference": answer,
            "references": [answer],
            "candidate": candidate,
        }
        if kind == "binary":
            row["human_score"] = 1 if right else 0
            row["meta"] = {"system": "fid" if i < 6 else "gpt4"}
        elif kind == "kpqa":
            row["human_score"] = 4.5 if right else 1.5
        elif kind == "nrqa":
            row["human_score"] = 0.9 if right else 0.2
        elif kind == "kqa":
            row.update(human_score=1 if right else 0, key_point=f"The answer is {answer}")
            row["meta"] = {"must_have": [f"The answer is {answer}"], "nice_to_have": []}
        elif kind == "kqa_answer":
            row.update(human_score=1.0 if right else 0.0)
            row["key_points"] = {"must_have": [f"The answer is {answer}"]}
        elif kind == "medquad":
            row.update(reference=_LONG, references=[_LONG], human_score=4 if right else 1)
            row["candidate"] = _LONG if right else _WRONG
        rows.append(row)
    return rows


def _data_dir(tmp_path: Path) -> Path:
    kinds = {
        "evouna/tq.jsonl": "binary",
        "kpqa/nrqa_mhpgm.jsonl": "nrqa",
        "kpqa/marco_all.jsonl": "kpqa",
        "kpqa/avsd_all.jsonl": "kpqa",
        "kpqa/marcomulti_unilm.jsonl": "kpqa",
        "kqa/kqa_nli_keypoints.jsonl": "kqa",
        "kqa/kqa_answer_level.jsonl": "kqa_answer",
        "liveqa_med/medquad_judged_answers.jsonl": "medquad",
    }
    assert set(kinds) == {spec.path for spec in SETS}
    for path, kind in kinds.items():
        file = tmp_path / "data" / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("".join(json.dumps(r) + "\n" for r in _rows(kind)), encoding="utf-8")
    return tmp_path / "data"


def test_a_whole_fit_writes_parameters_the_matcher_runs_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data_dir(tmp_path)
    # The Chinese scale from six of the 28 parallel texts: the same step, a fifth of the
    # multilingual encoder's work (tests/calibration/fit/test_fit_multilingual.py checks it).
    english, chinese = parallel_texts()
    monkeypatch.setattr(fit_matcher, "parallel_texts", lambda: (english[:6], chinese[:6]))
    out = tmp_path / "params.json"
    report = tmp_path / "report.txt"
    status = main(
        ["--data-dir", str(data), "--out", str(out), "--report", str(report), "--no-cache"]
    )
    assert status == 0
    params = load_params(out)
    for model in (params.full, params.lexical, params.long):
        assert 0.05 <= model.threshold <= 0.95
    assert "balanced accuracy" in params.training["threshold_rule"]
    text = report.read_text(encoding="utf-8")
    assert "verdicts of the English model" in text
    assert "LOSO" in text
    assert params.similarity_scale["zh"] > 1.0
    rows = {row["set"]: row for row in params.training["cv_full"]}
    # Every set, and EVOUNA per answering system.
    assert set(rows) == {spec.name for spec in SETS} | {"evouna_tq/fid", "evouna_tq/gpt4"}
    assert rows["evouna_tq/fid"]["n"] == rows["evouna_tq/gpt4"]["n"] == 6
    # The toy sets separate perfectly: out-of-fold verdicts agree with every label.
    assert rows["evouna_tq"]["verdict_accuracy"] == 1.0
    matcher = EmbeddedMatcher(params)
    [[right], [wrong]] = matcher.match(
        [
            MatchInput("Who wrote War and Peace?", "Tolstoy", ["Tolstoy"], "Tolstoy did.", "en"),
            MatchInput("Who wrote War and Peace?", "Tolstoy", ["Tolstoy"], _WRONG, "en"),
        ]
    )
    assert right.covered and not wrong.covered


def test_a_missing_data_folder_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "p.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_subsample_can_train_on_part_of_a_set_and_evaluate_all_of_it(tmp_path: Path) -> None:
    import dataclasses

    data = _data_dir(tmp_path)
    evouna = next(spec for spec in SETS if spec.name == "evouna_tq")
    spec = dataclasses.replace(evouna, subsample=4, evaluate_all=True)
    examples: list[Example] = load_examples(data, [spec])
    assert len(examples) == len(_FACTS)
    assert sum(ex.train for ex in examples) == 4
    assert {ex.stratum for ex in examples} == {"fid", "gpt4"}
    # The draw is the set's own: the same questions whatever else is read.
    again = load_examples(data, [spec])
    assert [ex.train for ex in again] == [ex.train for ex in examples]
    only = load_examples(data, [dataclasses.replace(spec, evaluate_all=False)])
    assert [ex.group for ex in only] == [ex.group for ex in examples if ex.train]
