from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import accuracy_score, cohen_kappa_score, f1_score, roc_auc_score

from calibration.agreement import (
    MISSING,
    CorrelationMethod,
    JoinError,
    Statistic,
    best_threshold,
    binary_agreement,
    bootstrap_ci,
    breakdown,
    correlation,
    cv_threshold,
    inter_annotator_agreement,
    join_scores,
    judge_vs_judge,
    keypoint_agreement,
    krippendorff_alpha,
    metric_agreement,
    stratified_group_folds,
)
from calibration.agreement import test_retest as retest
from calibration.sets import CalibrationItem, load_example_set

# Fixed data with ties on both sides.
X = [0.1, 0.4, 0.35, 0.8, 0.8, 0.2, 0.9, 0.5, 0.5, 0.65, 0.3, 0.75]
Y = [0.0, 0.5, 0.25, 1.0, 0.75, 0.25, 1.0, 0.5, 0.25, 0.75, 0.0, 1.0]
LABELS = [0, 1, 0, 1, 1, 0, 1, 1, 0, 1, 0, 1]


# --- join ---------------------------------------------------------------------------------------


def test_join_pairs_by_id_in_human_order_and_explains_left_outs() -> None:
    judge = {"c": 0.3, "a": 0.1, "b": None, "e": float("nan")}
    human = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0, "f": None}
    joined = join_scores(judge, human, unscored_reasons={"b": "parse_failure"})
    assert joined.ids == ("a", "c")
    assert joined.judge.tolist() == [0.1, 0.3]
    assert joined.human.tolist() == [1.0, 3.0]
    reasons = {(x.id, x.side): x.reason for x in joined.left_out}
    assert reasons == {
        ("b", "judge"): "parse_failure",
        ("d", "judge"): MISSING,
        ("e", "judge"): "non-finite score",
        ("f", "judge"): MISSING,
    }
    assert joined.reasons("judge")[MISSING] == 2


def test_join_reports_human_side_gaps() -> None:
    joined = join_scores({"a": 0.1, "b": 0.2}, {"a": None, "b": 1.0})
    assert joined.ids == ("b",)
    assert joined.left_out[0].side == "human"


def test_join_never_pairs_two_lists_filtered_separately() -> None:
    # A positional zip after dropping the unscored "b" would pair judge c with human b.
    joined = join_scores({"a": 0.0, "b": None, "c": 1.0}, {"a": 0.0, "b": 0.5, "c": 1.0})
    assert dict(zip(joined.ids, joined.judge, strict=True)) == {"a": 0.0, "c": 1.0}
    assert dict(zip(joined.ids, joined.human, strict=True)) == {"a": 0.0, "c": 1.0}


@pytest.mark.parametrize(
    ("judge", "human", "message"),
    [
        ([("a", 0.1), ("a", 0.2)], {"a": 1.0}, "duplicate item id 'a'"),
        ({"a": 0.1}, [("a", 1.0), ("a", 0.0)], "duplicate item id 'a'"),
        ({"a": 0.1, "zz": 0.5}, {"a": 1.0}, "not in the human set"),
        ({1: 0.1}, {"1": 1.0}, "must be strings"),
        ({"x": 0.1}, {"y": 1.0}, "share no item id"),
        ({"a": "0.3"}, {"a": 1.0}, "non-numeric"),
    ],
)
def test_join_refuses_mismatched_or_duplicate_ids(judge: Any, human: Any, message: str) -> None:
    with pytest.raises(JoinError, match=message):
        join_scores(judge, human)


def test_join_can_leave_foreign_judge_ids_out_when_asked() -> None:
    joined = join_scores({"a": 0.1, "zz": 0.5}, {"a": 1.0}, allow_extra_judge_ids=True)
    assert joined.ids == ("a",)
    assert [(x.id, x.side) for x in joined.left_out] == [("zz", "human")]


