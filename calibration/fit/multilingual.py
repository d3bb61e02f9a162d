"""The data of the matcher's multilingual (Chinese) model: its features and its similarity scale.

No human-rated Chinese set is available, so the Chinese model is fitted on the English rows, as
the lexical-only model was, but with the similarities of the multilingual encoder
(:mod:`judge.matcher.encoder`) in place of MiniLM's. Two things make that transfer hold:

* the encoder is multilingual, so a Chinese paraphrase and its point lie as close as an English
  pair does, once the language's cosines are put on the English scale;
* that scale is measured, not assumed: :func:`similarity_scale` takes the English and Chinese
  versions of the same texts (the ToMBench examples shipped in ``judge/data``: questions and
  options, translated), and finds the factor that best maps the distances from 1 between
  Chinese pairs onto those of their English translations (least squares). Cosines of unrelated
  Chinese texts average 0.85 against 0.80 in English; the factor is about 1.3.

The character features are those of the lexical-only model (characters as words, bigrams as
the order evidence), fitted on English words; that part of the transfer is as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from calibration.fit.embeddings import embed_cached
from core.errors import InputError
from core.jsonl import read_rows
from judge.matcher import point_features, texts_to_embed
from judge.matcher.encoder import MULTILINGUAL_ENCODER, get_multilingual_encoder

if TYPE_CHECKING:  # calibration.fit.matcher imports this module
    from calibration.fit.types import Example

__all__ = ["PARALLEL_EXAMPLES", "multilingual_examples", "parallel_texts", "similarity_scale"]

PARALLEL_EXAMPLES = Path(__file__).parents[2] / "judge" / "data" / "mcq_example_tombench.jsonl"
"""English and Chinese versions of the same ToMBench items (the MCQ example input)."""


def multilingual_examples(
    examples: Sequence[Example], cache_dir: Path | None, log: Callable[[str], None]
) -> list[Example]:
    """The same rows with the multilingual encoder's similarities (what the Chinese model sees).

    Args:
        examples: Rows from :func:`calibration.fit.matcher.load_examples`.
        cache_dir: Embedding cache folder, or None.
        log: Progress printer.

    Returns:
        Copies of the rows, their ``features`` computed by :func:`judge.matcher.point_features`
        on the multilingual encoder's vectors (English rows: scale 1).
    """
    texts = list(
        dict.fromkeys(t for ex in examples for item, _ in ex.options for t in texts_to_embed(item))
    )
    vectors = embed_cached(
        texts, cache_dir, MULTILINGUAL_ENCODER, lambda: get_multilingual_encoder().embed, log
    )
    return [
        dataclasses.replace(
            ex, features=[point_features(point, item, vectors) for item, point in ex.options]
        )
        for ex in examples
    ]


def parallel_texts(path: Path = PARALLEL_EXAMPLES) -> tuple[list[str], list[str]]:
    """The English texts and their Chinese versions, aligned: each item's question and options.

    Args:
        path: The ToMBench example file (rows with ``id``, ``language``, ``question``,
            ``choices``; each id in both languages).

    Returns:
        ``(english, chinese)``, the i-th of each the same text.

    Raises:
        InputError: on a bad line, or when no item is in both languages.
    """
    texts: dict[str, dict[tuple[str, int], str]] = {"en": {}, "zh": {}}
    for row in read_rows(path, field="parallel_examples"):
        if row.get("language") in texts:
            for i, text in enumerate([row["question"], *row["choices"]]):
                texts[row["language"]][(row["id"], i)] = text
    keys = sorted(texts["en"].keys() & texts["zh"].keys())
    if len(keys) < 3:
        raise InputError(f"{path}: fewer than 3 texts in both English and Chinese")
    return [texts["en"][k] for k in keys], [texts["zh"][k] for k in keys]


def similarity_scale(english: Sequence[str], other: Sequence[str]) -> float:
    """The factor ``k`` with ``1 - s_en ≈ k (1 - s_other)`` over all pairs of parallel texts.

    Args:
        english: Texts in English.
        other: The same texts in the other language, in the same order.

    Returns:
        The least-squares factor (the cosines are the multilingual encoder's).
    """
    encoder = get_multilingual_encoder()
    a, b = encoder.embed(list(english)), encoder.embed(list(other))
    upper = np.triu_indices(len(english), 1)
    distance_en = 1.0 - (a @ a.T)[upper]
    distance_other = 1.0 - (b @ b.T)[upper]
    return float((distance_en * distance_other).sum() / (distance_other**2).sum())
