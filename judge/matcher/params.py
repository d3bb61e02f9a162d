"""The embedded matcher's parameters: feature sets, linear models and the shipped parameter file.

Fitted by ``calibration.fit.matcher`` and shipped in ``judge/data/matcher_params.json``; loading
validates the file against the features this version computes
(:data:`judge.identity.MATCHER_VERSION`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard, get_args

import numpy as np
import numpy.typing as npt

from core.errors import ConfigError
from judge.identity import MATCHER_VERSION, PARAMS_FILE
from judge.matcher.encoder import (
    MULTILINGUAL_ENCODER,
)
from judge.matcher.types import PointFeatures

PARAMS_PATH = PARAMS_FILE
"""The shipped parameter file (weights, bias, thresholds, training summary)."""

FULL_FEATURES: tuple[str, ...] = (
    "sim_max",
    "sim_whole",
    "sim_sent_recall",
    "exact_match",
    "fuzz_partial",
    "fuzz_token_set",
    "content_recall",
    "sentence_recall",
    "token_f1",
    "novel_recall",
    "distinct_recall",
    "synonym_recall",
    "bigram_recall",
    "number_missing",
    "name_missing",
    "length_ratio",
)
"""Features of the English model, in the order of its weights."""

LEXICAL_FEATURES: tuple[str, ...] = tuple(
    name
    for name in FULL_FEATURES
    if not name.startswith("sim_") and name not in ("name_missing", "synonym_recall")
)
"""Features of the lexical-only model (Chinese without the multilingual encoder): no encoder,
no names (no capital letters), and no synonyms (the lexicon is English)."""

MULTILINGUAL_FEATURES: tuple[str, ...] = tuple(n for n in FULL_FEATURES if n != "name_missing")
"""Features of the multilingual model (Chinese): the English model's, with the similarities
of the multilingual encoder (:mod:`judge.matcher.encoder`) on the English scale, and no names
(Chinese has no capital letters). ``synonym_recall`` is the recall of the point's characters
after Cilin synonyms are written in (:func:`judge.matcher.lexicon.align_chinese`)."""

LONG_FEATURES: tuple[str, ...] = ("sim_whole",)
"""Features of the long-point model (English points of more than :data:`LONG_POINT_WORDS`)."""

LONG_POINT_WORDS = 40
"""Points with more words than this are judged by the long-point model (English only)."""

NUMBER_RULE_MAX_WORDS = 25
"""Points with at most this many words are subject to the number rule (one fact per point)."""


ModelKind = Literal["full", "long", "lexical", "multilingual"]
"""Which of the matcher's models judged a point (:meth:`MatcherParams.kind`): English short
points, English long points, Chinese without the multilingual encoder, Chinese."""

MODEL_KINDS: tuple[ModelKind, ...] = get_args(ModelKind)
"""Every model kind, in the parameter file's order."""


@dataclass(frozen=True)
class CascadeBand:
    """The matcher's uncertain band for one model kind, at one target agreement.

    A point whose probability lies in ``[low, high]`` is uncertain: the cascade judge sends its
    item to the LLM. Below ``low`` the matcher is sure it is not covered, above ``high`` sure it
    is; ``low <= threshold <= high``, so a sure verdict is always the matcher's own verdict.
    ``low = 0`` and ``high = 1`` make every point uncertain (a target the sets cannot reach).

    Attributes:
        low: Probabilities below it are sure "not covered".
        high: Probabilities above it are sure "covered".
    """

    low: float
    high: float

    def sure(self, probability: float) -> bool:
        """Whether the matcher is sure of a point with this probability (outside the band)."""
        return probability < self.low or probability > self.high


@dataclass(frozen=True)
class CascadeBands:
    """The fitted bands (:mod:`calibration.fit.cascade`), per target agreement and model kind.

    Attributes:
        bands: Target agreement (of the sure verdicts with people, out of fold) -> model kind
            -> band.
        training: The band fit's summary (sets, per-set routed share and agreement).
    """

    bands: dict[float, dict[ModelKind, CascadeBand]]
    training: dict[str, Any] = field(default_factory=dict)

    def at(self, agreement: float) -> dict[ModelKind, CascadeBand]:
        """The bands fitted for ``agreement``.

        Raises:
            ConfigError: (``cascade_agreement``) no band was fitted for that target; the
                message lists those that were.
        """
        for target, bands in self.bands.items():
            if math.isclose(target, agreement, abs_tol=1e-9):
                return bands
        shipped = ", ".join(f"{t:g}" for t in sorted(self.bands))
        raise ConfigError(
            f"no cascade band is fitted for agreement {agreement:g}; fitted: {shipped} (fit "
            f"others with python -m calibration.fit.cascade)",
            field="cascade_agreement",
        )