# --- correlations and bootstrap -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "reference"),
    [("pearson", stats.pearsonr), ("spearman", stats.spearmanr), ("kendall", stats.kendalltau)],
)
def test_correlations_match_scipy(method: CorrelationMethod, reference: Any) -> None:
    estimate = correlation(X, Y, method, n_resamples=200, seed=1)
    expected = reference(X, Y)
    assert estimate.value == pytest.approx(expected.statistic)
    assert estimate.p_value == pytest.approx(expected.pvalue)
    assert estimate.n == len(X)
    assert estimate.value is not None
    assert estimate.ci_low is not None and estimate.ci_high is not None
    assert estimate.ci_low <= estimate.value <= estimate.ci_high


@pytest.mark.parametrize("statistic", ["pearson", "spearman", "kendall", "auroc"])
def test_bootstrap_is_reproducible_with_a_seed(statistic: Statistic) -> None:
    y = LABELS if statistic == "auroc" else Y
    first = bootstrap_ci(X, y, statistic, n_resamples=300, seed=7)
    again = bootstrap_ci(X, y, statistic, n_resamples=300, seed=7)
    other = bootstrap_ci(X, y, statistic, n_resamples=300, seed=8)
    assert first == again
    assert first[:2] != other[:2]


def test_bootstrap_percentiles_match_a_direct_loop() -> None:
    rng = np.random.default_rng(3)
    x = np.asarray(X)
    y = np.asarray(Y)
    draws = []
    for _ in range(200):
        idx = rng.integers(0, len(x), size=len(x))
        draws.append(stats.kendalltau(x[idx], y[idx]).statistic)
    draws_arr = np.asarray(draws)
    expected = np.percentile(draws_arr[~np.isnan(draws_arr)], [2.5, 97.5])
    low, high, _ = bootstrap_ci(x, y, "kendall", n_resamples=200, seed=3)
    assert (low, high) == pytest.approx(tuple(expected))


def test_constant_input_gives_none_with_a_note() -> None:
    estimate = correlation([0.5] * 6, [0, 1, 0, 1, 1, 0], "pearson")
    assert estimate.value is None
    assert "constant judge" in (estimate.note or "")
    assert correlation([1, 2, 3], [4, 4, 4], "kendall").note == "constant human scores: undefined"
    assert "fewer than 3" in (correlation([1, 2], [1, 2], "spearman").note or "")
    low, high, note = bootstrap_ci([0, 0, 0, 0, 1], [1, 1, 1, 1, 0], "pearson", seed=0)
    # Most resamples of a 5-item set with one odd item are constant: dropped and counted.
    assert note is not None and "resamples undefined" in note
    if low is None:
        assert high is None


def test_binary_auroc_matches_sklearn() -> None:
    result = binary_agreement(X, LABELS, n_resamples=200, seed=0)
    assert result.auroc.value == pytest.approx(roc_auc_score(LABELS, X))
    assert (result.n_positive, result.n_negative) == (7, 5)
    assert result.auroc.value is not None and result.auroc.ci_low is not None
    assert result.auroc.ci_low <= result.auroc.value


def test_binary_one_class_and_constant_scores() -> None:
    one_class = binary_agreement([0.1, 0.2, 0.3, 0.4], [1, 1, 1, 1], n_resamples=10)
    assert one_class.auroc.value is None and one_class.cv.accuracy is None
    constant = binary_agreement([0.5] * 6, [0, 1, 0, 1, 0, 1], n_resamples=10)
    assert constant.auroc.value == 0.5
    with pytest.raises(ValueError, match="0/1"):
        binary_agreement([0.1, 0.2], [0, 2])


# --- cross-validated threshold ------------------------------------------------------------------


def test_best_threshold_maximises_accuracy() -> None:
    scores = [0.1, 0.2, 0.3, 0.6, 0.7, 0.8]
    labels = [0, 0, 0, 1, 1, 1]
    assert best_threshold(scores, labels) == pytest.approx(0.45)
    # F1 prefers predicting everything positive when positives dominate and scores are useless.
    assert best_threshold([0.5, 0.5, 0.5, 0.5], [1, 1, 1, 0], objective="f1") == 0.5


