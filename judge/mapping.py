"""The calibrated mapping as the engine reads it: the human scale, the saved mapping, applying it.

A calibrated mapping is a small versioned JSON file (written by ``bonusjudge calibrate``) that
maps one judge configuration's score onto the human scale. Grading only reads and applies it, so
what that needs lives here, with numpy only: the scale descriptor (:class:`Scale`,
:func:`parse_scale`), the mapping model (:class:`CalibratedMapping`), :func:`load_mapping`, and
the check that a configuration computes the metric a file maps (:func:`mapping_for_config`).
Fitting a mapping (scikit-learn) stays in ``calibration.mapping``, which builds on these.

A mapping belongs to what produced the scores it maps. A coverage mapping belongs to the judge
configuration it was fitted on: the saved JSON records that configuration's hash. ROUGE-L and
BERTScore do not depend on the judge, so their mappings belong to the metric's own settings
(:func:`metric_settings`: ROUGE-L's tokenizer, BERTScore's encoder, layer, idf and baseline,
length control for both), recorded as ``metric_config``: they apply whatever judge and other
metrics a run has. Files written before (format 1) have no ``metric_config`` and keep the judge
rule. Applying a mapping where it does not belong raises :class:`MappingConfigMismatch`.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import math
import re
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bonusjudge_client.wire.grading import CalibratedMetric, CoverageResult
from bonusjudge_client.wire.vocab import MetricName
from core.errors import ConfigError, InputError, JudgeError, every_error
from judge.config import JudgeConfig
from judge.metrics import DEFAULT_ENCODER, BertScore, RougeScore
from judge.metrics.rouge import TOKENIZER_NAMES

__all__ = [
    "MAPPED_METRICS",
    "MAPPING_FORMAT_VERSION",
    "METRIC_KEYED",
    "MIN_ITEMS",
    "READABLE_FORMAT_VERSIONS",
    "CVErrors",
    "CVFigures",
    "CalibratedMapping",
    "KrippendorffLevel",
    "MappingConfigMismatch",
    "MappingKind",
    "Scale",
    "ScaleKind",
    "calibrated_metric",
    "calibrated_score",
    "load_mapping",
    "mapped_metric",
    "mapping_for_config",
    "metric_settings",
    "parse_scale",
]

# --- the human scale ----------------------------------------------------------------------------

ScaleKind = Literal["binary", "range", "keypoint"]
"""How a set's human scores are to be read: 0/1, a graded range lo-hi, or K-QA's 1/0/-1."""

KrippendorffLevel = Literal["nominal", "ordinal", "interval"]
"""Level of measurement of one annotator's rating, as the ``krippendorff`` package names it."""

# Words that say a graded score is an average or a share: continuous, so interval level.
_CONTINUOUS_WORDS = re.compile(r"\b(mean|average|averaged|fraction|share|proportion)\b|%", re.I)
_RANGE_RE = re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:-|–|—|\bto\b)\s*(-?\d+(?:\.\d+)?)")
_KEYPOINT_RE = re.compile(r"contradict|1\s*/\s*0\s*/\s*-1|-1\s*/\s*0\s*/\s*1", re.I)
_BINARY_RE = re.compile(r"\bbinary\b|(?<![\d.])0\s*/\s*1(?![\d.])", re.I)
# Tolerance for range checks: sources store means like 4.4444444444444455.
_EPS = 1e-9

FloatArray = npt.NDArray[np.float64]
"""A 1-D array of float64 (judge scores, predictions)."""


