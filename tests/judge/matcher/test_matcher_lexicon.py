"""The matcher's word lexicons: WordNet synonyms and antonyms, Cilin synonyms (issue 19)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import ConfigError
from judge.matcher.lexicon import (
    LEXICON_VERSION,
    align_chinese,
    base_forms,
    get_lexicon,
    load_lexicon,
    opposed,
    related,
)
from judge.matcher.polarity import polarity_flip
from judge.matcher.text import fuzzy_recall, split_sentences, synonym_recall


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("embarrassed", "ashamed"),
        ("son", "boy"),
        ("learns", "discovered"),  # inflections on both sides
        ("proud", "arrogant"),  # an adjective and the head it is similar to
        ("regrets", "repents"),
        ("ridiculous", "absurd"),
        ("refuses", "declined"),
    ],
)
def test_words_of_a_common_sense_are_related(a: str, b: str) -> None:
    assert related(a, b)
    assert related(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [("cat", "car"), ("take", "have"), ("make", "get"), ("proud", "humble"), ("xqzt", "xqzt2")],
)
def test_other_words_are_not(a: str, b: str) -> None:
    # "take" has 42 verb senses: only the 3 most frequent count, or it would match everything.
    assert not related(a, b)


def test_base_forms_use_the_exception_lists_and_the_suffix_rules() -> None:
    assert "flee" in base_forms("fled")
    assert "stop" in base_forms("stopped")
    assert "discover" in base_forms("discovered")
    assert base_forms("xqzt") == ()


@pytest.mark.parametrize(
    ("a", "b"),
    [("proud", "humble"), ("accept", "refused"), ("loves", "hated"), ("rich", "poor")],
)
def test_antonyms_are_opposed_both_ways(a: str, b: str) -> None:
    assert opposed(a, b)
    assert opposed(b, a)


def test_synonyms_are_not_opposed() -> None:
    assert not opposed("embarrassed", "ashamed")
    assert not opposed("proud", "arrogant")


def test_synonym_recall_counts_synonyms_where_word_recall_does_not() -> None:
    response = ["he", "is", "ashamed", "of", "joe"]
    assert fuzzy_recall(["embarrassed", "joe"], response) == 0.5
    assert synonym_recall(["embarrassed", "joe"], response) == 1.0
    # Numbers and CJK characters must be found as themselves.
    assert synonym_recall(["1865"], ["1866"]) == 0.0
    assert synonym_recall(["羞", "辱"], ["丢", "脸"]) == 0.0


def test_the_polarity_rule_reads_wordnet_antonyms_beyond_its_own_pairs() -> None:
    # large / small and increase / decrease are in none of the module's own pairs.
    cue = polarity_flip("The house they bought was large", "The house they bought was small")
    assert cue.flipped and cue.antonym == "large / small"
    cue = polarity_flip("Taxes increased after the war", "Taxes decreased after the war")
    assert cue.flipped and cue.antonym == "increased / decreased"
    # A word on both sides is no flip: the clause says both.
    assert not polarity_flip("The house was large", "The house was large, not small").antonym


def test_chinese_synonyms_are_written_as_the_points_words() -> None:
    assert align_chinese("宝玉厌恶仕途经济", "他讨厌追求功名利禄那一套。") == (
        "他厌恶追求功名利禄那一套。"
    )
    assert "傲慢" in align_chinese("伊丽莎白认为达西很傲慢", "她觉得他目中无人。")
    # Nothing to align: the response comes back as it was.
    assert align_chinese("黛玉感到绝望", "今天天气很好。") == "今天天气很好。"


@pytest.mark.process
def test_a_synonym_of_two_point_words_goes_to_the_first_in_every_process() -> None:
    # 一世 is a Cilin synonym of both 一生 and 一代: the point's first word claims it, whatever
    # the hash seed (a set of the point's words once decided, differently per process).
    script = (
        "from judge.matcher.lexicon import align_chinese as a; "
        "print(a('他一生都记得那一代人', '他一世不忘'), a('一点一对', '一些'))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[3],
        ).stdout.strip()
        for seed in range(4)
    }
    assert outputs == {"他一生不忘 一点"}


def test_titles_before_names_end_no_sentence() -> None:
    # "Mr. Bennet finds Mr. Collins ridiculous" is one statement: the polarity rule checks
    # one-sentence points only, and read it as three before.
    assert split_sentences("Mr. Bennet finds Mr. Collins ridiculous. Mrs. Reed is cruel!") == [
        "Mr. Bennet finds Mr. Collins ridiculous.",
        "Mrs. Reed is cruel!",
    ]
    assert split_sentences("He left. Then she came.") == ["He left.", "Then she came."]


def test_the_shipped_tables_load_with_their_provenance() -> None:
    english, chinese = get_lexicon("en"), get_lexicon("zh")
    assert len(english.groups) > 10_000 and len(english.antonyms) > 3_000
    assert len(chinese.groups) > 30_000 and not chinese.antonyms
    for path in ("lexicon_en.json", "lexicon_zh.json"):
        data = json.loads((Path(__file__).parents[3] / "judge" / "data" / path).read_text())
        assert data["version"] == LEXICON_VERSION
        assert "PyPI package" in data["source"]
    assert "Princeton University" in json.loads(
        (Path(__file__).parents[3] / "judge" / "data" / "lexicon_en.json").read_text()
    )["license"]


def test_a_table_of_another_version_is_refused_with_the_rebuild_command(tmp_path: Path) -> None:
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"version": "old", "groups": {}, "antonyms": {}, "forms": {}}))
    with pytest.raises(ConfigError, match=r"python -m calibration\.fit\.lexicon"):
        load_lexicon(stale)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"version": LEXICON_VERSION, "groups": {"a": 3}}))
    with pytest.raises(ConfigError, match="malformed"):
        load_lexicon(broken)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_lexicon(tmp_path / "missing.json")


def test_the_rationale_says_when_synonyms_found_the_words() -> None:
    from judge.matcher import MatchInput, get_matcher

    [[match]] = get_matcher().match(
        [
            MatchInput(
                "How does Pip feel about Joe's visit?",
                "He is embarrassed by Joe.",
                ["Pip is embarrassed by Joe"],
                "He is ashamed of Joe.",
                "en",
            )
        ]
    )
    assert "words the question does not give: 0.00, 1.00 with synonyms" in match.rationale
