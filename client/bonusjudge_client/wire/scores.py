"""Reference-based scores as results carry them: ROUGE-L and BERTScore.

The engine computes them (:mod:`judge.metrics`); results and the client read them; the models
live here so both sides share one definition.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from bonusjudge_client.wire.base import WireModel

__all__ = ["BertScore", "RougeScore"]


class RougeScore(WireModel):
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


class BertScore(WireModel):
    """BERTScore of one response against its reference; values are None when not computable."""

    model_config = ConfigDict(frozen=True)

    precision: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="Mean, over response tokens, of the best cosine match in the reference.",
    )
    recall: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="Mean, over reference tokens, of the best cosine match in the response.",
    )
    f1: float | None = Field(
        default=None, ge=-1.0, le=1.0, description="Harmonic mean of precision and recall."
    )
    encoder: str = Field(description="Encoder name the embeddings came from.")
    layer: int = Field(description="Hidden layer whose token embeddings were matched.")
    reason: str | None = Field(
        default=None,
        description="Why the values are None (unsupported language, empty reference); None when "
        "they are set.",
    )