class Scale(BaseModel):
    """A set's human-score scale, parsed from its ``score_scale`` text.

    Attributes:
        kind: ``binary`` (0/1), ``range`` (graded, lo..hi) or ``keypoint`` (1 covered, 0 not
            covered, -1 contradicted).
        lo: Lowest possible raw score.
        hi: Highest possible raw score.
        level: Krippendorff level of one annotator's rating on this scale: ``nominal`` for
            binary and key-point labels, ``ordinal`` for Likert-type integer scales,
            ``interval`` for continuous scores (shares, averages).
        text: The ``score_scale`` text this was parsed from.
    """

    model_config = ConfigDict(frozen=True)

    kind: ScaleKind
    lo: float
    hi: float
    level: KrippendorffLevel
    text: str

    @property
    def is_binary_label(self) -> bool:
        """Whether the normalised human score is a 0/1 label (binary and key-point scales)."""
        return self.kind in ("binary", "keypoint")

    def check(self, raw: float, *, field: str = "human_score") -> float:
        """Return ``raw`` as a float if it is a valid score on this scale.

        Args:
            raw: The raw score.
            field: Field name used in the error message.

        Raises:
            ValueError: When the score is not finite, not an allowed label, or out of range.
        """
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(f"{field} must be a finite number, got {raw!r}")
        if self.kind == "binary" and value not in (0.0, 1.0):
            raise ValueError(f"{field} must be 0 or 1 on a binary scale, got {raw!r}")
        if self.kind == "keypoint" and value not in (-1.0, 0.0, 1.0):
            raise ValueError(
                f"{field} must be 1 (covered), 0 (not covered) or -1 (contradicted), got {raw!r}"
            )
        if not self.lo - _EPS <= value <= self.hi + _EPS:
            raise ValueError(
                f"{field} {raw!r} lies outside the scale {self.lo:g}-{self.hi:g} ({self.text!r})"
            )
        return value

    def normalize(self, raw: float) -> float:
        """Map a raw score onto 0..1.

        Graded ranges are rescaled linearly, binary scores are kept, and K-QA verdicts become
        "covered" (1) versus not covered or contradicted (0): a contradiction is a defect, which
        the key-point statistics report separately from coverage.
        """
        value = self.check(raw)
        if self.kind == "keypoint":
            return 1.0 if value == 1.0 else 0.0
        if self.kind == "binary":
            return value
        # Exactly, on the numbers as written: in floats (0.6 - 0.2) / (1.0 - 0.2) is
        # 0.49999999999999994, which a >= 0.5 cut puts below the midpoint.
        lo, hi = _exact(self.lo), _exact(self.hi)
        return min(1.0, max(0.0, float((_exact(value) - lo) / (hi - lo))))

    def denormalize(self, value: float) -> float:
        """Map a 0..1 value back onto the raw scale (the inverse of :meth:`normalize` for ranges).

        For binary and key-point scales the 0..1 value is a probability of "correct"/"covered"
        and is returned unchanged.
        """
        if self.kind == "range":
            lo, hi = _exact(self.lo), _exact(self.hi)
            return float(lo + _exact(value) * (hi - lo))
        return value

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (kind, bounds, level, text)."""
        return self.model_dump()


def _exact(value: float) -> Fraction:
    """A float as the decimal it prints as (0.6 is 3/5, not the binary 0.59999999999999997...).

    Scores and bounds are written in decimal in the sets; their shortest repr is that decimal.
    """
    return Fraction(repr(float(value)))


@lru_cache(maxsize=256)
def parse_scale(text: str) -> Scale:
    """Parse a ``score_scale`` text into a :class:`Scale`.

    Understands the wordings of the shared sets ("binary: 1=correct, 0=incorrect",
    "mean of crowd ratings, 1-5 Likert", "0.2-1.0 (...)", "TREC LiveQA 1-4: ...",
    "key-point level ...: 1=Entailment, 0=Neutral, -1=Contradiction", "... (0-1)") as well as
    the short forms ``0/1``, ``1/0/-1``, ``1-5``, ``0-1``, ``0.2-1.0``.

    Args:
        text: The scale in words.

    Returns:
        The scale descriptor.

    Raises:
        ValueError: When no scale can be recognised or the range is empty.
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError("score_scale is empty")
    # Key-point first: its wording also contains "1=... 0=..." that would read as binary.
    if _KEYPOINT_RE.search(stripped):
        return Scale(kind="keypoint", lo=-1.0, hi=1.0, level="nominal", text=stripped)
    if _BINARY_RE.search(stripped):
        return Scale(kind="binary", lo=0.0, hi=1.0, level="nominal", text=stripped)
    match = _RANGE_RE.search(stripped)
    if match is None:
        raise ValueError(
            f"cannot read a scale from score_scale {stripped!r}: expected 'binary'/'0/1', "
            "'1/0/-1' (key points) or a range such as '1-5'"
        )
    lo, hi = float(match.group(1)), float(match.group(2))
    if not lo < hi:
        raise ValueError(f"score_scale {stripped!r} has an empty range {lo:g}-{hi:g}")
    level: KrippendorffLevel = "interval"
    integer_bounds = lo.is_integer() and hi.is_integer()
    if "likert" in stripped.lower() or (
        integer_bounds and hi - lo >= 2 and not _CONTINUOUS_WORDS.search(stripped)
    ):
        # Each annotator picks one of a few ordered levels, even when the set stores their mean.
        level = "ordinal"
    return Scale(kind="range", lo=lo, hi=hi, level=level, text=stripped)


