"""The matcher on CharToM-style paraphrases and opposites, English and Chinese (issue 19).

``data/matcher_paraphrase_cases.jsonl`` holds 48 items written for these tests: a question, the
reference, its bonus points, a correct paraphrase (other words, often pronouns for the names)
and an answer that reuses the names but says the opposite. Half of each language (``split``:
``heldout``) was only evaluated, never used to change the matcher; the other half (``tune``,
with the issue's own two cases) was looked at while building it.

The issue's goals are paraphrases averaging coverage >= 0.6, and >= 0.2 above the opposites.
English reaches the second since matcher-v4 (0.31 against 0.10, with WordNet synonyms and
antonyms), Chinese since matcher-v5 (0.27 against 0.04: a negation now counts where it falls on
its own word). The first is reached in neither language: the encoders put a paraphrase that
shares no content word about as close to the point as many wrong answers on the same topic, and
the human-rated sets the matcher is fitted on, whose people's share of answers credited sets
the threshold, do not credit such answers.
The unmet goals are kept as strict expected failures, so that reaching them shows up as a test
to update; what the matcher does reach is asserted plainly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from judge.matcher import EmbeddedMatcher, MatchInput, get_matcher
from judge.matcher import lexicon as matcher_lexicon
from judge.matcher.lexicon import Lexicon

CASES_PATH = Path(__file__).parent / "data" / "matcher_paraphrase_cases.jsonl"


def _cases() -> list[dict[str, Any]]:
    with CASES_PATH.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@dataclass(frozen=True)
class Scores:
    """Mean coverage (thresholded) and expected coverage of one group of answers."""

    coverage: float
    expected: float


@pytest.fixture(scope="module")
def matcher() -> EmbeddedMatcher:
    return get_matcher()


def _score(matcher: EmbeddedMatcher, cases: list[dict[str, Any]], kind: str) -> Scores:
    items = [
        MatchInput(c["question"], c["reference"], c["points"], c[kind], c["language"])
        for c in cases
    ]
    results = matcher.match(items)
    coverage = [sum(r.covered for r in res) / len(res) for res in results]
    expected = [sum(r.probability for r in res) / len(res) for res in results]
    return Scores(sum(coverage) / len(cases), sum(expected) / len(cases))


def _groups() -> Iterator[tuple[str, str]]:
    for language in ("en", "zh"):
        for split in ("tune", "heldout"):
            yield language, split


def _group(language: str, split: str | None = None) -> list[dict[str, Any]]:
    return [
        c for c in _cases() if c["language"] == language and (split is None or c["split"] == split)
    ]


def test_the_case_file_is_complete() -> None:
    cases = _cases()
    assert len(cases) == 48
    assert len({c["id"] for c in cases}) == 48
    for language, split in _groups():
        assert len(_group(language, split)) >= 11, (language, split)
    for case in cases:
        assert case["points"] and all(p.strip() for p in case["points"])
        assert case["paraphrase"].strip() and case["opposite"].strip()
    by_id = {c["id"]: c for c in cases}
    assert by_id["levin"]["paraphrase"] == "He is ashamed and longs to flee to the countryside."
    assert by_id["levin"]["points"] == [
        "Levin feels humiliated",
        "He wants to return to his estate",
    ]
    assert by_id["dantes"]["opposite"] == "Dantès wants to forgive those who betrayed him."
    assert by_id["levin"]["split"] == by_id["dantes"]["split"] == "tune"


def test_the_issue_case_of_an_opposite_with_the_same_names(matcher: EmbeddedMatcher) -> None:
    dantes = next(c for c in _cases() if c["id"] == "dantes")
    [[opposite], [paraphrase]] = matcher.match(
        [
            MatchInput(dantes["question"], dantes["reference"], dantes["points"], text, "en")
            for text in (dantes["opposite"], dantes["paraphrase"])
        ]
    )
    # matcher-v2: coverage 1.0 for "wants to forgive" against "wants revenge".
    assert not opposite.covered
    assert "antonym revenge / forgive" in opposite.rationale
    assert paraphrase.probability > opposite.probability


def test_opposites_are_rarely_covered(matcher: EmbeddedMatcher) -> None:
    # matcher-v2: 0.81 (English) and 0.71 (Chinese) of the opposites' points covered.
    for language in ("en", "zh"):
        assert _score(matcher, _group(language), "opposite").coverage <= 0.2, language


def test_english_paraphrases_are_credited_more_than_opposites(matcher: EmbeddedMatcher) -> None:
    paraphrase = _score(matcher, _group("en"), "paraphrase")
    opposite = _score(matcher, _group("en"), "opposite")
    # matcher-v2: paraphrases 0.08, opposites 0.81; matcher-v3: 0.23 and 0.17.
    assert paraphrase.coverage >= 0.3
    # The issue's goal, met in English since matcher-v4.
    assert paraphrase.coverage - opposite.coverage >= 0.2


def test_chinese_paraphrases_are_credited_more_than_opposites(matcher: EmbeddedMatcher) -> None:
    # matcher-v3: paraphrases 0.19 (no synonyms), opposites 0.13; matcher-v4: 0.29 and 0.13;
    # matcher-v5: 0.27 (multilingual encoder) and 0.04, a negation counting where it falls on
    # its own word (毫无悔意 against 非常后悔; 相信 ... 没有杀害 against 怀疑 ... 杀害: the
    # negation is on the killing, not on the pair).
    paraphrase = _score(matcher, _group("zh"), "paraphrase")
    opposite = _score(matcher, _group("zh"), "opposite")
    assert paraphrase.coverage >= 0.25
    # The issue's goal.
    assert paraphrase.coverage - opposite.coverage >= 0.2


def _auroc(positives: list[float], negatives: list[float]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def _point_probabilities(
    matcher: EmbeddedMatcher, cases: list[dict[str, Any]], answers: list[str]
) -> list[float]:
    items = [
        MatchInput(c["question"], c["reference"], c["points"], answer, c["language"])
        for c, answer in zip(cases, answers, strict=True)
    ]
    return [r.probability for res in matcher.match(items) for r in res]


def test_the_multilingual_encoder_tells_chinese_paraphrases_from_wrong_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import judge.matcher.embedded

    cases = _group("zh")
    # A wrong answer on the same kind of question: another case's reference answer.
    wrong = [cases[(i + 7) % len(cases)]["reference"] for i in range(len(cases))]
    paraphrases = [c["paraphrase"] for c in cases]
    separation = {}
    for available in (True, False):
        monkeypatch.setattr(judge.matcher.embedded, "multilingual_available", lambda a=available: a)
        # The shared matcher: the Chinese paraphrases' vectors, when an earlier test embedded
        # them, are recalled rather than embedded again (the same vectors).
        matcher = get_matcher()
        separation[available] = _auroc(
            _point_probabilities(matcher, cases, paraphrases),
            _point_probabilities(matcher, cases, wrong),
        )
    # matcher-v5: 0.90 with the encoder, 0.79 on characters alone.
    assert separation[True] >= 0.85
    assert separation[True] >= separation[False] + 0.05


def _clear_lexicon_caches() -> None:
    # Every cache that holds what a table said, so no answer outlives the table it came from.
    for cached in (matcher_lexicon.base_forms, matcher_lexicon._groups, matcher_lexicon.senses_of):
        cached.cache_clear()


@contextmanager
def _lexicons(**tables: Lexicon) -> Iterator[None]:
    """Replace the loaded lexicons for the block, then restore them."""
    saved = dict(matcher_lexicon._tables)
    matcher_lexicon._tables.update(tables)
    _clear_lexicon_caches()
    try:
        yield
    finally:
        matcher_lexicon._tables.clear()
        matcher_lexicon._tables.update(saved)
        _clear_lexicon_caches()


def test_synonyms_raise_the_paraphrases_and_leave_the_opposites() -> None:
    # The same cases with the lexicons emptied: what WordNet and Cilin bring, in both languages.
    with_synonyms = {
        language: _score(get_matcher(), _group(language), "paraphrase").coverage
        for language in ("en", "zh")
    }
    empty = Lexicon(groups={}, antonyms={}, forms={}, members={}, longest=0)
    with _lexicons(en=empty, zh=empty):
        without = {
            language: _score(get_matcher(), _group(language), "paraphrase").coverage
            for language in ("en", "zh")
        }
    for language in ("en", "zh"):
        assert with_synonyms[language] >= without[language] + 0.05, (language, without)


@pytest.mark.xfail(
    strict=True,
    reason="issue 19 goal not reached: paraphrases average 0.31 (English) and 0.27 (Chinese) "
    "coverage, not 0.6",
)
@pytest.mark.parametrize("language", ["en", "zh"])
def test_goal_paraphrases_average_coverage_of_at_least_0_6(
    matcher: EmbeddedMatcher, language: str
) -> None:
    assert _score(matcher, _group(language), "paraphrase").coverage >= 0.6