def test_cv_threshold_is_chosen_on_the_other_folds_only() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=60)
    scores = np.clip(labels * 0.3 + rng.normal(0.35, 0.2, size=60), 0, 1)
    cv = cv_threshold(scores, labels, n_folds=4, seed=5)
    assert cv.n_folds == 4
    predicted = np.zeros(60, dtype=int)
    for fold in cv.folds:
        test = np.asarray(fold.test_indices)
        train = np.setdiff1d(np.arange(60), test)
        assert fold.threshold == best_threshold(scores[train], labels[train])
        predicted[test] = scores[test] >= fold.threshold
        assert fold.accuracy == accuracy_score(labels[test], predicted[test])
    assert cv.accuracy == pytest.approx(float(np.mean(predicted == labels)))
    assert cv.f1 == f1_score(labels, predicted, zero_division=0)
    assert cv.kappa == pytest.approx(cohen_kappa_score(labels, predicted))
    assert cv.threshold_all_data == best_threshold(scores, labels)


def test_cv_threshold_does_not_score_a_fold_with_its_own_threshold() -> None:
    # Two questions, each its own fold. In A high scores mean correct; in B the reverse. A
    # threshold chosen on A alone gets A perfectly right, so a report computed with the fold's
    # own threshold would show accuracy 1.0 on A. Chosen on the other fold it cannot.
    scores_a = [0.1, 0.2, 0.3, 0.7, 0.8, 0.9]
    labels_a = [0, 0, 0, 1, 1, 1]
    scores_b = [0.1, 0.2, 0.3, 0.7, 0.8, 0.9]
    labels_b = [1, 1, 1, 0, 0, 0]
    scores = scores_a + scores_b
    labels = labels_a + labels_b
    groups = ["A"] * 6 + ["B"] * 6
    assert best_threshold(scores_a, labels_a) == pytest.approx(0.5)  # in-sample: perfect on A
    cv = cv_threshold(scores, labels, groups=groups, n_folds=2, seed=0)
    assert cv.grouped and cv.n_folds == 2
    fold_a = next(f for f in cv.folds if set(f.test_indices) == set(range(6)))
    assert fold_a.accuracy <= 0.5
    assert cv.accuracy is not None and cv.accuracy <= 0.5


def test_cv_threshold_reduces_folds_to_the_smaller_class() -> None:
    cv = cv_threshold([0.1, 0.2, 0.3, 0.9, 0.8, 0.7, 0.6], [0, 0, 0, 0, 0, 1, 1], n_folds=5)
    assert cv.n_folds == 2
    single = cv_threshold([0.1, 0.2, 0.9], [0, 0, 1])
    assert single.accuracy is None and "too few" in (single.note or "")


# --- key points ---------------------------------------------------------------------------------


def test_keypoint_agreement_matches_sklearn_and_counts_defects() -> None:
    human = {"p1": 1, "p2": 0, "p3": -1, "p4": 1, "p5": 0, "p6": -1, "p7": 1}
    verdicts = {
        "p1": True,
        "p2": True,
        "p3": False,
        "p4": True,
        "p5": False,
        "p6": True,
        "p7": None,
    }
    defects = {"p1": False, "p2": False, "p3": True, "p4": False, "p5": True, "p6": False}
    result = keypoint_agreement(
        verdicts, human, defects=defects, unscored_reasons={"p7": "parse_failure"}
    )
    human_cov = [1, 0, 0, 1, 0, 0]
    judge_cov = [1, 1, 0, 1, 0, 1]
    assert result.n == 6 and result.n_unscored == 1
    assert result.accuracy == pytest.approx(4 / 6)
    assert result.kappa == pytest.approx(cohen_kappa_score(human_cov, judge_cov))
    assert result.n_contradicted == 2
    assert result.contradicted_judged_covered == pytest.approx(0.5)
    assert result.contradicted_defect_rate == pytest.approx(0.5)
    assert result.other_defect_rate == pytest.approx(1 / 4)
    assert result.confusion["contradicted"] == {"covered": 1, "not_covered": 1}


