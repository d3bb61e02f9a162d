"""ROUGE-L with rouge-score's LCS scoring and a tokenizer that keeps Chinese and accented text.

rouge-score's default tokenizer replaces every non-ASCII character with a space, so it scores a
Chinese answer as empty and cuts "café" to "caf" (protocol.md section 3). We keep its LCS scoring
and hand it our tokenizer: NFKC + case-fold, one token per CJK character (or jieba words),
letter/digit runs as words with accents kept, and punctuation of every script dropped.
"""

from __future__ import annotations

import logging
import threading
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.text import is_cjk, normalize
from judge.metrics.encoders import MetricInputError

if TYPE_CHECKING:
    from rouge_score.rouge_scorer import RougeScorer

Segmenter = Literal["char", "jieba"]
"""How CJK text is split: one token per character (default) or jieba's Chinese words."""

TOKENIZER_NAMES: dict[Segmenter, str] = {
    "char": "bonusjudge-cjk-char-v1",
    "jieba": "bonusjudge-jieba-v1",
}
"""Recorded in every :class:`RougeScore`; bump the version when tokenisation changes."""


class RougeScore(BaseModel):
    """ROUGE-L of a response against its (best-matching) reference."""

    model_config = ConfigDict(frozen=True)

    precision: float = Field(
        ge=0.0, le=1.0, description="LCS length / response tokens (0.0 when either side is empty)."
    )
    recall: float = Field(
        ge=0.0, le=1.0, description="LCS length / reference tokens (0.0 when either side is empty)."
    )
    f1: float = Field(
        ge=0.0, le=1.0, description="Harmonic mean of precision and recall (ROUGE-L F-measure)."
    )
    tokenizer: str = Field(
        description="Tokenizer used, e.g. `bonusjudge-cjk-char-v1` or `bonusjudge-jieba-v1`; "
        "scores from different tokenizers are not comparable."
    )


def _is_word_char(char: str) -> bool:
    """Letters, digits and combining marks make words; everything else separates them.

    Marks count so that scripts whose vowel signs are combining characters (Devanagari, Thai)
    and accents that NFKC cannot compose stay inside their word.
    """
    return unicodedata.category(char)[0] in "LNM"


def _segments(text: str) -> list[tuple[str, bool]]:
    """Split normalised text into ``(segment, is_cjk_run)`` pairs, punctuation and spaces dropped.

    A non-CJK segment is one word; a CJK segment is a maximal run of CJK letters, left for the
    segmenter to split (a run ends at punctuation, spaces or non-CJK letters).
    """
    segments: list[tuple[str, bool]] = []
    current: list[str] = []
    current_cjk = False
    for char in text:
        if not _is_word_char(char):
            if current:
                segments.append(("".join(current), current_cjk))
                current = []
            continue
        char_cjk = is_cjk(char)
        if current and char_cjk != current_cjk:
            segments.append(("".join(current), current_cjk))
            current = []
        current.append(char)
        current_cjk = char_cjk
    if current:
        segments.append(("".join(current), current_cjk))
    return segments


_jieba_lock = threading.Lock()
_jieba_tokenizer: Any = None


def _jieba() -> Any:
    """Return a private, initialised jieba tokenizer, loading the dictionary once and quietly."""
    global _jieba_tokenizer
    with _jieba_lock:
        if _jieba_tokenizer is None:
            try:
                import jieba
            except ImportError as exc:  # pragma: no cover - jieba is a declared dependency
                raise MetricInputError(
                    "segmenter 'jieba' needs the jieba package, which is not installed",
                    field="segmenter",
                ) from exc
            # jieba announces its dictionary build on its own logger at DEBUG level.
            logging.getLogger("jieba").setLevel(logging.WARNING)
            jieba.setLogLevel(logging.WARNING)
            tokenizer = jieba.Tokenizer()
            tokenizer.initialize()
            _jieba_tokenizer = tokenizer
        return _jieba_tokenizer


def _check_segmenter(segmenter: object) -> Segmenter:
    """Validate a segmenter name."""
    if segmenter not in TOKENIZER_NAMES:
        raise MetricInputError(
            f"segmenter must be one of {sorted(TOKENIZER_NAMES)}, got {segmenter!r}",
            field="segmenter",
        )
    return segmenter  # type: ignore[return-value]


