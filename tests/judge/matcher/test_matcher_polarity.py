"""Tests of the matcher's text analysis without the encoder: polarity cues, clauses, names."""

from __future__ import annotations

import pytest

from judge.matcher.polarity import negated_words, negation_count, polarity_flip
from judge.matcher.text import neutralise_names, split_clauses


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("Anna is not afraid of losing her son.", 1),
        ("He doesn't care and never did.", 2),
        ("He dont know", 1),
        # Tokenised text (KPQA's NarrativeQA and MS MARCO answers) splits the contraction.
        ("she does n't want to die", 1),
        ("he doesn 't start", 1),
        ("Carton refuses to sacrifice himself.", 1),
        ("He gives up his life for her.", 0),
        # Phrases whose cue word does not negate the statement.
        ("It is not only red but also blue.", 0),
        ("She cannot stand him.", 0),
        ("No doubt he is guilty.", 0),
        ("He is happy.", 0),
        ("安娜不怕失去儿子。", 1),
        ("罗切斯特还没有结婚。", 1),
        # 非常 "very", 别人 "others", 未来 "future", 看不起 "despise" do not negate.
        ("她非常想念别人。", 0),
        ("未来的事谁也说不准", 1),
        ("大家照样看不起她。", 0),
    ],
)
def test_negation_count(text: str, count: int) -> None:
    assert negation_count(text) == count


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Anna is not afraid of losing her son.", ["afraid"]),
        ("Carton refuses to marry her and never looks back.", ["marry", "looks"]),
        ("He has no remorse", ["remorse"]),
        ("It is over, not", [""]),
        ("曹操毫无悔意", ["悔意"]),
        # The copula and modals are passed over to reach the word.
        ("他不是凶手", ["凶手"]),
        ("哈姆雷特相信克劳狄斯没有杀害他的父亲", ["杀害"]),
        ("他非常后悔", []),
    ],
)
def test_negated_words(text: str, words: list[str]) -> None:
    assert negated_words(text) == words


def test_a_negation_the_point_alone_has_contradicts_when_the_response_states_its_word() -> None:
    restated = polarity_flip("The wound does not heal", "The wound heals within weeks.")
    assert restated.restated and restated.contradicts
    assert restated.describe() == "negation in the point only, its word stated in the response"
    assert polarity_flip("曹操毫无悔意", "曹操非常后悔。").contradicts
    # Said in other words, it is not acted on (test below).
    assert not polarity_flip("He has no remorse", "He says he would do it again.").contradicts


def test_a_negation_on_another_word_than_the_antonym_does_not_cancel_it() -> None:
    # 怀疑/相信 (suspect/trust) is a pair, but the negation falls on the killing.
    cue = polarity_flip(
        "哈姆雷特怀疑克劳狄斯杀害了他的父亲", "哈姆雷特相信克劳狄斯没有杀害他的父亲。"
    )
    assert cue.flipped and cue.contradicts and cue.negation == "response"
    cue = polarity_flip(
        "Hamlet suspects Claudius murdered his father",
        "Hamlet trusts that Claudius did not murder his father.",
    )
    assert cue.flipped and cue.contradicts
    # On the pair's own word they still cancel, in both languages.
    assert not polarity_flip("她不相信他", "她怀疑他。").flipped
    assert not polarity_flip("She distrusts him", "She does not trust him.").flipped


def test_antonym_flips_the_issue_case() -> None:
    cue = polarity_flip(
        "Dantès wants revenge on those who betrayed him",
        "Dantès wants to forgive those who betrayed him.",
    )
    assert cue.flipped
    assert cue.antonym == "revenge / forgive"
    assert cue.negation is None
    assert cue.contradicts
    assert cue.describe() == "antonym revenge / forgive"


def test_paraphrase_without_cues_does_not_flip() -> None:
    cue = polarity_flip(
        "Dantès wants revenge on those who betrayed him",
        "He is determined to make the men who betrayed him pay for what they did.",
    )
    assert not cue.flipped
    assert cue.describe() == ""


