"""English word knowledge for the embedded matcher: which words share a sense, which oppose.

The sentence encoder places a paraphrase that shares no word with a point about as close as any
answer on the same topic, so word recall is the matcher's sharpest evidence; but recall of the
point's own words misses "ashamed" for "embarrassed" and "discovers" for "learns". This module
answers, from a table derived from Princeton WordNet 3.0 (``judge/data/lexicon_en.json``, built
by ``python -m calibration.fit.lexicon``):

* :func:`related`: whether two words share one of their common senses (synonyms, an adjective
  and the one it is similar to, a word and its derived forms);
* :func:`opposed`: whether two words are antonyms (direct, or an adjective and its head's
  antonym), which the polarity rule (:mod:`judge.matcher.polarity`) adds to its own pairs.

For Chinese, whose words the matcher does not segment (each character is a token), a second
table holds the synonym groups of the extended Tongyici Cilin (``judge/data/lexicon_zh.json``):
:func:`align_chinese` writes the point's own word where the response uses a synonym of it
(觉得很丢脸 stays, 讨厌 becomes 厌恶 for a point about 厌恶), so the character features see the
shared meaning.

Inflected words are reduced to their base forms first, by WordNet's own rules (its exception
lists, then its suffix substitutions), so "dreads" finds "dread" and "fled" finds "flee".

Lexical only: a sense shared in WordNet is not always the sense a sentence uses,
which is why the matcher uses it as one feature among others, fitted on the human-rated sets.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from core.errors import ConfigError
from core.gc_pause import gc_paused
from judge.identity import LEXICON_EN_FILE, LEXICON_ZH_FILE

__all__ = [
    "LEXICON_PATH",
    "LEXICON_VERSION",
    "LEXICON_ZH_PATH",
    "Lexicon",
    "align_chinese",
    "base_forms",
    "get_lexicon",
    "has_sense",
    "load_lexicon",
    "opposed",
    "related",
    "senses_of",
]

LEXICON_PATH = LEXICON_EN_FILE
"""The shipped table (built by ``python -m calibration.fit.lexicon``)."""

LEXICON_ZH_PATH = LEXICON_ZH_FILE
"""The shipped Chinese table (Cilin synonym groups; same builder)."""

LEXICON_VERSION = "lexicon-v1"
"""Version of the tables' recipe (WordNet: 3 senses per part of speech); the files must say it."""

# WordNet's morphological substitutions (the "morphy" rules), all parts of speech together:
# (suffix, replacement). A candidate counts only when the table knows it.
_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("s", ""),
    ("ses", "s"),
    ("xes", "x"),
    ("zes", "z"),
    ("ches", "ch"),
    ("shes", "sh"),
    ("men", "man"),
    ("ies", "y"),
    ("es", "e"),
    ("es", ""),
    ("ed", "e"),
    ("ed", ""),
    ("ing", "e"),
    ("ing", ""),
    ("er", ""),
    ("est", ""),
    ("er", "e"),
    ("est", "e"),
)


@dataclass(frozen=True)
class Lexicon:
    """A loaded table.

    Attributes:
        groups: Word -> numbers of the sense groups it belongs to.
        antonyms: Word -> its antonyms (English only).
        forms: Irregular form -> its base words (English only).
        members: Group number -> its words (what :func:`align_chinese` looks up).
        longest: Characters in the longest word.
    """

    groups: dict[str, frozenset[int]]
    antonyms: dict[str, frozenset[str]]
    forms: dict[str, tuple[str, ...]]
    members: dict[int, tuple[str, ...]]
    longest: int

    def knows(self, word: str) -> bool:
        """Whether the word is in the table (as a base word)."""
        return word in self.groups or word in self.antonyms


_load_lock = threading.Lock()
_tables: dict[str, Lexicon] = {}


