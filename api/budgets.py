"""The service's cost budgets: a key's USD per UTC day, and a grading job's own ``max_cost``.

A budget is the service's policy, not the job store's: the app makes one ``KeyBudgets`` and hands
it to the synchronous routes' services and to the job runners it registers; the job store keeps
only the spend rows (``api.jobs.spend``) and the pauses.

Both are caps of ``judge.budget`` (``Cap``): a request or a job runs with a ``Budget`` of its
key's cap for today and, for a job with ``max_cost``, the job's cap, set in ``BUDGET``; every
provider request reserves its estimated cost against them before it is sent, and a request that
would pass one is not sent (its call ends unscored ``budget_exhausted``).

The caps live here, one per key-day and one per running job in this process, so a key's
concurrent requests and a job's chunks reserve against the same books. What they spend is added
to the store (``api.jobs.spend``) every ``flush_seconds`` and the totals are read back, so a
key's day survives a restart and the replicas sharing the store see each other's spend. How far
a budget can be overrun: in one process, by what was in flight when it was reached (each request
reserved its estimate, and only an answer dearer than its estimate, or its re-asks, spends
more); across replicas, additionally by what the others spent in the last ``flush_seconds``
before their figures were read back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from functools import partial

from api.errors import OverBudget
from api.jobs.database import STORE_ERRORS
from api.jobs.spend import next_midnight, utc_day
from api.jobs.store import JobStore
from core.errors import ConfigError, InputError
from judge.budget import BUDGET, Budget, Cap
from judge.config import JudgeConfig

log = logging.getLogger("bonusjudge.jobs")

KEY_LIMIT = "max_cost_per_key_usd"
"""The name a key's day cap goes by (the setting)."""

JOB_LIMIT = "max_cost"
"""The name a job's own cap goes by (the job option)."""


def require_price(max_cost_per_key: float | None, default: JudgeConfig) -> None:
    """Refuse to start with a key budget whose default judge litellm cannot price.

    Raises:
        ConfigError: (``max_cost_per_key_usd``) every request of the default judge would be
            refused (its spend could not be counted); the message names the model.
    """
    if max_cost_per_key is None or default.is_embedded:
        return
    from judge.estimate import prices_for

    if prices_for(default.model, None, None) is None:
        raise ConfigError(
            f"max_cost_per_key_usd is set, but litellm's model cost map has no price for the "
            f"judge model {default.model}, so its spend could not be counted: choose a priced "
            "model or unset the budget",
            field="max_cost_per_key_usd",
        )