@pytest.mark.parametrize(
    ("point", "clause", "flipped"),
    [
        ("Anna is afraid of losing her son", "Anna is not afraid of losing her son.", True),
        ("He is not hungry", "He is not hungry at all", False),
        # A negation and an antonym together cancel: "does not trust" says "distrusts".
        ("She does not trust him", "She distrusts him", False),
        ("Carton sacrifices himself for Lucie", "Carton refuses to sacrifice himself", True),
        ("Levin feels humiliated", "Levin feels proud", True),
        ("He wants to return to his estate", "he wants to stay in Moscow", True),
        ("Jo refuses Laurie's proposal", "Jo accepts Laurie's proposal", True),
        # "like" as a preposition is no antonym of "dislikes".
        ("She dislikes him", "She looks like she hates him", False),
        ("唐泰斯想向背叛他的人复仇", "唐泰斯想原谅背叛他的人。", True),
        ("安娜害怕失去儿子", "安娜不怕失去儿子。", True),
        ("祥林嫂发现自己仍被别人歧视", "她发现大家照样看不起她。", False),
        ("祥林嫂发现自己仍被别人歧视", "祥林嫂发现自己受到别人尊重。", True),
        ("伊丽莎白认为达西很傲慢", "伊丽莎白认为达西很谦虚。", True),
    ],
)
def test_polarity_flip(point: str, clause: str, flipped: bool) -> None:
    assert polarity_flip(point, clause).flipped is flipped


def test_split_clauses_on_commas_and_conjunctions() -> None:
    assert split_clauses("He is ashamed and longs to flee to the countryside.") == [
        "He is ashamed",
        "and longs to flee to the countryside.",
    ]
    assert split_clauses("She finds him arrogant, so she leaves the ball early.") == [
        "She finds him arrogant",
        "so she leaves the ball early.",
    ]
    # A piece of fewer than three tokens joins its neighbour.
    assert split_clauses("Yes, he did.") == ["Yes he did."]
    assert split_clauses("他觉得自己被冤枉了，心里还是挂念着唐僧。") == [
        "他觉得自己被冤枉了",
        "心里还是挂念着唐僧。",
    ]


def test_neutralise_names_replaces_only_names_the_response_never_uses() -> None:
    given = ["levin", "kitty"]
    assert neutralise_names("Levin feels humiliated", "He is ashamed.", given) == (
        "He feels humiliated"
    )
    assert neutralise_names("Levin's pride is hurt", "He is ashamed.", given) == "His pride is hurt"
    assert neutralise_names("Anna loves Levin", "She loves him.", ["anna"]) == "She loves Levin"
    # A name the response uses stays; so does a point without given names.
    assert neutralise_names("Levin feels humiliated", "Levin is ashamed.", given) == (
        "Levin feels humiliated"
    )
    assert neutralise_names("Levin feels humiliated", "He is ashamed.", []) == (
        "Levin feels humiliated"
    )


def test_only_added_negations_and_antonyms_contradict() -> None:
    added = polarity_flip("Oliver is hungry", "Oliver is not hungry.")
    assert added.flipped and added.contradicts and added.negation == "response"
    assert added.describe() == "negation in the response only"
    # A negation only the point has is flagged but not acted on (too often a paraphrase).
    dropped = polarity_flip("The dose should not be increased", "Take the dose you missed")
    assert dropped.flipped and not dropped.contradicts and dropped.negation == "point"


def test_neutralise_names_needs_a_pronoun_to_stand_for_the_name() -> None:
    # Nothing in the response says who stands for Levin: the point is embedded as it is.
    assert neutralise_names("Levin feels humiliated", "Humiliation.", ["levin"]) == (
        "Levin feels humiliated"
    )


def test_response_polarity_reads_the_clause_that_states_the_point() -> None:
    from judge.matcher import response_polarity
    from judge.matcher.text import split_sentences

    # The "not" belongs to another clause: no flip.
    cue = response_polarity(
        "Measles is contagious", split_sentences("Measles is contagious, but it is not deadly.")
    )
    assert cue is not None and not cue.contradicts
    cue = response_polarity("Measles is contagious", split_sentences("Measles is not contagious."))
    assert cue is not None and cue.contradicts
    # One- and two-word points (a name, a value) are not checked.
    assert response_polarity("David Seville", split_sentences("Not David Seville.")) is None


def test_a_point_is_embedded_with_the_pronoun_the_response_uses_for_a_given_name() -> None:
    from judge.matcher import MatchInput, embedded_point, texts_to_embed

    item = MatchInput(
        "How does Levin feel right after Kitty refuses him?",
        "He feels humiliated.",
        ["Levin feels humiliated"],
        "He is ashamed and longs to flee to the countryside.",
        "en",
    )
    assert embedded_point("Levin feels humiliated", item) == "He feels humiliated"
    texts = texts_to_embed(item)
    assert "He feels humiliated" in texts and "Levin feels humiliated" not in texts
    # One text for the point either way: the cost is unchanged.
    assert len(texts) == 2
