"""A cap on what judge calls spend, in USD and in requests: the one budget of the CLI and service.

Every request a ``Caller`` is about to send to a provider (a first attempt, a retry, a request
sent again after an outage) first *reserves* its estimated cost and one request against the
budget in force (:data:`BUDGET`, a context variable the CLI sets for its run and the service for
a key's request or job). A reservation that would take any cap past its limit is refused: the
request is not sent, the call ends unscored ``budget_exhausted`` (never 0), and the cap stays
exhausted, so the run stops sending while what is in flight finishes. When the provider answers
(or fails) the reservation *settles* to what the requests cost (re-asks included: they are sent
inside the provider's call, under its reservation).

So what a cap spends never exceeds its limit by more than the overrun of the calls in flight
when it was reached (each reserved its estimate, and only an answer dearer than its estimate,
or its re-asks, can spend more).

The estimate is ``judge.estimate.request_cost`` (the model's tokenizer on the exact request, the
typical answer size and litellm's prices): injected as ``cost_of``, so this module has no
pricing of its own and the engine's call path does not import the estimator.
"""

from __future__ import annotations

import contextvars
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from core.jsonl import BadLine, read_jsonl

__all__ = ["BUDGET", "Budget", "BudgetExhausted", "Cap", "Reservation", "SpendLog"]

BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "bonusjudge_budget", default=None
)
"""The budget the judge calls of the current task spend against (None: no cap).

A context variable, like ``judge.calls.TENANT``: the CLI sets it once for its run, the service
for each key's request or job, and every task ``grade_many`` starts inherits it.
"""

_ESTIMATES_KEPT = 4096
"""Estimates kept per budget, by cache key: a retry of a call reserves without counting again."""