# --- the saved mapping --------------------------------------------------------------------------

MAPPING_FORMAT_VERSION = 2
"""Version of the saved mapping format; bumped when the JSON changes shape (2: ``metric_config``,
the settings a ROUGE-L or BERTScore mapping belongs to)."""

READABLE_FORMAT_VERSIONS = (1, 2)
"""The formats this build reads: format 1 files (no ``metric_config``) keep the judge rule."""

METRIC_KEYED = ("rouge_l", "bertscore")
"""Metrics whose scores do not depend on the judge: their mappings are keyed by the metric's own
settings (:func:`metric_settings`), not by the judge configuration's hash."""

MappingKind = Literal["isotonic", "logistic"]
"""Isotonic regression for graded scales, logistic regression for binary labels."""

MIN_ITEMS = 4
"""Fewest joined items a mapping is fitted on."""


class MappingConfigMismatch(ConfigError):
    """A mapping was loaded or applied for a configuration it was not fitted on.

    For a coverage mapping, another judge configuration (``expected``/``got`` are hashes); for a
    ROUGE-L or BERTScore mapping, other settings of that metric (the settings as JSON).
    """

    def __init__(self, message: str, *, expected: str, got: str) -> None:
        super().__init__(message, field="judge_config_hash")
        self.expected = expected
        self.got = got


class CVErrors(BaseModel):
    """Cross-validated errors of one predictor on the normalised (0..1) human scale.

    Attributes:
        mae: Mean absolute error.
        brier: Mean squared error (the Brier score for 0/1 labels).
    """

    model_config = ConfigDict(frozen=True)

    mae: float
    brier: float


class CVFigures(BaseModel):
    """How well the mapping predicts held-out human scores, against baselines.

    Attributes:
        folds: Folds used.
        grouped: Whether each question's candidates stayed in one fold.
        primary: The headline error: ``mae`` for graded scales, ``brier`` for binary labels.
        mapped: Errors of the fitted mapping on held-out folds.
        constant: Errors of predicting the training folds' mean human score.
        identity: Errors of the raw judge score used as a prediction (clipped to 0..1); ``None``
            when judge scores fall outside 0..1 and so are not on the human scale at all.
        mae_raw: MAE of the mapping in raw human units (e.g. Likert points).
        seed: Seed of the fold shuffling.
    """

    model_config = ConfigDict(frozen=True)

    folds: int
    grouped: bool
    primary: Literal["mae", "brier"]
    mapped: CVErrors
    constant: CVErrors
    identity: CVErrors | None
    mae_raw: float
    seed: int


