"""``EngineStats``: the counters one grader keeps over its lifetime.

The engine counts items, the caller counts judge calls, cache hits, re-asks, retries and tokens,
and the metrics runner counts metric cache hits, all into one object the service exports as
Prometheus metrics.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineStats:
    """Counters over the engine's lifetime (exported as Prometheus metrics by the service)."""

    items: int = 0
    scored: int = 0
    unscored: int = 0
    provider_calls: int = 0
    cache_hits: int = 0
    metric_cache_hits: int = 0
    reasks: int = 0
    retries: int = 0
    retries_by_reason: Counter[str] = field(default_factory=Counter)
    outage_waits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unscored_by_reason: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot."""
        return {
            "items": self.items,
            "scored": self.scored,
            "unscored": self.unscored,
            "judge_calls": self.provider_calls,
            "cache_hits": self.cache_hits,
            "metric_cache_hits": self.metric_cache_hits,
            "reasks": self.reasks,
            "retries": self.retries,
            "retries_by_reason": dict(self.retries_by_reason),
            "outage_waits": self.outage_waits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "unscored_by_reason": dict(self.unscored_by_reason),
        }
