"""Language-aware text helpers shared by the engine, metrics and matchers.

CharToM-QA comes in English and Chinese, and the public scorer's whitespace word counts made its
length cap meaningless for Chinese (protocol.md section 4). Everything that counts, cuts or
tokenises text goes through here so the two languages are treated alike.
"""

from __future__ import annotations

import re
import unicodedata

from bonusjudge_client.wire.vocab import SUPPORTED_LANGUAGES as SUPPORTED_LANGUAGES
from bonusjudge_client.wire.vocab import Language as Language

# CJK Unified Ideographs (+ extension A), compatibility ideographs, and the CJK punctuation,
# full-width and kana blocks: one "word" each, since those scripts do not separate words by spaces.
_CJK_RANGES = (
    (0x3000, 0x303F),
    (0x3040, 0x30FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),
    (0x20000, 0x2FA1F),
)
_CJK_CLASS = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in _CJK_RANGES)
# One token = a CJK character, or a run of letters/digits (accents kept).
_WORD_RE = re.compile(rf"[{_CJK_CLASS}]|[^\s{_CJK_CLASS}]+")
_CJK_CHAR_RE = re.compile(f"[{_CJK_CLASS}]")
_IDEOGRAPH_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LETTER_RE = re.compile(r"[^\W\d_]", re.UNICODE)
# Sentence ends: . ! ? ; before white space, the CJK marks anywhere, line breaks, and a full
# stop glued to the next sentence ("weight loss.If you") after a lower-case letter, which
# leaves abbreviations such as "U.S." alone. Titles before a name ("Mr. Bennet", "Dr. Jekyll")
# end no sentence: a point about Mr. Collins is one statement, not two.
_SENTENCE_RE = re.compile(
    r"(?<=[.!?;。！？；])(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<!\bJr\.)"
    r"(?<!\bSr\.)(?<!\bMt\.)(?<!\bProf\.)(?<!\bvs\.)\s+|(?<=[。！？；])|\n+|(?<=[a-z][.!?])(?=[A-Z])"
)
# A sentence holds at least one letter or digit: a lone "..." or "!" between breaks is none.
_SENTENCE_WORD_RE = re.compile(r"[^\W_]+")
_MAX_SENTENCES = 80


def is_cjk(char: str) -> bool:
    """Return whether a single character belongs to a CJK block (ideograph, kana, full-width)."""
    return _CJK_CHAR_RE.match(char) is not None


def cjk_share(text: str) -> float:
    """Share of the letters in ``text`` that are Chinese ideographs (0.0 without letters)."""
    letters = _LETTER_RE.findall(text)
    if not letters:
        return 0.0
    return len(_IDEOGRAPH_RE.findall(text)) / len(letters)


def detect_language(text: str) -> Language:
    """Guess ``zh`` or ``en`` from the script: Chinese when ideographs are at least 30% of letters.

    A threshold rather than "any ideograph" because English answers about Chinese novels quote
    names in characters, and Chinese answers quote English titles.
    """
    return "zh" if cjk_share(text) >= 0.3 else "en"


def words(text: str) -> list[str]:
    """Split into words: whitespace-separated runs, with each CJK character a word of its own."""
    return _WORD_RE.findall(text)


def count_words(text: str) -> int:
    """Count words the CJK-aware way of :func:`words` (a Chinese character counts as one)."""
    return len(words(text))


def truncate_words(text: str, limit: int) -> str:
    """Cut ``text`` after ``limit`` words (CJK-aware), keeping the spacing before the cut."""
    if limit <= 0:
        return ""
    for index, match in enumerate(_WORD_RE.finditer(text)):
        if index == limit:
            return text[: match.start()].rstrip()
    return text


def length_cap(reference: str) -> int:
    """The public scorer's cap in words: ``max(words(ref) + 5, int(1.5 * words(ref)))``.

    Counted with :func:`count_words`, so the cap means the same for Chinese as for English.
    """
    n = count_words(reference)
    return max(n + 5, int(1.5 * n))


def split_sentences(text: str) -> list[str]:
    """Split text into sentences on ``. ! ? ;`` (and their CJK forms) and on line breaks.

    The embedded matcher's sentences (``judge.matcher.text`` re-exports it), and what an
    estimate stands in for the points an extraction would find.

    Args:
        text: Any text.

    Returns:
        The non-empty sentences, stripped, at most 80 (the rest joined into the last one, so no
        text is lost and a pathological response cannot blow up the batch).
    """
    parts = [part.strip() for part in _SENTENCE_RE.split(text)]
    sentences = [part for part in parts if part and _SENTENCE_WORD_RE.search(part)]
    if len(sentences) > _MAX_SENTENCES:
        sentences = [*sentences[: _MAX_SENTENCES - 1], " ".join(sentences[_MAX_SENTENCES - 1 :])]
    return sentences


def normalize(text: str) -> str:
    """NFKC-normalise and case-fold, so full-width letters and digits compare equal to ASCII."""
    return unicodedata.normalize("NFKC", text).casefold()