class KeyBudgets:
    """The caps of this process: per key and UTC day, per running job; their books in the store.

    Args:
        store: The job store that keeps the spend.
        max_cost_per_key: USD a key may spend per UTC day; None for no key budget.
        flush_seconds: How often settled spend is written to the store and totals read back.
        clock: Seconds since the epoch (tests move the day).
    """

    def __init__(
        self,
        store: JobStore,
        *,
        max_cost_per_key: float | None,
        flush_seconds: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.max_cost_per_key = max_cost_per_key
        self.flush_seconds = flush_seconds
        self.clock = clock
        self._keys: dict[str, tuple[str, Cap]] = {}
        # A job's cap lives while a runner of the job holds it (its Budget), here.
        self._jobs: weakref.WeakValueDictionary[str, Cap] = weakref.WeakValueDictionary()
        self._unsaved_keys: dict[tuple[str, str], list[float]] = {}
        self._unsaved_jobs: dict[str, float] = {}
        self._lock = threading.Lock()
        self._flusher: asyncio.Task[None] | None = None

    # -- caps ----------------------------------------------------------------------------------

    async def key_cap(self, owner: str) -> Cap | None:
        """The cap of ``owner``'s UTC day (its spend read from the store once a day), or None."""
        if self.max_cost_per_key is None:
            return None
        day = utc_day(self.clock())
        held = self._keys.get(owner)
        if held is not None and held[0] == day:
            return held[1]
        spent, requests = await asyncio.to_thread(self.store.spend.key_day, owner, day)
        held = self._keys.get(owner)  # another request may have read it meanwhile
        if held is not None and held[0] == day:
            return held[1]
        cap = Cap(
            KEY_LIMIT, max_cost=self.max_cost_per_key, spent_cost=spent, spent_calls=requests,
            on_spend=partial(self._key_spent, owner, day),
        )
        self._keys[owner] = (day, cap)
        return cap

    def job_cap(self, job_id: str, max_cost: float, spent: float) -> Cap:
        """The cap of a job's own ``max_cost``, shared by its runners here; ``spent`` so far."""
        with self._lock:
            cap = self._jobs.get(job_id)
            if cap is None:
                cap = Cap(
                    JOB_LIMIT, max_cost=max_cost, spent_cost=spent,
                    on_spend=partial(self._job_spent, job_id),
                )
                self._jobs[job_id] = cap
        return cap

    async def check(self, owner: str) -> None:
        """Refuse a submission of ``owner`` while its day's budget is used up.

        Raises:
            OverBudget: the key's cap refused a request today, or its spend reached the limit.
        """
        cap = await self.key_cap(owner)
        if cap is None or not (cap.exhausted or cap.spent_cost >= (cap.max_cost or 0.0)):
            return
        raise OverBudget(self.over_key(cap), retry_after=self.until_next_day())

    async def budget(
        self, owner: str, config: JudgeConfig, job: Cap | None = None, *,
        field: str = "judge.model",
    ) -> Budget | None:
        """The budget of a request or job run of ``owner`` with ``config`` (None: no cap).

        Args:
            owner: The key whose day the requests are counted against.
            config: The judge the requests go to (its model is priced).
            job: The job's own cap, if it has one.
            field: The request field that chose the model, for the error.

        Raises:
            InputError: (``field``) a cap is in force and litellm has no price for the model,
                so its spend could not be counted.
        """
        if config.is_embedded:  # nothing is sent to a provider
            return None
        caps = [cap for cap in (await self.key_cap(owner), job) if cap is not None]
        if not caps:
            return None
        from judge.estimate import prices_for, request_cost

        prices = prices_for(config.model, None, None)
        if prices is None:
            raise InputError(
                f"{field}: a cost budget is in force and there is no price for "
                f"{config.model} in litellm's model cost map, so its spend cannot be counted; "
                "select a priced model",
                field=field,
            )
        return Budget(caps, request_cost(prices), prices)

    @asynccontextmanager
    async def charged(self, owner: str, config: JudgeConfig) -> AsyncIterator[Budget | None]:
        """Run the block under ``owner``'s day cap (set in ``BUDGET``); refuse a key over it.

        For the routes a caller waits on: every provider request made in the block reserves
        against the key's day before it is sent. Yields the budget (None: no cap).

        Raises:
            OverBudget: the key's day budget is used up (the block does not run).
            InputError: a budget is in force and the judge model has no price.
        """
        await self.check(owner)
        budget = await self.budget(owner, config)
        token = BUDGET.set(budget)
        try:
            yield budget
        finally:
            BUDGET.reset(token)

    async def refusal(self, owner: str) -> OverBudget:
        """The 429 of a request that ``owner``'s day cap stopped midway (limit and spend)."""
        cap = await self.key_cap(owner)
        message = self.over_key(cap) if cap is not None else "budget_exhausted"
        return OverBudget(message, retry_after=self.until_next_day())

    def over_key(self, cap: Cap) -> str:
        """The message of a key over its day's budget: the limit and the spend today."""
        return (
            f"budget_exhausted: the API key's judge calls reached {KEY_LIMIT} "
            f"${cap.max_cost:g} for today (UTC): ${cap.spent_cost:.6f} spent; it opens again at "
            f"{_iso(next_midnight(self.clock()))}"
        )

    def until_next_day(self) -> float:
        """Seconds to the next UTC midnight (``Retry-After`` of a key over its budget)."""
        now = self.clock()
        return next_midnight(now) - now

    def next_day(self) -> float:
        """The epoch time of the next UTC midnight."""
        return next_midnight(self.clock())

    # -- books ---------------------------------------------------------------------------------

    def _key_spent(self, owner: str, day: str, cost: float, requests: int) -> None:
        with self._lock:
            unsaved = self._unsaved_keys.setdefault((owner, day), [0.0, 0])
            unsaved[0] += cost
            unsaved[1] += requests

    def _job_spent(self, job_id: str, cost: float, requests: int) -> None:
        with self._lock:
            self._unsaved_jobs[job_id] = self._unsaved_jobs.get(job_id, 0.0) + cost

    def flush(self) -> None:
        """Write the spend settled since the last flush; refresh the caps from the totals.

        Blocking (a store transaction): the flusher runs it in a thread. A store that fails
        keeps the spend for the next flush.
        """
        with self._lock:
            keys = {k: (v[0], int(v[1])) for k, v in self._unsaved_keys.items()}
            job_costs = dict(self._unsaved_jobs)
            self._unsaved_keys.clear()
            self._unsaved_jobs.clear()
        if not keys and not job_costs:
            return
        try:
            key_totals, job_totals = self.store.spend.add(keys, job_costs)
        except BaseException:
            with self._lock:  # not lost: added again at the next flush
                for k, (cost, requests) in keys.items():
                    unsaved = self._unsaved_keys.setdefault(k, [0.0, 0])
                    unsaved[0] += cost
                    unsaved[1] += requests
                for job_id, cost in job_costs.items():
                    self._unsaved_jobs[job_id] = self._unsaved_jobs.get(job_id, 0.0) + cost
            raise
        with self._lock:
            # Every replica's spend, plus what settled here since this flush began.
            for (owner, day), total in key_totals.items():
                held = self._keys.get(owner)
                if held is not None and held[0] == day:
                    held[1].spent_cost = total + self._unsaved_keys.get((owner, day), [0.0])[0]
            for job_id, total in job_totals.items():
                cap = self._jobs.get(job_id)
                if cap is not None:
                    cap.spent_cost = total + self._unsaved_jobs.get(job_id, 0.0)

    async def start(self) -> None:
        """Start the flusher (every ``flush_seconds``)."""
        self._flusher = asyncio.create_task(self._flush_loop(), name="bonusjudge-spend-flush")

    async def stop(self) -> None:
        """Stop the flusher and write what is left."""
        if self._flusher is not None:
            self._flusher.cancel()
            with suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        with suppress(*STORE_ERRORS):
            await asyncio.to_thread(self.flush)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_seconds)
            try:
                await asyncio.to_thread(self.flush)
            except STORE_ERRORS:
                log.warning("job store: could not record what judge calls spent; retrying")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
