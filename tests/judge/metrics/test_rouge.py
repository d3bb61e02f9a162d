"""ROUGE-L with the CJK-aware tokenizer: hand-computed LCS in English, Chinese and mixed text."""

from __future__ import annotations

import pytest

from core.errors import InputError
from judge.metrics import RougeScore, rouge_l, tokenize
from judge.metrics import rouge as rouge_module


def _close(score: RougeScore, precision: float, recall: float, f1: float) -> None:
    assert score.precision == pytest.approx(precision)
    assert score.recall == pytest.approx(recall)
    assert score.f1 == pytest.approx(f1)


# --- tokenizer -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Cat, the HAT!", ["the", "cat", "the", "hat"]),
        ("他很伤心。", ["他", "很", "伤", "心"]),
        # CJK letters end a Latin word and vice versa, without spaces.
        (
            "Anna伤心 because Vronsky离开了",
            ["anna", "伤", "心", "because", "vronsky", "离", "开", "了"],
        ),
        # Accented words stay whole; a decomposed accent is composed by NFKC first.
        ("Café Résumé naïve Cafe\u0301", ["café", "résumé", "naïve", "café"]),
        # Full-width letters/digits fold to ASCII; full-width and CJK punctuation are dropped.
        ("ＡＢＣ，１２３「你好」", ["abc", "123", "你", "好"]),
        ("2023年", ["2023", "年"]),
        ("well-known don't", ["well", "known", "don", "t"]),
        ("", []),
        ("!!! ，。？…—「」《》", []),
    ],
)
def test_tokenize_char_mode(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


def test_jieba_loads_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    # Force a fresh dictionary load: jieba's default logger announces it on stderr. The fresh
    # tokenizer is kept for the next jieba test (loading one costs more than a second of CPU),
    # as the first use in a process keeps it; hence this test comes first.
    rouge_module._jieba_tokenizer = None
    assert tokenize("朋友", segmenter="jieba") == ["朋友"]
    captured = capfd.readouterr()
    assert captured.err == ""
    assert captured.out == ""


def test_tokenize_jieba_groups_chinese_words_and_keeps_latin_words() -> None:
    assert tokenize("他很伤心因为失去了朋友", segmenter="jieba") == [
        "他",
        "很",
        "伤心",
        "因为",
        "失去",
        "了",
        "朋友",
    ]
    assert tokenize("Anna很伤心, café!", segmenter="jieba") == ["anna", "很", "伤心", "café"]


# --- ROUGE-L ---------------------------------------------------------------------------------


def test_rouge_l_english_hand_computed() -> None:
    # response: police killed the gunman (4); reference: the gunman was killed by police (6).
    # LCS = "the gunman" = 2 -> P = 2/4, R = 2/6, F = 2PR/(P+R) = 0.4.
    score = rouge_l("Police killed the gunman.", "The gunman was killed by police!")
    _close(score, 0.5, 1 / 3, 0.4)
    assert score.tokenizer == "bonusjudge-cjk-char-v1"


def test_rouge_l_chinese_character_level_hand_computed() -> None:
    # response 他很伤心因为失去了朋友 (11 chars), reference 他因为失去朋友而伤心 (10 chars).
    # LCS = 他因为失去朋友 (7) -> P = 7/11, R = 7/10, F = 14/21.
    score = rouge_l("他很伤心因为失去了朋友", "他因为失去朋友而伤心")
    _close(score, 7 / 11, 7 / 10, 2 / 3)


def test_rouge_l_chinese_is_not_scored_empty_like_the_default_tokenizer() -> None:
    from rouge_score import rouge_scorer

    default = rouge_scorer.RougeScorer(["rougeL"]).score("他因为失去朋友而伤心", "他很伤心")
    assert default["rougeL"].fmeasure == 0.0  # the defect we work around
    assert rouge_l("他很伤心", "他因为失去朋友而伤心").f1 > 0.0


def test_rouge_l_mixed_english_chinese_hand_computed() -> None:
    # response: anna 很 伤 心 because vronsky left (7);
    # reference: anna 伤 心 because vronsky 离 开 了 (8).
    # LCS = anna 伤 心 because vronsky (5) -> P = 5/7, R = 5/8, F = 10/15.
    score = rouge_l("Anna 很伤心, because Vronsky left.", "Anna伤心 because Vronsky离开了")
    _close(score, 5 / 7, 5 / 8, 2 / 3)


def test_rouge_l_accented_latin_words_match_whole() -> None:
    # 4 tokens each, LCS "le café fermé" = 3; rouge-score's default would cut "café" to "caf".
    score = rouge_l("Le café est fermé.", "le café était fermé")
    _close(score, 0.75, 0.75, 0.75)
    assert rouge_l("café", "caf").f1 == 0.0


def test_rouge_l_jieba_segmenter_hand_computed() -> None:
    # jieba: 他/很/伤心/因为/失去/了/朋友 (7) vs 他/因为/失去/朋友/而/伤心 (6); LCS = 4 words.
    score = rouge_l("他很伤心因为失去了朋友", "他因为失去朋友而伤心", segmenter="jieba")
    _close(score, 4 / 7, 4 / 6, 8 / 13)
    assert score.tokenizer == "bonusjudge-jieba-v1"


@pytest.mark.parametrize(
    ("response", "reference"),
    [
        ("", "the reference"),
        ("an answer", ""),
        ("...!?", "the reference"),
        ("答案", "。，！"),
        ("", ""),
    ],
)
def test_rouge_l_empty_or_punctuation_only_gives_zeros(response: str, reference: str) -> None:
    score = rouge_l(response, reference)
    _close(score, 0.0, 0.0, 0.0)
    assert score.tokenizer == "bonusjudge-cjk-char-v1"


def test_rouge_l_identical_text_is_one() -> None:
    _close(rouge_l("He felt betrayed.", "he felt BETRAYED"), 1.0, 1.0, 1.0)


def test_rouge_l_multiple_references_takes_best_f1_with_its_own_precision_recall() -> None:
    # vs "the cat sat down": LCS 3 -> P = 1, R = 3/4, F = 6/7; vs "a dog ran": 0.
    best = rouge_l("the cat sat", ["a dog ran", "the cat sat down", "cat"])
    _close(best, 1.0, 0.75, 6 / 7)
    assert best == rouge_l("the cat sat", "the cat sat down")
    # Order of the references does not matter.
    assert rouge_l("the cat sat", ["the cat sat down", "a dog ran", "cat"]) == best
    # Ties keep the first reference: both have F = 2/3 but different precision/recall.
    tie = rouge_l("a b", ["a", "a b c d"])
    _close(tie, 0.5, 1.0, 2 / 3)


def test_rouge_l_reference_tuple_accepted() -> None:
    assert rouge_l("a b", ("a b",)).f1 == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"response": None, "reference": "x"}, "response"),
        ({"response": "x", "reference": 3}, "reference"),
        ({"response": "x", "reference": []}, "reference"),
        ({"response": "x", "reference": ["ok", b"bytes"]}, "reference[1]"),
        ({"response": "x", "reference": "y", "segmenter": "spaces"}, "segmenter"),
    ],
)
def test_rouge_l_bad_input_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=r"\w") as info:
        rouge_l(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, InputError)
    assert info.value.field == field
    assert field.split("[")[0] in str(info.value)


def test_tokenize_rejects_non_string() -> None:
    with pytest.raises(ValueError, match="text must be a string"):
        tokenize(b"bytes")  # type: ignore[arg-type]


def test_rouge_score_model_validates_range_and_describes_fields() -> None:
    schema = RougeScore.model_json_schema()
    assert all(schema["properties"][name].get("description") for name in schema["properties"])
    with pytest.raises(ValueError):
        RougeScore(precision=1.5, recall=0.0, f1=0.0, tokenizer="t")