class CalibratedMapping(BaseModel):
    """A fitted monotone mapping, ready to save, load and apply.

    Attributes:
        format_version: Saved-format version.
        kind: ``isotonic`` or ``logistic``.
        judge_config_hash: Hash of the judge configuration the scores were graded with (it
            covers the embedded matcher's version and parameter digest). A coverage mapping
            belongs to it; a mapping with ``metric_config`` records it for information only.
        judge_version: The judge's own version (the embedded matcher's, e.g. ``matcher-v5``),
            or None for an LLM judge; shown so a person sees which judge it was fitted on.
        metric: The metric whose scores it maps (e.g. ``coverage``), when named.
        metric_config: For a ROUGE-L or BERTScore mapping, the settings of that metric it was
            fitted with (:func:`metric_settings`): the mapping belongs to them, whatever the
            judge. None for a judge metric, and in format 1 files.
        set_name: The calibration set it was fitted on.
        set_hash: SHA-256 of that set's file.
        n: Items it was fitted on.
        scale: The human scale (to convert a 0..1 prediction back to raw units).
        knots_x: Isotonic: judge-score knots (increasing).
        knots_y: Isotonic: mapped values at the knots (non-decreasing, 0..1).
        coef: Logistic: slope on the judge score.
        intercept: Logistic: intercept.
        cv: Cross-validated errors against baselines.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = MAPPING_FORMAT_VERSION
    kind: MappingKind
    judge_config_hash: str = Field(min_length=1)
    judge_version: str | None = None
    metric: str | None = None
    metric_config: dict[str, Any] | None = None
    set_name: str
    set_hash: str
    n: int = Field(ge=MIN_ITEMS)
    scale: Scale
    knots_x: list[float] | None = None
    knots_y: list[float] | None = None
    coef: float | None = None
    intercept: float | None = None
    cv: CVFigures

    @model_validator(mode="after")
    def _consistent(self) -> CalibratedMapping:
        # A hand-edited or foreign file fails here, with the field named, rather than at apply().
        if self.format_version not in READABLE_FORMAT_VERSIONS:
            raise ValueError(
                f"format_version {self.format_version} is not supported (this build reads "
                f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))})"
            )
        if self.kind == "isotonic":
            xs, ys = self.knots_x, self.knots_y
            if not xs or ys is None or len(xs) != len(ys):
                raise ValueError("isotonic mapping needs knots_x and knots_y of equal length")
            if any(b < a for a, b in itertools.pairwise(xs)) or any(
                b < a for a, b in itertools.pairwise(ys)
            ):
                raise ValueError("isotonic knots must be non-decreasing")
        elif self.coef is None or self.intercept is None:
            raise ValueError("logistic mapping needs coef and intercept")
        return self

    def check_config(self, judge_config_hash: str) -> None:
        """Refuse a judge configuration other than the one the mapping was fitted on.

        A mapping keyed by its metric's settings (``metric_config``) belongs to no judge: every
        hash passes here, and :meth:`check_for` compares the metric's settings.

        Raises:
            MappingConfigMismatch: When the hashes differ.
        """
        if self.metric_config is None and judge_config_hash != self.judge_config_hash:
            fitted = f" ({self.judge_version})" if self.judge_version else ""
            raise MappingConfigMismatch(
                f"this calibrated mapping was fitted for judge configuration "
                f"{self.judge_config_hash}{fitted} (set {self.set_name}), not "
                f"{judge_config_hash}: refit it on the new configuration's scores",
                expected=self.judge_config_hash,
                got=judge_config_hash,
            )

    def check_for(self, config: JudgeConfig) -> None:
        """Refuse a configuration whose scores of the mapped metric are not those it was fitted on.

        A mapping with ``metric_config`` (ROUGE-L, BERTScore) compares those settings with
        ``config``'s (:func:`metric_settings`), whatever the judge; any other compares judge
        configuration hashes (:meth:`check_config`). A ROUGE-L or BERTScore mapping of format 1
        (no ``metric_config``) keeps that judge rule, and its refusal says to refit it.

        Raises:
            MappingConfigMismatch: When the mapping does not belong to ``config``.
        """
        metric = mapped_metric(self.metric)
        if self.metric_config is not None:
            wanted = metric_settings(config, metric)
            if wanted != self.metric_config:
                differ = sorted(set(wanted) | set(self.metric_config))
                detail = ", ".join(
                    f"{key} {self.metric_config.get(key)!r}, now {wanted.get(key)!r}"
                    for key in differ
                    if wanted.get(key) != self.metric_config.get(key)
                )
                raise MappingConfigMismatch(
                    f"this calibrated {metric} mapping was fitted with other {metric} settings "
                    f"(set {self.set_name}): {detail}; refit it with these settings",
                    expected=json.dumps(self.metric_config, sort_keys=True),
                    got=json.dumps(wanted, sort_keys=True),
                )
            return
        try:
            self.check_config(config.config_hash())
        except MappingConfigMismatch as exc:
            if metric not in METRIC_KEYED:
                raise
            # A file from before mappings of these metrics were keyed by their own settings:
            # its judge hash cannot say which settings it had, so only a refit tells.
            raise MappingConfigMismatch(
                f"{exc}. This {metric} mapping predates mappings keyed by the metric's own "
                f"settings (format_version {self.format_version}): refit it with `bonusjudge "
                f"calibrate --metrics {metric}` and it applies whatever the judge",
                expected=exc.expected,
                got=exc.got,
            ) from exc

    def apply(self, score: float, *, judge_config_hash: str | None = None) -> float:
        """Map a judge score to the expected human score on 0..1.

        For binary labels the result is the probability that humans say correct/covered.

        Args:
            score: The judge's score.
            judge_config_hash: When given, the configuration that produced ``score``; must be
                the mapping's own.

        Raises:
            MappingConfigMismatch: When ``judge_config_hash`` is not the mapping's.
            ValueError: When ``score`` is not a finite number.
        """
        if judge_config_hash is not None:
            self.check_config(judge_config_hash)
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise ValueError(f"score must be a number, got {score!r}")
        if not math.isfinite(score):
            raise ValueError(f"score must be finite, got {score!r}")
        return float(self._predict(np.asarray([float(score)]))[0])

    def apply_raw(self, score: float, *, judge_config_hash: str | None = None) -> float:
        """Like :meth:`apply`, but on the raw human scale (e.g. 1-5 for a Likert set)."""
        return self.scale.denormalize(self.apply(score, judge_config_hash=judge_config_hash))

    def apply_many(
        self, scores: Sequence[float], *, judge_config_hash: str | None = None
    ) -> list[float]:
        """:meth:`apply` to several scores at once."""
        if judge_config_hash is not None:
            self.check_config(judge_config_hash)
        values = np.asarray(scores, dtype=np.float64)
        if not np.isfinite(values).all():
            raise ValueError("scores must be finite numbers")
        return [float(v) for v in self._predict(values)]

    def _predict(self, values: FloatArray) -> FloatArray:
        if self.kind == "isotonic":
            # np.interp clips outside the knots, as IsotonicRegression(out_of_bounds="clip").
            return np.asarray(
                np.interp(values, self.knots_x or [], self.knots_y or []), dtype=np.float64
            )
        z = (self.coef or 0.0) * values + (self.intercept or 0.0)
        return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)

    def save(self, path: str | Path) -> Path:
        """Write the mapping as indented JSON (keys sorted, so equal mappings give equal files)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n",
            encoding="utf-8",
        )
        return target


