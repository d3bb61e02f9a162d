"""Reference-based metrics for the engine: ROUGE-L and BERTScore, cached, BERTScore batched.

Each value is cached under ``metric_key`` (metric, its parameters, response, reference, and the
caller under a per-key cache scope), so a re-run computes nothing it has computed before.
BERTScore goes through one ``AsyncBatcher`` per (encoder, layer): concurrently graded items
share encoder batches, filled fairly between the keys they are graded for (``AsyncBatcher``).
With several references an item gets the score of the best-matching one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from core.text import Language
from judge.batching import AsyncBatcher
from judge.cache import Cache, metric_key
from judge.calls import TENANT
from judge.config import JudgeConfig
from judge.metrics import BertScore, RougeScore, rouge_l
from judge.stats import EngineStats


class MetricsRunner:
    """Computes an item's ROUGE-L and BERTScore through the cache and the batchers.

    Args:
        cache: The cache metric values are kept in (with the judge calls).
        stats: The grader's counters (``metric_cache_hits``).
        load: Loads what a configuration needs (``Grader``'s serialized loader), awaited before
            the first value computed rather than read from the cache.
        partition: The caller the values are cached for, read per value (``Caller.partition``:
            the per-key cache scope keeps each key's values apart, as its judge calls, since a
            value another key had computed answers measurably faster); None: shared.
    """

    def __init__(
        self,
        cache: Cache,
        stats: EngineStats,
        *,
        load: Callable[[JudgeConfig], Awaitable[None]] | None = None,
        partition: Callable[[], str | None] | None = None,
    ) -> None:
        self.cache = cache
        self.stats = stats
        self._load = load
        self._partition = partition or _shared
        self._bert_batchers: dict[tuple[str | None, int | None], AsyncBatcher[Any, BertScore]] = {}

    async def best_rouge(
        self, response: str, references: list[str], config: JudgeConfig
    ) -> RougeScore:
        """ROUGE-L against the best-matching reference (by F1)."""
        unique = list(dict.fromkeys(references))
        scores = [await self.rouge(response, ref, config) for ref in unique]
        return max(scores, key=lambda s: s.f1)

    async def best_bertscore(
        self, response: str, references: list[str], language: Language, config: JudgeConfig
    ) -> BertScore:
        """BERTScore against the best-matching reference (by F1; unavailable ones last)."""
        unique = list(dict.fromkeys(references))
        scores = await asyncio.gather(
            *(self.bertscore(response, ref, language, config) for ref in unique)
        )
        return max(scores, key=lambda s: -1.0 if s.f1 is None else s.f1)

    async def rouge(self, response: str, reference: str, config: JudgeConfig) -> RougeScore:
        """ROUGE-L of ``response`` against one reference (cached).

        Async for the cache alone (a shared cache is a network call); the score itself is
        computed in the loop, as it always was.
        """
        key = metric_key("rouge_l", {"segmenter": config.rouge_segmenter}, response, reference,
                         self._partition())
        cached = await self.cache.aget(key) if config.cache else None
        if cached is not None:
            self.stats.metric_cache_hits += 1
            return RougeScore.model_validate(cached)
        if self._load is not None:
            await self._load(config)
        value = rouge_l(response, reference, segmenter=config.rouge_segmenter)
        if config.cache:
            await self.cache.aset(key, value.model_dump())
        return value

    async def bertscore(
        self, response: str, reference: str, language: Language, config: JudgeConfig
    ) -> BertScore:
        """BERTScore of ``response`` against one reference (cached when the encoder answered)."""
        params = {"encoder": config.encoder, "layer": config.encoder_layer}
        key = metric_key("bertscore", params, response, reference, self._partition())
        cached = await self.cache.aget(key) if config.cache else None
        if cached is not None:
            self.stats.metric_cache_hits += 1
            return BertScore.model_validate(cached)
        if self._load is not None:
            await self._load(config)
        batcher = self._bert_batcher(config.encoder, config.encoder_layer)
        value = await batcher.submit((response, reference, language))
        # A score that could not be computed (f1 None, ``reason`` says why) is not cached.
        if config.cache and value.f1 is not None:
            await self.cache.aset(key, value.model_dump())
        return value

    def _bert_batcher(self, encoder: str | None, layer: int | None) -> AsyncBatcher[Any, BertScore]:
        key = (encoder, layer)
        if key not in self._bert_batchers:
            from judge.metrics import bertscore

            def run(batch: list[tuple[str, str, Language]]) -> list[BertScore]:
                return bertscore(
                    [b[0] for b in batch],
                    [b[1] for b in batch],
                    encoder=encoder,
                    layer=layer,
                    languages=[b[2] for b in batch],
                )

            # Batches are shared fairly between the keys (TENANT) whose items wait for them.
            self._bert_batchers[key] = AsyncBatcher(
                run, batch_size=64, max_wait=0.01, owner=TENANT.get
            )
        return self._bert_batchers[key]

    async def aclose(self) -> None:
        """Stop the batch workers."""
        for batcher in self._bert_batchers.values():
            await batcher.aclose()


def _shared() -> str | None:
    return None