def test_keypoint_rejects_labels_outside_1_0_minus1() -> None:
    with pytest.raises(ValueError, match="1, 0 or -1"):
        keypoint_agreement({"a": True}, {"a": 0.5})


# --- Krippendorff -------------------------------------------------------------------------------

# Krippendorff's worked example (3 coders, 15 units; Wikipedia "Krippendorff's alpha").
_KRIPP: list[list[float | None]] = [
    [None, 1, None],
    [None, None, None],
    [None, 2, 2],
    [None, 1, 1],
    [None, 3, 3],
    [3, 3, 4],
    [4, 4, 4],
    [1, 3, None],
    [2, None, 2],
    [1, None, 1],
    [1, None, 1],
    [3, None, 3],
    [3, None, 3],
    [None, None, None],
    [3, None, 4],
]


def test_krippendorff_levels_on_the_reference_example() -> None:
    nominal = krippendorff_alpha(_KRIPP, "nominal")
    interval = krippendorff_alpha(_KRIPP, "interval")
    ordinal = krippendorff_alpha(_KRIPP, "ordinal")
    assert nominal.alpha == pytest.approx(0.691, abs=1e-3)
    assert interval.alpha == pytest.approx(0.811, abs=1e-3)
    assert ordinal.alpha is not None and nominal.alpha is not None
    assert nominal.alpha < ordinal.alpha
    assert nominal.n_items == 12 and nominal.n_annotators == 3


def test_krippendorff_edge_cases() -> None:
    assert krippendorff_alpha([[1, None], [None, 2]], "nominal").alpha is None
    same = krippendorff_alpha([[1, 1], [1, 1]], "nominal")
    assert same.alpha is None and same.note
    with pytest.raises(ValueError, match="level"):
        krippendorff_alpha(_KRIPP, "ratio")  # type: ignore[arg-type]


def test_inter_annotator_agreement_uses_the_scale_level() -> None:
    graded = inter_annotator_agreement(load_example_set("example").items)
    assert graded is not None and graded.level == "interval"
    assert graded.alpha is not None and 0.8 < graded.alpha <= 1.0
    points = inter_annotator_agreement(load_example_set("example_keypoints").items)
    assert points is not None and points.level == "nominal"
    assert inter_annotator_agreement(load_example_set("example_binary").items) is None
    ordinal = inter_annotator_agreement(load_example_set("example").items, level="ordinal")
    assert ordinal is not None and ordinal.level == "ordinal" and ordinal.alpha != graded.alpha


# --- judge vs judge, test-retest ----------------------------------------------------------------


def test_judge_vs_judge_binary_ordinal_and_continuous() -> None:
    a = {f"i{k}": float(v) for k, v in enumerate([1, 0, 1, 1, 0, 1, 0, 0])}
    b = {f"i{k}": float(v) for k, v in enumerate([1, 0, 0, 1, 0, 1, 1, 0])}
    b["extra"] = 1.0
    pair = judge_vs_judge(a, b, names=("gpt", "llama"), n_resamples=50)
    assert pair.n == 8
    assert pair.kappa == pytest.approx(cohen_kappa_score(list(a.values()), list(b.values())[:8]))
    assert pair.kappa_weights is None
    assert pair.exact_agreement == pytest.approx(6 / 8)
    assert pair.mean_abs_diff == pytest.approx(2 / 8)
    assert pair.left_out["gpt"] == {MISSING: 1}

    likert_a = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0}
    likert_b = {"a": 1.0, "b": 3.0, "c": 3.0, "d": 5.0, "e": 5.0}
    ordinal = judge_vs_judge(likert_a, likert_b, n_resamples=50)
    assert ordinal.kappa_weights == "quadratic"
    assert ordinal.kappa == pytest.approx(
        cohen_kappa_score([0, 1, 2, 3, 4], [0, 2, 2, 4, 4], weights="quadratic")
    )
    ids = [f"c{k}" for k in range(len(X))]
    continuous = judge_vs_judge(dict(zip(ids, X, strict=True)), dict(zip(ids, Y, strict=True)))
    assert continuous.kappa is None and "continuous" in (continuous.note or "")
    assert continuous.pearson.value == pytest.approx(stats.pearsonr(X, Y).statistic)


