"""The embedded matcher's text analysis: sentences, word tokens, numbers, names, lexical features.

Everything here is pure string work (rapidfuzz and numpy, no encoder), identical for English and
Chinese: ``judge.matcher`` turns these lexical features and the encoder's similarities into one
feature row per (point, response), and ``calibration.fit.matcher`` builds its training rows with
the same code, so what is fitted is what runs.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rapidfuzz import fuzz, process

# split_sentences lives in core.text (standard library only): an estimate splits a reference
# as the matcher does without loading the matcher and numpy. Re-exported here, where the
# matcher's other text functions are.
from core.text import normalize, split_sentences
from judge.matcher.lexicon import has_sense, senses_of

__all__ = [
    "Lexical",
    "fuzzy_recall",
    "is_content",
    "lexical_features",
    "names_in",
    "neutralise_names",
    "numbers_in",
    "split_clauses",
    "split_sentences",
    "word_tokens",
]

# Function words carry no content: a point's recall is measured on the rest. Kept short and
# embedded (no NLTK data download at run time).
# Copular verbs are function words too: "Levin feels humiliated" and "he is ashamed" state the
# same thing, and a point's "feels" is no word a paraphrase must repeat.
# Negations are left out on purpose: dropping them would make "is not contagious" match "is
# contagious"; as content words, their absence lowers recall.
_EN_STOPWORD_TEXT = """a about above after again against all am an and any are as at be because
    been before being below between both but by can could did do does doing down during each few
    for from further had has have having he her here hers herself him himself his how i if in into
    is it its itself just me more most my myself of off on once only or other our ours ourselves
    out over own same she should so some such than that the their theirs them themselves then
    there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves also may might
    must shall s t d ll m re ve feel feels felt seem seems seemed become becomes became"""
_EN_STOPWORDS = frozenset(_EN_STOPWORD_TEXT.split())
_ZH_STOPWORDS = frozenset("的了是在和也就都而及与着或之其这那个们把被从对于为以将")
# Number words the response may use for a point's digits ("two sons" = "2 sons"). Left out on
# purpose: "one" (mostly a pronoun), ordinals ("second" is also a unit of time) and multipliers
# ("two hundred" would read as 2 and 100, neither of which is 200).
_NUMBER_WORDS = {
    "zero": "0", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
    "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13",
    "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17", "eighteen": "18",
    "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40", "fifty": "50",
}  # fmt: skip
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")
_TOKEN_RE = re.compile(r"[^\W_]+")
# Ideographs and kana (the ranges of core.text.is_cjk that hold letters): one token per
# character, since those scripts do not separate words; any other letter/digit run is a word.
_CJK_LETTERS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_TOKEN_SPLIT_RE = re.compile(rf"[{_CJK_LETTERS}]|[^\W_{_CJK_LETTERS}]+")
# Word-level fuzzy matching: 85 accepts inflections ("effect"/"effects", "medication"/
# "medications") and spelling slips, and rejects different short words ("cat"/"car" = 67).
_FUZZY_WORD_CUTOFF = 85.0
# Texts longer than this are cut before the quadratic rapidfuzz ratios; the encoder truncates on
# its own, and coverage evidence in the first 4k characters is the evidence a reader sees too.
_FUZZ_CHAR_LIMIT = 4000


def word_tokens(text: str) -> list[str]:
    """Case-folded word tokens; each CJK character is a token of its own, punctuation dropped."""
    return _TOKEN_SPLIT_RE.findall(normalize(text))


def is_content(token: str) -> bool:
    """Whether a token carries content (not a stopword, not a lone Latin letter)."""
    if token in _EN_STOPWORDS or token in _ZH_STOPWORDS:
        return False
    return not (len(token) == 1 and token.isascii() and token.isalpha())


def numbers_in(text: str) -> set[str]:
    """Numbers in a text, digits or number words, canonicalised: "1,000" -> "1000", "two" -> "2"."""
    lowered = normalize(text)
    found = {
        re.sub(r",(?=\d{3}\b)", "", value).rstrip(".,") for value in _NUMBER_RE.findall(lowered)
    }
    found.update(_NUMBER_WORDS[t] for t in _TOKEN_RE.findall(lowered) if t in _NUMBER_WORDS)
    return found


def names_in(text: str) -> list[str]:
    """Capitalised words in ``text`` that look like names ("Escitalopram", "FDA", "Seville").

    The first word of a sentence is capitalised anyway, so it only counts in very short texts
    (answers such as "David Seville"), where it is almost always a name.
    """
    result: list[str] = []
    for sentence in split_sentences(text) or [text]:
        raw = re.findall(r"[^\W\d_]+", sentence)
        for index, word in enumerate(raw):
            if not word[0].isupper() or normalize(word) in _EN_STOPWORDS:
                continue
            if index == 0 and len(raw) > 3:
                continue
            result.append(normalize(word))
    return list(dict.fromkeys(result))


def _found(needles: Sequence[str], haystack: Sequence[str]) -> set[str]:
    """The distinct ``needles`` found in ``haystack``, exactly or by fuzzy word match (>= 85)."""
    hay = set(haystack)
    if not hay:
        return set()
    unique = list(dict.fromkeys(needles))
    found = {n for n in unique if n in hay}
    # Only words of letters, longer than 3, are matched fuzzily: a digit anywhere means a
    # number or code, which must match exactly ("1865" must not find "1866").
    fuzzy_missing = [n for n in unique if n not in found and len(n) > 3 and n.isalpha()]
    if fuzzy_missing:
        candidates = [h for h in hay if len(h) > 3 and h.isalpha()]
        if candidates:
            scores = process.cdist(
                fuzzy_missing, candidates, scorer=fuzz.ratio, score_cutoff=_FUZZY_WORD_CUTOFF
            )
            hits = np.asarray(scores).max(axis=1) > 0
            found.update(n for n, hit in zip(fuzzy_missing, hits, strict=True) if hit)
    return found


def _share(needles: Sequence[str], found: set[str]) -> float:
    """Share of the distinct ``needles`` in ``found`` (1.0 for no needles)."""
    unique = set(needles)
    return len(unique & found) / len(unique) if unique else 1.0


def fuzzy_recall(needles: Sequence[str], haystack: Sequence[str]) -> float:
    """Share of ``needles`` found in ``haystack``, exactly or by fuzzy word match (>= 85)."""
    return _share(needles, _found(needles, haystack)) if needles else 1.0


def synonym_recall(
    needles: Sequence[str], haystack: Sequence[str], found: set[str] | None = None
) -> float:
    """Share of ``needles`` found in ``haystack``, also through a word of common sense.

    A needle counts as :func:`fuzzy_recall` finds it, or when a content word of the haystack
    shares a common sense with it (:func:`judge.matcher.lexicon.related`: "ashamed" for
    "embarrassed"). Only English words take the second route (the lexicon is English; a CJK
    character or a number must be found as itself).

    Args:
        needles: The point's words.
        haystack: The response's words.
        found: The needles already found as :func:`fuzzy_recall` finds them, when the caller
            has them (the same set; saves a second search).

    Returns:
        The share, 1.0 for no needles.
    """
    unique = set(needles)
    if not unique:
        return 1.0
    found = set(_found(needles, haystack) if found is None else found)
    missing = [n for n in unique - found if n.isalpha() and n.isascii()]
    if missing:
        index = senses_of(
            frozenset(h for h in haystack if h.isalpha() and h.isascii() and is_content(h))
        )
        found.update(n for n in missing if has_sense(n, index))
    return len(found) / len(unique)


def _bigrams(tokens: Sequence[str]) -> set[tuple[str, str]]:
    """Adjacent token pairs."""
    return set(itertools.pairwise(tokens))


@dataclass
class Lexical:
    """Lexical features of one point against one response."""

    values: dict[str, float]
    best_sentence: int | None
    conflicting_numbers: tuple[str, ...]


def lexical_features(
    point: str, response: str, question: str, siblings: Sequence[str], sentences: Sequence[str]
) -> Lexical:
    """Compute the lexical features (identical code for English and Chinese).

    ``siblings`` are the other bonus points of the same question: words they share with the
    point ("side effects of Escitalopram include ...") say nothing about which of them the
    response covers, so ``distinct_recall`` leaves them out.
    """
    point_tokens = word_tokens(point)
    response_tokens = word_tokens(response)
    question_tokens = set(word_tokens(question))
    content = [t for t in point_tokens if is_content(t)] or point_tokens
    novel = [t for t in content if t not in question_tokens] or content
    sibling_tokens = {t for other in siblings for t in word_tokens(other)}
    distinct = [t for t in novel if t not in sibling_tokens] or novel

    point_text = " ".join(point_tokens)[:_FUZZ_CHAR_LIMIT]
    response_text = " ".join(response_tokens)[:_FUZZ_CHAR_LIMIT]
    if point_text and response_text:
        partial = fuzz.partial_ratio(point_text, response_text) / 100.0
        token_set = fuzz.token_set_ratio(point_text, response_text) / 100.0
    else:
        partial = token_set = 0.0

    # Each word is found or not on its own, so the novel and distinct words (subsets of the
    # content words) are looked up once, with them.
    content_found = _found(content, response_tokens)
    content_recall = _share(content, content_found)
    point_bigrams = _bigrams(point_tokens)
    bigram_recall = (
        len(point_bigrams & _bigrams(response_tokens)) / len(point_bigrams)
        if point_bigrams
        else content_recall
    )
    point_numbers = numbers_in(point)
    response_numbers = numbers_in(response)
    missing_numbers = point_numbers - response_numbers
    number_missing = len(missing_numbers) / len(point_numbers) if point_numbers else 0.0
    # A missing number is a conflict when the response states other numbers instead: then it
    # says something else, which is an error, not a different wording.
    conflicting = (
        tuple(sorted(missing_numbers))
        if missing_numbers and response_numbers - point_numbers
        else ()
    )
    # Names the question gives need not be repeated: an answer says "he" for "Levin" when the
    # question asked about Levin.
    names = [n for n in names_in(point) if n not in question_tokens]
    name_missing = 1.0 - fuzzy_recall(names, word_tokens(response)) if names else 0.0
    # log(1 + response words) - log(1 + point words): long responses earn high recall and
    # partial ratios by chance, so the model needs to know how much text it searched.
    length_ratio = math.log1p(len(response_tokens)) - math.log1p(len(point_tokens))

    best_sentence: int | None = None
    sentence_recall = 0.0
    if sentences:
        # Lexical evidence sentence: the one covering most of the point's content words. A long
        # response gathers a point's words from everywhere by chance; one sentence that holds
        # them all is real evidence.
        recalls = [fuzzy_recall(content, word_tokens(s)) for s in sentences]
        best_sentence = int(np.argmax(recalls))
        sentence_recall = recalls[best_sentence]
    novel_found = content_found & set(novel)
    response_content = [t for t in response_tokens if is_content(t)] or response_tokens
    # Share of the response's content words found in the point: with recall, an F1 that tells
    # "says exactly this" from "says this among much else" (answer-level ratings care).
    precision = fuzzy_recall(response_content, point_tokens) if response_content else 0.0
    token_f1 = (
        2 * precision * content_recall / (precision + content_recall)
        if precision + content_recall > 0
        else 0.0
    )

    # The point's words, in order, inside the response: the strongest single piece of
    # evidence for short answers (a wrong answer almost never contains the right one).
    exact = bool(point_text) and f" {point_text} " in f" {' '.join(response_tokens)} "
    return Lexical(
        values={
            "exact_match": 1.0 if exact else 0.0,
            "fuzz_partial": partial,
            "fuzz_token_set": token_set,
            "content_recall": content_recall,
            "sentence_recall": sentence_recall,
            "token_f1": token_f1,
            "novel_recall": _share(novel, novel_found),
            "distinct_recall": _share(distinct, content_found),
            "synonym_recall": synonym_recall(novel, response_tokens, novel_found),
            "bigram_recall": bigram_recall,
            "number_missing": number_missing,
            "name_missing": name_missing,
            "length_ratio": length_ratio,
        },
        best_sentence=best_sentence,
        conflicting_numbers=conflicting,
    )


# Clause boundaries inside a sentence: commas, colons, dashes and parentheses (Latin and CJK),
# and the conjunctions that join two statements. The polarity check reads the clause that
# states the point: in "X is contagious and not dangerous" the "not" is about another claim.
_CLAUSE_RE = re.compile(
    r"\s*[,:()\u2013\u2014，、：（）]\s*"
    r"|\s+(?=(?:and|but|so|because|while|whereas|although|though|yet|since|or)\s)"
    r"|(?=(?:而且|但是|可是|所以|因为|并且|于是|不过|然而|却))",
    re.IGNORECASE,
)
# A clause of fewer words (or CJK characters) than this joins its neighbour: "and so" or "如果"
# alone is no statement.
_MIN_CLAUSE_TOKENS = 3


def split_clauses(sentence: str) -> list[str]:
    """Split one sentence into clauses (commas, colons, dashes, conjunctions; CJK alike).

    Args:
        sentence: One sentence (see :func:`split_sentences`).

    Returns:
        The clauses, stripped, each of at least three tokens (a shorter piece joins the one
        before it, or the next one at the start); the sentence itself when it has one clause.
    """
    pieces = [p.strip() for p in _CLAUSE_RE.split(sentence) if p and p.strip()]
    clauses: list[str] = []
    for piece in pieces:
        if clauses and (
            len(word_tokens(clauses[-1])) < _MIN_CLAUSE_TOKENS
            or len(word_tokens(piece)) < _MIN_CLAUSE_TOKENS
        ):
            clauses[-1] = f"{clauses[-1]} {piece}"
        else:
            clauses.append(piece)
    return clauses or [sentence.strip()]


_MALE = frozenset({"he", "him", "his", "himself"})
_FEMALE = frozenset({"she", "her", "hers", "herself"})


def neutralise_names(point: str, response: str, given: Sequence[str]) -> str:
    """Replace the question's names that the response never uses by the response's pronoun.

    Names the response does use stay, so "Levin is ashamed" is compared as it is; a response
    with no gendered pronoun leaves the point as it is (nothing says who stands for the name).

    Args:
        point: The bonus point.
        response: The response.
        given: The question's names, case-folded (:func:`names_in` of the question).

    Returns:
        The point with those names replaced by "he"/"she" (possessives by "his"/"her"), after
        the pronouns the response uses most; the point itself when nothing is replaced.
    """
    if not given:
        return point
    words = word_tokens(response)
    present = set(words)
    absent = [n for n in given if n not in present and n.isalpha()]
    if not absent:
        return point
    # Subject pronouns decide; all gendered pronouns break a tie ("She finds him arrogant").
    female = 2 * words.count("she") + sum(1 for w in words if w in _FEMALE)
    male = 2 * words.count("he") + sum(1 for w in words if w in _MALE)
    if female == male == 0:
        return point
    subject, possessive = ("she", "her") if female > male else ("he", "his")
    out = point
    for name in absent:
        out = re.sub(rf"\b{re.escape(name)}(?:'s|\u2019s)\b", possessive, out, flags=re.IGNORECASE)
        out = re.sub(rf"\b{re.escape(name)}\b", subject, out, flags=re.IGNORECASE)
    if out[:1].islower():
        out = out[:1].upper() + out[1:]
    return out
