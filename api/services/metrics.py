"""Reference metrics without a judge: ROUGE-L and BERTScore of response/reference pairs."""

from __future__ import annotations

import asyncio

from api.deps import ReadyGate
from api.settings import ServiceSettings
from bonusjudge_client.wire.schemas import MetricsBody, MetricsEntry, MetricsResponse
from core.errors import InputError
from judge.config import JudgeConfig
from judge.metrics import DEFAULT_ENCODER, bertscore, rouge_l


async def compute_metrics(
    body: MetricsBody, *, config: JudgeConfig, settings: ServiceSettings, ready: ReadyGate
) -> MetricsResponse:
    """Score up to ``settings.max_batch`` pairs with the default judge's encoder and segmenter.

    Raises:
        InputError: too many pairs, or an encoder this service does not offer.
        EncoderLoading: BERTScore is asked for while the encoder is still loading.
    """
    encoder, layer = _check(body, config, settings)
    ready.require_encoder("bertscore" in body.metrics)
    # Tokenising and encoding are CPU-bound: off the event loop.
    return await asyncio.to_thread(_compute, body, config, encoder, layer)


def _check(
    body: MetricsBody, config: JudgeConfig, settings: ServiceSettings
) -> tuple[str | None, int | None]:
    """Apply the service limits; the encoder and layer to use."""
    if len(body.pairs) > settings.max_batch:
        raise InputError(
            f"pairs: {len(body.pairs)} pairs exceed the limit of {settings.max_batch}",
            field="pairs",
        )
    if body.encoder is None or body.encoder == config.encoder:
        return config.encoder, config.encoder_layer
    if body.encoder == DEFAULT_ENCODER:
        return None, None
    allowed = sorted({DEFAULT_ENCODER, *([config.encoder] if config.encoder else [])})
    raise InputError(
        f"encoder: {body.encoder!r} is not available here; allowed: {', '.join(allowed)}",
        field="encoder",
    )


def _compute(
    body: MetricsBody, config: JudgeConfig, encoder: str | None, layer: int | None
) -> MetricsResponse:
    rouge = (
        [rouge_l(p.response, p.reference, segmenter=config.rouge_segmenter) for p in body.pairs]
        if "rouge_l" in body.metrics
        else [None] * len(body.pairs)
    )
    bert = (
        bertscore(
            [p.response for p in body.pairs], [p.reference for p in body.pairs],
            encoder=encoder, layer=layer, languages=[p.language for p in body.pairs],
        )
        if "bertscore" in body.metrics
        else [None] * len(body.pairs)
    )
    return MetricsResponse(
        results=[MetricsEntry(rouge_l=r, bertscore=b) for r, b in zip(rouge, bert, strict=True)]
    )
