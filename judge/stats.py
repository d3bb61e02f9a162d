"""``EngineStats``: the counters one grader keeps over its lifetime, in all and per caller.

The engine counts items, the caller counts provider requests, cache hits, re-asks, retries and
tokens, and the metrics runner counts metric cache hits, all into one object the service exports
as Prometheus metrics. Every request sent to a provider is counted (first tries, retries,
re-asks, failed requests, probes), with the tokens and cost the provider reported for it
whenever it reported any, failed and unusable answers included: the totals add up to what the
provider saw. What was spent for each caller (an API key of the service) is kept apart as well
(:class:`Usage`), so the service can tell each key its own usage and no other's.

An item is counted as graded once its grade is given to the caller. The CLI counts it as it is
graded; the service counts a request's items once the request is answered, and a job's item
once its result is to be stored (an :class:`ItemLedger` per request or item, in
:data:`ITEM_LEDGER`): a request answered with an error after its items were graded (its key's
budget reached midway, the judge's breaker opening) gave no grade, and a job's item a cost cap
refused stays pending to be graded again, so they are counted as ``refused``, not as graded,
scored or unscored.
"""

from __future__ import annotations

from collections import Counter
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Usage:
    """What the judge calls and grades of one caller (an API key) used, since start.

    Attributes:
        provider_requests: Requests sent to a provider for it (re-asks and retries included).
        prompt_tokens: Prompt tokens the provider reported for them.
        completion_tokens: Completion tokens reported for them.
        cost_usd: Their cost, when the model's price is known.
        cached_tokens: Of ``prompt_tokens``, those the provider served from its prompt cache
            (billed at its cache-read price).
        cache_hits: Judge calls answered from the cache.
        items: Items graded.
        scored: Items whose every requested judge task was scored.
        unscored: Items with an unscored judge task.
        refused: Items graded for a request that was then answered with an error, not a
            grade (in none of ``items``, ``scored`` and ``unscored``).
    """

    provider_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached_tokens: int = 0
    cache_hits: int = 0
    items: int = 0
    scored: int = 0
    unscored: int = 0
    refused: int = 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot (cost rounded to the micro-dollar)."""
        return {**asdict(self), "cost_usd": round(self.cost_usd, 6)}


@dataclass
class ItemLedger:
    """The items graded for one request, counted once the request is answered.

    Attributes:
        entries: ``(stats, unscored task reasons, caller)`` of each item graded so far.
        settled: The request was answered: items graded from now on are counted at once (a
            task started during the request, such as a job's, may outlive it).
    """

    entries: list[tuple[EngineStats, list[str], str | None]] = field(default_factory=list)
    settled: bool = False

    def settle(self, answered: bool) -> None:
        """Count the items: as graded when the request was ``answered``, else as refused."""
        self.settled = True
        entries, self.entries = self.entries, []
        for stats, unscored, caller in entries:
            if answered:
                stats.count_item(unscored, caller)
            else:
                stats.refuse_item(caller)


ITEM_LEDGER: ContextVar[ItemLedger | None] = ContextVar("bonusjudge_item_ledger", default=None)
"""The ledger of the request being answered (None: count items as they are graded)."""


@dataclass
class EngineStats(Usage):
    """Counters over the engine's lifetime (exported as Prometheus metrics by the service).

    The totals are the :class:`Usage` of every caller together, so one set of counters serves
    both; ``provider_requests`` (also read as ``provider_calls``) counts every request sent to a
    provider (re-asks, retries, failures and probes included); ``reasks`` and ``retries`` say how
    many of them were re-asks and retries. ``by_caller`` keeps each caller's :class:`Usage`
    (keyed by the caller, ``""`` for calls made for nobody in particular: the CLI, a service
    without keys); probes of an outage are made for no caller and counted in the totals only.
    """

    metric_cache_hits: int = 0
    reasks: int = 0
    retries: int = 0
    retries_by_reason: Counter[str] = field(default_factory=Counter)
    outage_waits: int = 0
    unscored_by_reason: Counter[str] = field(default_factory=Counter)
    by_caller: dict[str, Usage] = field(default_factory=dict)

    @property
    def provider_calls(self) -> int:
        """Every request sent to a provider, for all callers (``provider_requests``)."""
        return self.provider_requests

    def usage_of(self, caller: str | None) -> Usage:
        """``caller``'s usage so far (an empty one for a caller not seen yet, not stored)."""
        return self.by_caller.get(caller or "") or Usage()

    def _caller(self, caller: str | None) -> Usage:
        key = caller or ""
        usage = self.by_caller.get(key)
        if usage is None:
            usage = self.by_caller[key] = Usage()
        return usage

    def _counted(self, caller: str | None, *, probe: bool = False) -> tuple[Usage, ...]:
        """Where a count goes: the totals, and ``caller``'s usage unless it is a probe's."""
        return (self,) if probe else (self, self._caller(caller))

    def add_requests(self, count: int, caller: str | None, *, probe: bool = False) -> None:
        """Count ``count`` requests sent to a provider for ``caller`` (a probe: for no one)."""
        for usage in self._counted(caller, probe=probe):
            usage.provider_requests += count

    def add_usage(
        self,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        cost_usd: float | None,
        caller: str | None,
        *,
        cached_tokens: int | None = None,
        probe: bool = False,
    ) -> None:
        """Add what the provider reported for answered requests (None: it reported nothing).

        ``cached_tokens`` is the part of ``prompt_tokens`` served from the provider's prompt
        cache (already priced into ``cost_usd``).
        """
        prompt, completion, cost = prompt_tokens or 0, completion_tokens or 0, cost_usd or 0.0
        cached = cached_tokens or 0
        # A caller whose requests reported nothing gets no entry of its own.
        nothing = not (prompt or completion or cost or cached)
        for usage in self._counted(caller, probe=probe or nothing):
            usage.prompt_tokens += prompt
            usage.completion_tokens += completion
            usage.cost_usd += cost
            usage.cached_tokens += cached

    def add_cache_hit(self, caller: str | None) -> None:
        """Count one judge call answered from the cache for ``caller``."""
        for usage in self._counted(caller):
            usage.cache_hits += 1

    def count_item(self, unscored: list[str], caller: str | None) -> None:
        """Count one graded item for ``caller``, with its unscored ``task: reason`` entries.

        Within a request's :data:`ITEM_LEDGER` the item is counted once the request is
        answered (``ItemLedger.settle``).
        """
        ledger = ITEM_LEDGER.get()
        if ledger is not None and not ledger.settled:
            ledger.entries.append((self, list(unscored), caller))
            return
        for usage in self._counted(caller):
            usage.items += 1
            if unscored:
                usage.unscored += 1
            else:
                usage.scored += 1
        self.unscored_by_reason.update(unscored)

    def refuse_item(self, caller: str | None) -> None:
        """Count one item graded for ``caller``'s request that was answered with an error."""
        for usage in self._counted(caller):
            usage.refused += 1

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the totals."""
        return {
            "items": self.items,
            "scored": self.scored,
            "unscored": self.unscored,
            "judge_calls": self.provider_requests,
            "cache_hits": self.cache_hits,
            "metric_cache_hits": self.metric_cache_hits,
            "reasks": self.reasks,
            "retries": self.retries,
            "retries_by_reason": dict(self.retries_by_reason),
            "outage_waits": self.outage_waits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "cached_tokens": self.cached_tokens,
            "unscored_by_reason": dict(self.unscored_by_reason),
        }