@dataclass(frozen=True)
class LinearModel:
    """A logistic regression on raw feature values (standardisation folded into the weights).

    Attributes:
        features: Feature names, in weight order.
        weights: One weight per feature.
        bias: The intercept.
        threshold: Probability at or above which a point counts as covered.
    """

    features: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float

    def probability(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Return P(covered) for each row of ``x`` (or for a single feature vector).

        Args:
            x: Feature values, shape ``(n, len(features))`` or ``(len(features),)``.

        Returns:
            Probabilities in [0, 1], same leading shape as ``x``.
        """
        z = x @ np.asarray(self.weights, dtype=np.float64) + self.bias
        # Clipping keeps exp() finite; a logit of 40 is already 1 - 4e-18.
        z = np.clip(z, -40.0, 40.0)
        result: npt.NDArray[np.float64] = 1.0 / (1.0 + np.exp(-z))
        return result


@dataclass(frozen=True)
class MatcherParams:
    """The contents of a matcher parameter file.

    Attributes:
        version: Parameter version (equals :data:`MATCHER_VERSION`).
        full: The English model (encoder + lexical features).
        lexical: The lexical-only model (Chinese when the multilingual encoder is missing).
        long: The English model of long points (whole-response similarity).
        encoder: Name of the encoder the full model was fitted with.
        multilingual: The Chinese model (multilingual encoder + character features).
        multilingual_encoder: Name of the encoder the multilingual model was fitted with.
        similarity_scale: Per language, the factor that maps its cosines onto the English
            scale (:func:`judge.matcher.encoder.to_english_scale`).
        training: The fit's summary (sets, sizes, cross-validated figures), for reports.
        cascade: The cascade judge's uncertain bands (the ``cascade`` section), or None when
            the file has none.
    """

    version: str
    full: LinearModel
    lexical: LinearModel
    long: LinearModel
    encoder: str
    multilingual: LinearModel
    multilingual_encoder: str
    similarity_scale: dict[str, float]
    training: dict[str, Any] = field(default_factory=dict)
    cascade: CascadeBands | None = None

    def kind(self, features: PointFeatures) -> ModelKind:
        """Which model judges a point with these features.

        Args:
            features: The point's features.

        Returns:
            ``lexical`` for lexical-only features, ``multilingual`` for Chinese ones, ``long``
            for a long English point, else ``full``.
        """
        if features.lexical_only:
            return "lexical"
        if features.multilingual:
            return "multilingual"
        return "long" if features.long_point else "full"

    def model(self, kind: ModelKind) -> LinearModel:
        """The model of one kind."""
        models: dict[ModelKind, LinearModel] = {
            "full": self.full, "long": self.long, "lexical": self.lexical,
            "multilingual": self.multilingual,
        }  # fmt: skip
        return models[kind]

    def select(self, features: PointFeatures) -> LinearModel:
        """Return the model that judges a point with these features.

        Args:
            features: The point's features.

        Returns:
            ``lexical`` for lexical-only features, ``multilingual`` for Chinese ones, ``long``
            for a long English point, else ``full``.
        """
        return self.model(self.kind(features))


# ----------------------------------------------------------------------------------------------
# Parameter file


def _model_from_json(data: Any, name: str, expected: tuple[str, ...], path: Path) -> LinearModel:
    """Validate and build one model section of the parameter file."""
    where = f"matcher parameter file {path}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: {name!r} must be an object", field=f"matcher_params.{name}")
    features = data.get("features")
    weights = data.get("weights")
    bias = data.get("bias")
    threshold = data.get("threshold")
    if not isinstance(features, list) or tuple(features) != expected:
        raise ConfigError(
            f"{where}: {name}.features must be {list(expected)} for {MATCHER_VERSION}, got "
            f"{features!r}; refit with python -m calibration.fit.matcher",
            field=f"matcher_params.{name}.features",
        )
    if (
        not isinstance(weights, list)
        or len(weights) != len(expected)
        or not all(_is_finite_number(w) for w in weights)
    ):
        raise ConfigError(
            f"{where}: {name}.weights must be {len(expected)} finite numbers",
            field=f"matcher_params.{name}.weights",
        )
    if not _is_finite_number(bias):
        raise ConfigError(
            f"{where}: {name}.bias must be a finite number", field=f"matcher_params.{name}.bias"
        )
    if not _is_finite_number(threshold) or not 0.0 < float(threshold) < 1.0:
        raise ConfigError(
            f"{where}: {name}.threshold must be a number strictly between 0 and 1",
            field=f"matcher_params.{name}.threshold",
        )
    return LinearModel(
        features=expected,
        weights=tuple(float(w) for w in weights),
        bias=float(bias),
        threshold=float(threshold),
    )


def _is_finite_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is an int or float (not a bool) with a finite value."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_params(path: str | Path | None = None) -> MatcherParams:
    """Load and validate a matcher parameter file.

    Args:
        path: The JSON file; None means the shipped :data:`PARAMS_PATH`.

    Returns:
        The validated parameters.

    Raises:
        ConfigError: when the file is missing, unreadable, not JSON, of another version, or
            malformed; the message names the file and the offending field.
    """
    file = PARAMS_PATH if path is None else Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(
            f"matcher parameter file {file} is missing; reinstall bonusjudge or regenerate it "
            f"with python -m calibration.fit.matcher",
            field="matcher_params",
        ) from exc
    except OSError as exc:
        raise ConfigError(
            f"matcher parameter file {file} cannot be read: {exc}", field="matcher_params"
        ) from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"matcher parameter file {file} is not valid JSON: {exc}", field="matcher_params"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"matcher parameter file {file} must hold a JSON object", field="matcher_params"
        )
    version = data.get("version")
    if version != MATCHER_VERSION:
        raise ConfigError(
            f"matcher parameter file {file} has version {version!r}, but this bonusjudge "
            f"computes the features of {MATCHER_VERSION!r}; refit with "
            f"python -m calibration.fit.matcher",
            field="matcher_params.version",
        )
    encoder = data.get("encoder")
    if not isinstance(encoder, str) or not encoder:
        raise ConfigError(
            f"matcher parameter file {file}: 'encoder' must be a non-empty string",
            field="matcher_params.encoder",
        )
    training = data.get("training", {})
    if not isinstance(training, dict):
        raise ConfigError(
            f"matcher parameter file {file}: 'training' must be an object",
            field="matcher_params.training",
        )
    section = data.get("multilingual")
    multilingual = _model_from_json(section, "multilingual", MULTILINGUAL_FEATURES, file)
    ml_encoder, scale = _multilingual_from_json(section, file)
    models = {
        "full": _model_from_json(data.get("full"), "full", FULL_FEATURES, file),
        "lexical": _model_from_json(data.get("lexical"), "lexical", LEXICAL_FEATURES, file),
        "long": _model_from_json(data.get("long"), "long", LONG_FEATURES, file),
        "multilingual": multilingual,
    }
    cascade = data.get("cascade")
    return MatcherParams(
        version=version,
        full=models["full"],
        lexical=models["lexical"],
        long=models["long"],
        encoder=encoder,
        multilingual=multilingual,
        multilingual_encoder=ml_encoder,
        similarity_scale=scale,
        training=training,
        cascade=None if cascade is None else _cascade_from_json(cascade, models, file),
    )


def _cascade_from_json(
    section: Any, models: Mapping[str, LinearModel], file: Path
) -> CascadeBands:
    """Validate the ``cascade`` section: per target, a band around each model's threshold."""
    where = f"matcher parameter file {file}: cascade"
    fix = "; refit with python -m calibration.fit.cascade"
    bands = section.get("bands") if isinstance(section, Mapping) else None
    if not isinstance(bands, Mapping) or not bands:
        raise ConfigError(
            f"{where}.bands must map target agreements to bands{fix}",
            field="matcher_params.cascade.bands",
        )
    out: dict[float, dict[ModelKind, CascadeBand]] = {}
    for target_text, per_kind in bands.items():
        try:
            target = float(target_text)
        except ValueError:
            target = math.nan
        if not 0.5 <= target < 1.0 or not isinstance(per_kind, Mapping):
            raise ConfigError(
                f"{where}.bands: {target_text!r} must be an agreement in [0.5, 1) mapped to "
                f"one band per model{fix}",
                field="matcher_params.cascade.bands",
            )
        fitted: dict[ModelKind, CascadeBand] = {}
        for kind in MODEL_KINDS:
            band = per_kind.get(kind)
            threshold = models[kind].threshold
            if (
                not isinstance(band, list)
                or len(band) != 2
                or not all(_is_finite_number(v) for v in band)
                or not 0.0 <= band[0] <= threshold <= band[1] <= 1.0
            ):
                # A band not around the threshold would make a "sure" verdict contradict the
                # matcher's own.
                raise ConfigError(
                    f"{where}.bands.{target_text}.{kind} must be [low, high] with 0 <= low <= "
                    f"{threshold} (the threshold) <= high <= 1, got {band!r}{fix}",
                    field=f"matcher_params.cascade.bands.{kind}",
                )
            fitted[kind] = CascadeBand(float(band[0]), float(band[1]))
        out[target] = fitted
    training = section.get("training", {})
    return CascadeBands(out, training if isinstance(training, dict) else {})


def _multilingual_from_json(section: Any, file: Path) -> tuple[str, dict[str, float]]:
    """The multilingual section's encoder name and per-language similarity scales."""
    encoder = section.get("encoder") if isinstance(section, Mapping) else None
    if encoder != MULTILINGUAL_ENCODER:
        raise ConfigError(
            f"matcher parameter file {file}: multilingual.encoder must be "
            f"{MULTILINGUAL_ENCODER!r}, got {encoder!r}",
            field="matcher_params.multilingual.encoder",
        )
    scale = section.get("similarity_scale")
    if not isinstance(scale, Mapping) or not all(
        isinstance(k, str) and _is_finite_number(v) and v > 0 for k, v in scale.items()
    ):
        raise ConfigError(
            f"matcher parameter file {file}: multilingual.similarity_scale must map languages "
            f"to positive numbers",
            field="matcher_params.multilingual.similarity_scale",
        )
    return encoder, {k: float(v) for k, v in scale.items()}