def test_judge_vs_judge_refuses_disjoint_sets() -> None:
    with pytest.raises(JoinError, match="share no item id"):
        judge_vs_judge({"a": 1.0}, {"b": 1.0})


def test_test_retest_consistency() -> None:
    first = {"a": 0.2, "b": 0.4, "c": 0.6, "d": None}
    second = {"a": 0.2, "b": 0.5, "c": 0.6, "d": 0.9}
    result = retest(first, second, name="coverage", n_resamples=50)
    assert (result.a, result.b) == ("coverage#1", "coverage#2")
    assert result.n == 3
    assert result.exact_agreement == pytest.approx(2 / 3)
    assert result.mean_abs_diff == pytest.approx(0.1 / 3)


# --- one metric, and by group -------------------------------------------------------------------


def _synthetic(
    items: Sequence[CalibrationItem], seed: int = 0, noise: float = 0.15
) -> dict[str, float | None]:
    rng = np.random.default_rng(seed)
    return {i.id: float(np.clip(i.human_norm + rng.normal(0, noise), 0, 1)) for i in items}


def test_metric_agreement_counts_unscored_and_missing() -> None:
    items = load_example_set("example").items
    scores = _synthetic(items)
    ids = list(scores)
    scores[ids[0]] = None
    scores[ids[1]] = None
    del scores[ids[2]]
    result = metric_agreement(
        items, scores, unscored_reasons={ids[0]: "timeout"}, n_resamples=100, seed=0
    )
    assert (result.n, result.n_items, result.n_unscored, result.n_missing) == (13, 16, 2, 1)
    assert result.unscored_reasons == {"timeout": 1, "unscored (no reason given)": 1}
    kept = [i for i in items if i.id in scores and scores[i.id] is not None]
    expected = stats.pearsonr([scores[i.id] for i in kept], [i.human_norm for i in kept])
    assert result.pearson.value == pytest.approx(expected.statistic)
    assert result.binary is None


def test_metric_agreement_binary_set_gets_binary_section() -> None:
    items = load_example_set("example_binary").items
    result = metric_agreement(items, _synthetic(items, noise=0.3), n_resamples=50, n_folds=3)
    assert result.binary is not None
    assert result.binary.cv.grouped  # candidates of one question stay together
    assert result.binary.auroc.value is not None


def test_breakdown_restricts_each_group() -> None:
    items = load_example_set("example").items
    scores = _synthetic(items, seed=2)
    groups = breakdown(items, scores, "system", n_resamples=50)
    assert sorted(groups) == ["sys_a", "sys_b"]
    members = [i for i in items if i.system == "sys_a"]
    expected = stats.spearmanr([scores[i.id] for i in members], [i.human_norm for i in members])
    assert groups["sys_a"].n == len(members) == 8
    assert groups["sys_a"].spearman.value == pytest.approx(expected.statistic)
    with pytest.raises(JoinError):
        breakdown(items, {**scores, "foreign": 0.5}, "system")


def test_stratified_group_folds_keep_groups_whole_and_balance_labels() -> None:
    rng = np.random.default_rng(4)
    groups = [f"q{k // 5}" for k in range(200)]  # 40 questions x 5 candidates
    labels = rng.integers(0, 2, size=200)
    folds = stratified_group_folds(labels, groups, n_folds=5, seed=1)
    assert len(folds) == 5
    tested = np.concatenate([test for _, test in folds])
    assert sorted(tested.tolist()) == list(range(200))
    for train, test in folds:
        assert not {groups[i] for i in train} & {groups[i] for i in test}
        assert abs(labels[test].mean() - labels.mean()) < 0.15
    again = stratified_group_folds(labels, groups, n_folds=5, seed=1)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again, strict=True))
    other = stratified_group_folds(labels, groups, n_folds=5, seed=2)
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, other, strict=True))
    with pytest.raises(ValueError, match="2 groups"):
        stratified_group_folds([0, 1], ["a", "a"], n_folds=2)