def tokenize(text: str, *, segmenter: Segmenter = "char") -> list[str]:
    """Tokenise text for ROUGE: NFKC + case-fold, CJK per character (or jieba), no punctuation.

    Args:
        text: Any text, English, Chinese or mixed.
        segmenter: ``"char"`` for one token per CJK character; ``"jieba"`` for Chinese words.

    Returns:
        The tokens in order; ``[]`` for empty or punctuation-only text.

    Raises:
        MetricInputError: if ``text`` is not a string or ``segmenter`` is unknown.
    """
    if not isinstance(text, str):
        raise MetricInputError(f"text must be a string, got {type(text).__name__}", field="text")
    mode = _check_segmenter(segmenter)
    tokens: list[str] = []
    for segment, cjk in _segments(normalize(text)):
        if not cjk:
            tokens.append(segment)
        elif mode == "char":
            tokens.extend(segment)
        else:
            # The run has no punctuation or spaces, so every jieba word is a real token; the
            # filter only guards against a whitespace token should jieba ever emit one.
            tokens.extend(word for word in _jieba().lcut(segment) if word.strip())
    return tokens


class _Tokenizer:
    """Adapter giving rouge-score the ``.tokenize(text) -> list[str]`` it expects."""

    def __init__(self, segmenter: Segmenter) -> None:
        self.segmenter: Segmenter = segmenter

    def tokenize(self, text: str) -> list[str]:
        """Tokenise with :func:`tokenize` and this adapter's segmenter."""
        return tokenize(text, segmenter=self.segmenter)


_scorers_lock = threading.Lock()
_scorers: dict[Segmenter, RougeScorer] = {}


def _scorer(segmenter: Segmenter) -> RougeScorer:
    """Return the cached rouge-score scorer for a segmenter (rouge_score is imported lazily)."""
    with _scorers_lock:
        scorer = _scorers.get(segmenter)
        if scorer is None:
            from rouge_score.rouge_scorer import RougeScorer

            scorer = RougeScorer(["rougeL"], tokenizer=_Tokenizer(segmenter))
            _scorers[segmenter] = scorer
        return scorer


def rouge_l(
    response: str,
    reference: str | Sequence[str],
    *,
    segmenter: Segmenter = "char",
) -> RougeScore:
    """ROUGE-L (longest common subsequence) of a response against one or several references.

    Args:
        response: The answer being graded.
        reference: One reference, or several; with several, the result is the reference with the
            best F1 (the first one on ties), with its own precision and recall.
        segmenter: CJK tokenisation, see :func:`tokenize`.

    Returns:
        The score; all zeros when the response or every reference has no tokens.

    Raises:
        MetricInputError: (a ``ValueError``) if an argument has the wrong type, the reference
            list is empty, or the segmenter is unknown.
    """
    if not isinstance(response, str):
        raise MetricInputError(
            f"response must be a string, got {type(response).__name__}", field="response"
        )
    if isinstance(reference, str):
        references: list[str] = [reference]
    elif isinstance(reference, Sequence) and not isinstance(reference, bytes):
        references = list(reference)
        if not references:
            raise MetricInputError("reference list must not be empty", field="reference")
        for index, item in enumerate(references):
            if not isinstance(item, str):
                raise MetricInputError(
                    f"reference[{index}] must be a string, got {type(item).__name__}",
                    field=f"reference[{index}]",
                )
    else:
        raise MetricInputError(
            f"reference must be a string or a list of strings, got {type(reference).__name__}",
            field="reference",
        )
    mode = _check_segmenter(segmenter)
    scorer = _scorer(mode)

    best: Any = None
    for item in references:
        # rouge-score's argument order is (target, prediction).
        score = scorer.score(item, response)["rougeL"]
        if best is None or score.fmeasure > best.fmeasure:
            best = score
    return RougeScore(
        precision=float(best.precision),
        recall=float(best.recall),
        f1=float(best.fmeasure),
        tokenizer=TOKENIZER_NAMES[mode],
    )
