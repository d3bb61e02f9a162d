"""CJK-aware word counting, truncation and language detection."""

from core.text import count_words, detect_language, length_cap, truncate_words, words


def test_words_count_cjk_characters_one_each():
    assert count_words("他很伤心") == 4
    assert count_words("Anna 很伤心 today") == 5
    assert words("café au lait") == ["café", "au", "lait"]


def test_length_cap_is_the_public_scorers_formula_but_cjk_aware():
    assert length_cap("one two three four") == 9  # max(4 + 5, 6)
    assert length_cap("x " * 20) == 30  # max(25, 30)
    assert length_cap("他很伤心因为失去了朋友") == 16  # 11 chars: max(16, 16)


def test_truncate_keeps_prefix():
    assert truncate_words("a b c d", 2) == "a b"
    assert truncate_words("他很伤心", 2) == "他很"
    assert truncate_words("short", 10) == "short"


def test_detect_language():
    assert detect_language("黛玉感到悲伤和孤独。") == "zh"
    assert detect_language("Daiyu (黛玉) feels lonely and sad at the burial of flowers.") == "en"
