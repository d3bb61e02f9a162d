"""The matcher fit's shared types: a set's reading instructions, a rated example, a fitted model.

In a module of their own so the fit (:mod:`calibration.fit.matcher`), its evaluation
(:mod:`calibration.fit.evaluate`) and the multilingual fit (:mod:`calibration.fit.multilingual`)
read them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from judge.matcher import MatchInput, PointFeatures

__all__ = ["Example", "FittedModel", "FloatArray", "SetSpec"]

FloatArray = npt.NDArray[np.float64]
"""A float64 array (features, weights, probabilities)."""


@dataclass(frozen=True)
class SetSpec:
    """One shared calibration set and how it is used.

    Attributes:
        name: Short name used in reports.
        path: Path relative to the data directory.
        kind: ``binary`` (AUROC), ``graded`` (Spearman/Pearson), ``keypoints`` (K-QA per
            statement) or ``answer_keypoints`` (K-QA share of must-have statements covered).
        low: Lowest value of the human scale (normalised to 0).
        high: Highest value of the human scale (normalised to 1).
        weight: Total weight of the set in the fit (each set's rows share it).
        subsample: Maximum number of questions that train the model (None: all), seeded.
        train: Whether the set trains the model (else it is evaluated only).
        evaluate_all: With ``subsample``, also read the other questions' rows, for evaluation
            only (out of every fit), so a set's figures cover all of it whatever trains.
        stratum: A ``meta`` field whose value splits the set in the report (EVOUNA's
            answering system), or None.
        max_references: Keep at most this many references per row for the encoder (EVOUNA
            lists up to 80 aliases): the first one plus the lexically best-matching others.
    """

    name: str
    path: str
    kind: str
    low: float
    high: float
    weight: float = 1.0
    subsample: int | None = None
    train: bool = True
    max_references: int | None = None
    evaluate_all: bool = False
    stratum: str | None = None


@dataclass
class Example:
    """One rated row turned into matcher inputs.

    Attributes:
        set_name: The set it comes from.
        group: Grouping key for cross-validation (the question).
        label: Human score normalised to [0, 1] (K-QA: 1 covered, 0 not or contradicted).
        options: Alternative (input, point) pairs; the row's score is the best option's
            probability (several references), or the mean over points (K-QA answer level).
        aggregate: ``max`` over alternative references or ``mean`` over key points.
        features: Filled in by :func:`build_examples` (one per option).
        train: False for a row read for evaluation only (a question outside the subsample).
        stratum: The row's value of its set's ``stratum`` field, or None.
    """

    set_name: str
    group: str
    label: float
    options: list[tuple[MatchInput, str]]
    aggregate: str = "max"
    features: list[PointFeatures] = field(default_factory=list)
    train: bool = True
    stratum: str | None = None


@dataclass(frozen=True)
class FittedModel:
    """A logistic regression on raw features (standardisation folded in) and its threshold."""

    features: tuple[str, ...]
    weights: FloatArray
    bias: float
    threshold: float = 0.5

    def probability(self, x: FloatArray) -> FloatArray:
        """P(covered) for each row of ``x``."""
        z = np.clip(x @ self.weights + self.bias, -40.0, 40.0)
        result: FloatArray = 1.0 / (1.0 + np.exp(-z))
        return result
