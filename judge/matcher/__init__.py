"""The embedded matcher: an offline judge of bonus-point coverage, with no LLM and no network.

Its modules, from the bottom up:

* :mod:`judge.matcher.text`: sentences, tokens, numbers, names and lexical features of texts;
* :mod:`judge.matcher.lexicon` and :mod:`judge.matcher.polarity`: word senses (WordNet, Cilin)
  and the negation/antonym rule;
* :mod:`judge.matcher.encoder`: the multilingual encoder for Chinese;
* :mod:`judge.matcher.types`, :mod:`judge.matcher.params`: the data types and the shipped,
  validated parameters;
* :mod:`judge.matcher.features`: a point's features against a response and the rules after
  the model;
* :mod:`judge.matcher.embedded`: the matcher itself (:class:`EmbeddedMatcher`, batched, with
  its encoders' vectors cached) and :func:`get_matcher`.

This package's names are its public interface; importing it loads numpy but no encoder (the
encoders load on first use).
"""

from judge.identity import MATCHER_VERSION
from judge.matcher.embedded import MATCHER_NAME, RECENT_TEXTS, EmbeddedMatcher, get_matcher
from judge.matcher.features import (
    NUMBER_CONFLICT_CAP,
    POLARITY_FACTOR,
    apply_constraints,
    embedded_point,
    point_features,
    texts_to_embed,
)
from judge.matcher.params import (
    FULL_FEATURES,
    LEXICAL_FEATURES,
    LONG_FEATURES,
    LONG_POINT_WORDS,
    MODEL_KINDS,
    MULTILINGUAL_FEATURES,
    NUMBER_RULE_MAX_WORDS,
    PARAMS_PATH,
    CascadeBand,
    CascadeBands,
    LinearModel,
    MatcherParams,
    ModelKind,
    load_params,
)
from judge.matcher.polarity import POLARITY_MAX_WORDS, response_polarity
from judge.matcher.text import split_sentences
from judge.matcher.types import MatchInput, PointFeatures, PointMatch

__all__ = [
    "FULL_FEATURES",
    "LEXICAL_FEATURES",
    "LONG_FEATURES",
    "LONG_POINT_WORDS",
    "MATCHER_NAME",
    "MATCHER_VERSION",
    "MODEL_KINDS",
    "MULTILINGUAL_FEATURES",
    "NUMBER_CONFLICT_CAP",
    "NUMBER_RULE_MAX_WORDS",
    "PARAMS_PATH",
    "POLARITY_FACTOR",
    "POLARITY_MAX_WORDS",
    "RECENT_TEXTS",
    "CascadeBand",
    "CascadeBands",
    "EmbeddedMatcher",
    "LinearModel",
    "MatchInput",
    "MatcherParams",
    "ModelKind",
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
