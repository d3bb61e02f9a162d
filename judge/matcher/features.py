"""The embedded matcher's features of one point against one response.

Also the rules applied after the model reads them: a conflicting number caps the probability,
a reversed polarity scales it down.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from core.text import count_words
from judge.matcher.encoder import (
    to_english_scale,
)
from judge.matcher.lexicon import align_chinese
from judge.matcher.params import (
    LEXICAL_FEATURES,
    LONG_POINT_WORDS,
    NUMBER_RULE_MAX_WORDS,
)
from judge.matcher.polarity import (
    response_polarity,
)
from judge.matcher.text import (
    fuzzy_recall,
    is_content,
    lexical_features,
    names_in,
    neutralise_names,
    numbers_in,
    split_sentences,
    word_tokens,
)
from judge.matcher.types import MatchInput, PointFeatures

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
            (:func:`judge.matcher.encoder.to_english_scale`; 1 for English).

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
(see :mod:`judge.matcher.polarity`): low enough that such a point is not covered however close
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