def load_mapping(path: str | Path, *, judge_config_hash: str | None) -> CalibratedMapping:
    """Load a saved mapping, checking that it belongs to ``judge_config_hash``.

    Args:
        path: The JSON file.
        judge_config_hash: The configuration the mapping will be applied to; ``None`` skips the
            check (for inspection only: say so explicitly, or check the whole configuration
            with :meth:`CalibratedMapping.check_for`). A ROUGE-L or BERTScore mapping keyed by
            its metric's settings passes any hash.

    Raises:
        InputError: When the file is unreadable or invalid (the message names the field).
        MappingConfigMismatch: When the mapping belongs to another configuration.
    """
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read calibrated mapping {file}: {exc}", field="path") from exc
    try:
        mapping = CalibratedMapping.model_validate(data)
    except ValidationError as exc:
        detail = every_error(exc, whole="mapping")
        raise InputError(f"invalid calibrated mapping {file}: {detail}", field="mapping") from exc
    if judge_config_hash is not None:
        mapping.check_config(judge_config_hash)
    return mapping


# --- applying a mapping while grading -----------------------------------------------------------

MAPPED_METRICS: dict[CalibratedMetric, MetricName] = {
    "coverage": "coverage",
    "expected_coverage": "coverage",
    "rouge_l": "rouge_l",
    "bertscore": "bertscore",
}
"""Metric a calibrated mapping may map -> the metric the run must compute for it."""


def mapped_metric(name: str | None) -> str:
    """The metric a mapping file names, without the calibration report's ``@judge`` suffix.

    Files written before mappings named their metric map thresholded coverage.
    """
    return (name or "coverage").split("@", 1)[0]