# Tens of thousands of lists and frozensets, no cycle among them: with the collector on, loading
# beside torch took three times as long.
@gc_paused()
def load_lexicon(path: Path = LEXICON_PATH) -> Lexicon:
    """Read a lexicon table (the shipped ones are read once per process, by :func:`get_lexicon`).

    Args:
        path: The table.

    Returns:
        The lexicon.

    Raises:
        ConfigError: when the file is missing, corrupt, or of another version.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"matcher lexicon {path} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != LEXICON_VERSION:
        found = data.get("version") if isinstance(data, dict) else None
        raise ConfigError(
            f"matcher lexicon {path} is version {found!r}, expected {LEXICON_VERSION!r}: "
            "rebuild it with python -m calibration.fit.lexicon"
        )
    try:
        groups = {str(w): frozenset(int(g) for g in gs) for w, gs in data["groups"].items()}
        antonyms = {str(w): frozenset(str(a) for a in ws) for w, ws in data["antonyms"].items()}
        forms = {str(f): tuple(str(b) for b in bs) for f, bs in data["forms"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"matcher lexicon {path} is malformed: {exc!r}") from exc
    members: dict[int, list[str]] = {}
    for word, numbers in groups.items():
        for number in numbers:
            members.setdefault(number, []).append(word)
    return Lexicon(
        groups=groups,
        antonyms=antonyms,
        forms=forms,
        members={n: tuple(ws) for n, ws in members.items()},
        longest=max((len(w) for w in groups), default=0),
    )


def get_lexicon(language: Literal["en", "zh"] = "en") -> Lexicon:
    """A shipped lexicon, loaded on first use (tenths of a second) and kept for the process.

    Args:
        language: ``"en"`` (WordNet) or ``"zh"`` (Cilin).

    Returns:
        The lexicon.

    Raises:
        ConfigError: when the shipped file is missing or corrupt.
    """
    with _load_lock:
        table = _tables.get(language)
        if table is None:
            table = load_lexicon(LEXICON_PATH if language == "en" else LEXICON_ZH_PATH)
            _tables[language] = table
        return table


@lru_cache(maxsize=65536)
def base_forms(word: str) -> tuple[str, ...]:
    """The table's base words for a word: itself, its irregular base, its suffix reductions.

    Args:
        word: A case-folded word.

    Returns:
        The base words the table knows, the word itself first when known; empty when none.
    """
    lexicon = get_lexicon()
    found: list[str] = []
    if lexicon.knows(word):
        found.append(word)
    found.extend(lexicon.forms.get(word, ()))
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix) + 1:
            base = word[: len(word) - len(suffix)] + replacement
            if lexicon.knows(base):
                found.append(base)
    # A doubled consonant before -ed/-ing: "stopped" -> "stop".
    for suffix in ("ed", "ing"):
        stem = word[: -len(suffix)]
        doubled = word.endswith(suffix) and len(stem) > 2 and stem[-1] == stem[-2]
        if doubled and lexicon.knows(stem[:-1]):
            found.append(stem[:-1])
    return tuple(dict.fromkeys(found))


@lru_cache(maxsize=65536)
def _groups(word: str) -> frozenset[int]:
    lexicon = get_lexicon()
    groups: frozenset[int] = frozenset()
    for base in base_forms(word):
        groups |= lexicon.groups.get(base, frozenset())
    return groups


def related(a: str, b: str) -> bool:
    """Whether two case-folded words share a common sense (or are the same base word).

    Args:
        a: A word.
        b: Another word.

    Returns:
        True for "ashamed"/"embarrassed", "son"/"boy", "learns"/"discovered"; False for words
        the table does not know.
    """
    return has_sense(a, senses_of(frozenset((b,))))


@lru_cache(maxsize=1024)
def senses_of(words: frozenset[str]) -> tuple[frozenset[int], frozenset[str]]:
    """The sense groups and base forms of a set of words, together (cached per set).

    A response is searched once for all the words of its points: ``related(word, h)`` for some
    ``h`` in ``words`` is :func:`has_sense` of ``word`` in this index.

    Args:
        words: Case-folded words (a response's content words).

    Returns:
        The union of their sense groups, and of their base forms.
    """
    groups: set[int] = set()
    bases: set[str] = set()
    for word in words:
        groups.update(_groups(word))
        bases.update(base_forms(word))
        bases.add(word)
    return frozenset(groups), frozenset(bases)


def has_sense(word: str, index: tuple[frozenset[int], frozenset[str]]) -> bool:
    """Whether some word of an index (:func:`senses_of`) is :func:`related` to ``word``."""
    groups, bases = index
    if word in bases or not bases.isdisjoint(base_forms(word)):
        return True
    return not groups.isdisjoint(_groups(word))


def opposed(a: str, b: str) -> bool:
    """Whether two case-folded words are antonyms in the table ("proud"/"humble").

    Args:
        a: A word.
        b: Another word.

    Returns:
        True when a base form of one lists a base form of the other as its antonym.
    """
    lexicon = get_lexicon()
    b_bases = set(base_forms(b))
    if not b_bases:
        return False
    return any(
        not lexicon.antonyms.get(base, frozenset()).isdisjoint(b_bases) for base in base_forms(a)
    )


def align_chinese(point: str, response: str) -> str:
    """The response with the point's own Chinese words where it uses their Cilin synonyms.

    Each word of the table found in the point (two characters or more) is looked up; a synonym
    of it that the response holds, and the point does not, is replaced by the point's word,
    longest synonyms first. Only the lexical features read the result: polarity and evidence
    keep the response as written.

    Args:
        point: The bonus point.
        response: The response.

    Returns:
        The response, rewritten where a synonym was found (unchanged otherwise).
    """
    lexicon = get_lexicon("zh")
    # In the point's order (longest first at each place), not a set's: when one synonym serves
    # two of the point's words, the first claims it, the same in every process (a set of
    # strings iterates in an order that changes with the hash seed).
    words = dict.fromkeys(
        point[i : i + n]
        for i in range(len(point))
        for n in range(min(lexicon.longest, len(point) - i), 1, -1)
        if point[i : i + n] in lexicon.groups
    )
    replacements: dict[str, str] = {}
    for word in words:
        for number in lexicon.groups[word]:
            for synonym in lexicon.members[number]:
                if synonym != word and synonym not in point and synonym in response:
                    replacements.setdefault(synonym, word)
    for synonym in sorted(replacements, key=len, reverse=True):
        response = response.replace(synonym, replacements[synonym])
    return response