class Pricing(Protocol):
    """Prices per token (``judge.estimate.Prices``): what settles a request's reported tokens."""

    @property
    def source(self) -> str:
        """``given`` (the caller's prices) or where else they come from (``litellm``)."""
        ...

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The price of these tokens, in USD."""
        ...


class BudgetExhausted(Exception):
    """A request was not sent: it would have taken a cap past its limit (see ``Cap.why``)."""


@dataclass
class Cap:
    """One limit and its books: USD, requests, or both.

    Attributes:
        name: What the limit is called where it was set (``--max-cost``, ``max_cost``...).
        max_cost: The most USD the requests may cost; None for no limit on cost.
        max_calls: The most requests that may be sent; None for no limit on requests.
        spent_cost: USD the settled requests cost (with what was spent before, when resumed).
        spent_calls: Requests settled.
        held_cost: USD reserved by the requests in flight.
        held_calls: Requests in flight.
        exhausted: A request was refused: no further one is sent under this cap.
        on_spend: Told ``(cost, calls)`` of every settled request (the service's store).
    """

    name: str
    max_cost: float | None = None
    max_calls: int | None = None
    spent_cost: float = 0.0
    spent_calls: int = 0
    held_cost: float = 0.0
    held_calls: int = 0
    exhausted: bool = False
    on_spend: Callable[[float, int], None] | None = field(default=None, repr=False)

    def fits(self, cost: float) -> bool:
        """Whether one more request of estimated ``cost`` stays within the limits."""
        if self.exhausted:
            return False
        if self.max_calls is not None and self.spent_calls + self.held_calls + 1 > self.max_calls:
            return False
        committed = self.spent_cost + self.held_cost + cost
        # A micro-dollar of slack: sums of float prices must not refuse an exact fit.
        return self.max_cost is None or committed <= self.max_cost + 1e-9

    def why(self) -> str:
        """The limit reached and what was spent, for the unscored detail and the CLI."""
        parts = []
        if self.max_cost is not None:
            parts.append(f"{self.name} ${self.max_cost:g}: ${self.spent_cost:.6f} spent")
        if self.max_calls is not None:
            parts.append(f"{self.max_calls} request(s): {self.spent_calls} sent")
        return "; ".join(parts) or self.name


@dataclass(frozen=True)
class Reservation:
    """What one request holds until it settles.

    Attributes:
        cost: Its estimated cost, USD.
        caps: The caps it is held against.
    """

    cost: float
    caps: tuple[Cap, ...]


class Budget:
    """Caps that every provider request reserves against before it is sent.

    Thread-safe (the service's sync routes and its event loop may share a key's cap): reserving
    and settling only add and compare numbers under a lock.

    Args:
        caps: The limits (a CLI run's; a key's day and a job's in the service).
        cost_of: A request's estimated cost in USD (``judge.estimate.request_cost``); None when
            no cap limits cost (every request is then estimated at 0).
        prices: The prices the estimate used: a request's reported tokens are settled at them
            when they were given by the caller, or when the provider reported no cost.
    """

    def __init__(
        self,
        caps: Sequence[Cap],
        cost_of: Callable[[Any], float] | None = None,
        prices: Pricing | None = None,
    ) -> None:
        self.caps = tuple(caps)
        self._cost_of = cost_of
        self._prices = prices
        self._estimates: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def exhausted(self) -> bool:
        """Whether a cap has refused a request (the run should stop feeding items)."""
        return any(cap.exhausted for cap in self.caps)

    def estimate(self, spec: Any, key: str) -> float:
        """The estimated cost of one request of ``spec`` (cache key ``key``), kept for retries.

        CPU work (the tokenizer): callers on an event loop run it in a thread.
        """
        if self._cost_of is None:
            return 0.0
        with self._lock:
            known = self._estimates.get(key)
        if known is not None:
            return known
        cost = float(self._cost_of(spec))
        with self._lock:
            self._estimates[key] = cost
            while len(self._estimates) > _ESTIMATES_KEPT:
                self._estimates.popitem(last=False)
        return cost

    def known_estimate(self, key: str) -> float | None:
        """The estimate already made for ``key`` (None: none yet, or no cost limit: 0.0)."""
        if self._cost_of is None:
            return 0.0
        with self._lock:
            return self._estimates.get(key)

    def reserve(self, cost: float) -> Reservation:
        """Hold ``cost`` and one request against every cap, or refuse.

        Raises:
            BudgetExhausted: a cap would pass its limit; that cap is now exhausted (no further
                request is sent under it) and the message names it and its spend.
        """
        with self._lock:
            for cap in self.caps:
                if not cap.fits(cost):
                    cap.exhausted = True
                    raise BudgetExhausted(
                        f"not sent: the cap is reached ({cap.why()}, "
                        f"${cap.held_cost:.6f} in flight)"
                    )
            for cap in self.caps:
                cap.held_cost += cost
                cap.held_calls += 1
        return Reservation(cost, self.caps)

    def settle(
        self,
        held: Reservation,
        calls: int,
        *,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        cost_usd: float | None = None,
        answered: bool = True,
    ) -> float:
        """Replace ``held`` by what was spent: ``calls`` requests and their cost; that cost.

        The cost is the provider's (``cost_usd``, litellm's price of its reply), or the reported
        tokens at the given prices (a model litellm does not price, or prices the caller chose);
        with nothing reported, the estimate for an answer (an answered request is billed) and 0
        for a request the provider failed without answering (a 5xx, a dropped connection).

        Args:
            held: The reservation of the request.
            calls: Requests actually sent under it (re-asks included; 0 when cancelled first).
            prompt_tokens: Prompt tokens reported for them.
            completion_tokens: Completion tokens reported for them.
            cost_usd: Their cost as the provider's client priced it.
            answered: Whether the provider answered (a reply, usable or not).
        """
        spent = self.cost_of_reply(prompt_tokens, completion_tokens, cost_usd)
        if spent is None:
            spent = held.cost if answered and calls else 0.0
        with self._lock:
            for cap in held.caps:
                cap.held_cost = max(0.0, cap.held_cost - held.cost)
                cap.held_calls = max(0, cap.held_calls - 1)
                cap.spent_cost += spent
                cap.spent_calls += calls
        for cap in held.caps:
            if cap.on_spend is not None and (spent or calls):
                cap.on_spend(spent, calls)
        return spent

    def cost_of_reply(
        self, prompt_tokens: int | None, completion_tokens: int | None, cost_usd: float | None
    ) -> float | None:
        """What reported usage costs (see ``settle``), or None when nothing was reported."""
        tokens = bool(prompt_tokens or completion_tokens)
        if tokens and self._prices is not None and (
            cost_usd is None or self._prices.source == "given"
        ):
            return self._prices.cost(prompt_tokens or 0, completion_tokens or 0)
        return cost_usd


class SpendLog:
    """What was spent on judge requests into one output file, over every run that wrote it.

    ``bonusjudge grade --max-cost/--max-calls`` caps an output file's total: a re-run that
    resumes ``results.jsonl`` counts what the runs before it spent there (``--max-calls 50``
    then ``--max-calls 100`` sends 100 requests in all, not 150). The books are a JSON line per
    settled request beside the output (``results.jsonl.spend``), appended and flushed as
    requests settle, so a run that is killed loses at most the requests in flight; every run
    writes them, capped or not, so a capped re-run also counts an uncapped first run. A fresh
    output (none, or empty) starts them again.

    Args:
        out: The output file the spending goes into.
    """

    SUFFIX = ".spend"
    """What the books' file name adds to the output's."""

    def __init__(self, out: Path) -> None:
        self.path = out.with_name(out.name + self.SUFFIX)
        self._lock = threading.Lock()
        self.before_cost, self.before_calls = 0.0, 0
        if not out.exists() or out.stat().st_size == 0:
            self.path.unlink(missing_ok=True)  # a fresh output: earlier books are not its own
            return
        if self.path.exists():
            for entry in read_jsonl(self.path, field="out"):
                if isinstance(entry, BadLine):
                    continue  # a torn last line from a killed run: that request is not counted
                _, row = entry
                self.before_cost += float(row.get("cost_usd") or 0.0)
                self.before_calls += int(row.get("requests") or 0)

    def add(self, cost: float, calls: int) -> None:
        """Record ``calls`` requests settled for ``cost`` USD (a ``Cap.on_spend`` hook)."""
        line = json.dumps({"requests": calls, "cost_usd": cost}) + "\n"
        with self._lock:
            # The preflight's probe settles before the output is opened (which makes its folder).
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)