def mapping_for_config(config: JudgeConfig) -> CalibratedMapping | None:
    """The calibrated mapping ``config`` names, checked against it; None when it names none.

    Raises:
        ConfigError: the file is unreadable, was fitted for another configuration, or maps a
            metric this configuration does not compute (``field`` is ``calibration``).
    """
    if not config.calibration:
        return None
    try:
        mapping = load_mapping(config.calibration, judge_config_hash=None)
        mapping.check_for(config)
    except JudgeError as exc:
        raise ConfigError(f"calibration: {exc}", field="calibration") from exc
    metric = calibrated_metric(mapping)
    needs = MAPPED_METRICS[metric]
    # Only the embedded matcher reports an expected coverage; an LLM judge's is always null.
    if needs not in config.metrics or (metric == "expected_coverage" and not config.is_embedded):
        raise ConfigError(
            f"calibration: the mapping maps {metric}, which this configuration does not "
            f"compute (metrics {','.join(config.metrics)}, judge {config.model})",
            field="calibration",
        )
    return mapping


def metric_settings(config: JudgeConfig, metric: str) -> dict[str, Any]:
    """The settings ``metric``'s scores depend on under ``config``: what its mapping belongs to.

    ROUGE-L: its tokenizer (:data:`judge.metrics.rouge.TOKENIZER_NAMES`, versioned with its
    rules). BERTScore: the encoder, the packaged encoder's version, the layer, and idf and
    baseline rescaling (both off: bonusjudge computes bert-score's plain F1). Both: length
    control, which cuts the response before any metric reads it. The judge is not among them.

    Args:
        config: The run's configuration.
        metric: ``rouge_l`` or ``bertscore``.

    Raises:
        ValueError: ``metric`` is not one of :data:`METRIC_KEYED`.
    """
    if metric == "rouge_l":
        return {
            "metric": "rouge_l",
            "tokenizer": TOKENIZER_NAMES[config.rouge_segmenter],
            "length_control": config.length_control,
        }
    if metric == "bertscore":
        encoder = (config.encoder or "").strip() or DEFAULT_ENCODER
        return {
            "metric": "bertscore",
            "encoder": encoder,
            "encoder_version": _packaged_version(encoder),
            "layer": _bertscore_layer(encoder, config.encoder_layer),
            "idf": False,
            "baseline_rescale": False,
            "length_control": config.length_control,
        }
    raise ValueError(f"{metric!r} is not keyed by its own settings (one of {METRIC_KEYED})")


def _packaged_version(encoder: str) -> str | None:
    """The installed version of the packaged encoder (another version embeds differently)."""
    if encoder != DEFAULT_ENCODER:
        return None  # a local folder or a hub id: its name is all a mapping can record
    try:
        return importlib.metadata.version(DEFAULT_ENCODER)
    except importlib.metadata.PackageNotFoundError:
        return None


def _bertscore_layer(encoder: str, layer: int | None) -> int | None:
    """The layer BERTScore reads: the one given, else the encoder's default where it resolves.

    Resolved so that ``--encoder-layer 6`` and the packaged encoder's default (6) are one
    setting; only the model's config.json is read, never its weights.
    """
    if layer is not None:
        return layer
    from judge.metrics import resolve_encoder

    try:
        return resolve_encoder(encoder).layer
    except ValueError:  # not available here: grading would say so; keep what was asked
        return None


def calibrated_metric(mapping: CalibratedMapping) -> CalibratedMetric:
    """The metric ``mapping`` maps, as results name it (``calibrated_metric``).

    Raises:
        ConfigError: the mapping maps a metric grading does not compute.
    """
    metric = mapped_metric(mapping.metric)
    for known in MAPPED_METRICS:
        if known == metric:
            return known
    raise ConfigError(
        f"calibration: the mapping maps {mapping.metric!r}, which grading does not "
        f"compute (one of {', '.join(MAPPED_METRICS)})",
        field="calibration",
    )


def calibrated_score(
    mapping: CalibratedMapping,
    coverage: CoverageResult | None,
    rouge: RougeScore | None,
    bert: BertScore | None,
) -> float | None:
    """``mapping`` applied to the metric it maps, rounded; None when that metric has no value.

    The metric is :func:`calibrated_metric`; results carry its name beside the score.
    """
    metric = calibrated_metric(mapping)
    raw: float | None
    if metric == "coverage":
        raw = coverage.coverage if coverage is not None else None
    elif metric == "expected_coverage":
        raw = coverage.expected_coverage if coverage is not None else None
    elif metric == "rouge_l":
        raw = rouge.f1 if rouge is not None else None
    else:
        raw = bert.f1 if bert is not None else None
    if raw is None:
        return None
    return round(float(mapping.apply(raw)), 6)
