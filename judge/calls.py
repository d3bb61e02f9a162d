"""Judge calls: one ``CallSpec`` in, one ``CallOutcome`` (plain data and a ``CallRecord``) out.

``Caller`` is the one path every judge call takes:

1. the cache: a hit answers at once (an entry another caller paid for is reported as a fresh
   call, see ``TENANT``), and a call identical to one under way waits for that one's answer
   there instead of sending the same request again (single flight);
2. the provider, with its circuit breaker (one per model and base URL, told which caller each
   call is for, so that one caller's failing items pause that caller only): while the provider
   is in an outage the call waits for it, spending none of its retries, for at most
   ``config.max_outage`` seconds before it ends ``circuit_open``;
3. retries of retryable provider errors, on tenacity: full-jitter backoff that honours
   ``Retry-After`` (``judge.retry.backoff_delay``), at most ``config.retries`` per call and the
   run's ``RetryBudget`` in all; a call whose request has failed ``ITEM_FAILURES`` times while
   the provider answered other calls in between stops there (its content is what fails);
4. conversion of the answer to the plain JSON value that is cached and returned.

Every failure ends as an outcome with its unscored reason and detail; only an error marked
``fatal`` (a test double running out of answers) escapes. The caller counts into the grader's
``EngineStats`` every request it sends (re-asks, retries, failures and probes included) with
the tokens and cost the provider reported, and each call's ``CallRecord`` carries the same for
its own requests, so the counters, the provenance and the provider's books agree.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict

from pydantic import BaseModel
from tenacity import AsyncRetrying, RetryCallState

from bonusjudge_client.wire.grading import CallRecord, RubricRef
from core.errors import JudgeOutputError, ProviderError, SpendingError, UnscoredReason
from core.text import Language
from judge.budget import BUDGET, Budget, BudgetExhausted, Reservation
from judge.cache import Cache, judge_call_key, schema_hash
from judge.config import JudgeConfig
from judge.gates import ProviderGates
from judge.providers.base import PROBE_MESSAGES, Completion, Provider, probe_config
from judge.retry import PROBE_SOURCE, CircuitBreaker, RetryBudget, backoff_delay
from judge.stats import EngineStats
from rubrics.loader import RenderedPrompt
from rubrics.schema import Rubric

log = logging.getLogger("bonusjudge")

TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "bonusjudge_tenant", default=None
)
"""Who the judge calls of the current task are made for (the service sets the API-key digest).

A context variable rather than a parameter: the service sets it once per request or job, and
every task ``grade_many`` starts inherits it. None (the CLI, the calibration runner) means one
caller.
"""

ITEM_FAILURES = 2
"""Failed requests after which a call stops retrying if the provider answered others meanwhile.

A request the provider fails (5xx, a dropped connection) while it answers other calls fails
because of what it carries: retrying it only bills again. One retry still covers a transient
error; with the defaults a poison item costs 2 requests per judge task (4 for coverage and
defects), where it cost 5 per task (10) before.
"""

PROVIDER_REASONS: frozenset[str] = frozenset(
    {"provider_error", "rate_limited", "timeout", "circuit_open"}
)
"""Unscored reasons that mean the provider failed (rather than its answer being unusable)."""


class Backoff(Protocol):
    """The delay before a retry: ``judge.retry.backoff_delay``'s signature."""

    def __call__(
        self, attempt: int, *, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        ...


MAX_STORED_RAW = 16_384
"""Most characters of a judge's raw reply a cache entry keeps."""


def stored_raw(raw: str | None) -> str | None:
    """What a cache entry keeps of the judge's raw reply: all of it up to ``MAX_STORED_RAW``.

    The validated value is bounded by its response model, but the reply around it is not (a
    5 MB answer padded with whitespace or unknown fields validated and was cached whole); the
    raw text is kept to read a verdict by, and its first 16 KB serve that.
    """
    if raw is None or len(raw) <= MAX_STORED_RAW:
        return raw
    return raw[:MAX_STORED_RAW] + f"... [{len(raw) - MAX_STORED_RAW} more characters not kept]"


class CallerOptions(TypedDict, total=False):
    """The options of :class:`Caller` that a grader passes on (all optional; see ``Caller``)."""

    retry_budget: RetryBudget | None
    breaker: CircuitBreaker | None
    rng: random.Random | None
    sleep: Callable[[float], Awaitable[Any]]
    cache_scope: Literal["shared", "per_key"]


def rubric_ref(rubric: Rubric, language: Language) -> RubricRef:
    """The reference a result records for ``rubric`` rendered in ``language``."""
    return RubricRef(id=rubric.id, version=rubric.version, hash=rubric.hash, language=language)


@dataclass(frozen=True)
class CallSpec:
    """Everything one judge call needs.

    Attributes:
        task: The task recorded in the ``CallRecord`` (``coverage``, ``defects``...).
        rubric: The rubric rendered (its id, version and hash are part of the cache key).
        language: The language it was rendered in.
        messages: The rendered messages, exactly as sent.
        config: The judge configuration (model, sampling, retries, breaker wait, cache).
        convert: Turns the provider's output into the JSON value that is cached and returned;
            a ``JudgeOutputError`` it raises (a faithful-mode parse failure) ends the call
            with that reason, and nothing is cached.
        response_model: The pydantic model to fill, or None for a plain-text answer.
        validation_context: Context for the response model's validators.
    """

    task: str
    rubric: Rubric
    language: Language
    messages: list[dict[str, str]]
    config: JudgeConfig
    convert: Callable[[Any], Any]
    response_model: type[BaseModel] | None = None
    validation_context: dict[str, Any] | None = None

    @classmethod
    def for_prompt(
        cls,
        task: str,
        prompt: RenderedPrompt,
        config: JudgeConfig,
        convert: Callable[[Any], Any],
        *,
        response_model: type[BaseModel] | None = None,
        validation_context: dict[str, Any] | None = None,
    ) -> CallSpec:
        """The spec of a call sending ``prompt`` (its rubric, language and messages)."""
        return cls(
            task=task,
            rubric=prompt.rubric,
            language=prompt.language,
            messages=prompt.messages,
            config=config,
            convert=convert,
            response_model=response_model,
            validation_context=validation_context,
        )

    def cache_key(self, tenant: str | None = None) -> str:
        """The cache key: everything that changes the judge's output, and nothing else.

        Args:
            tenant: The caller the entry is kept for when the cache is partitioned per caller
                (None: shared).
        """
        return judge_call_key(
            output_fields=self.config.output_fields(),
            messages=self.messages,
            rubric={"id": self.rubric.id, "version": self.rubric.version, "hash": self.rubric.hash},
            response_schema=schema_hash(self.response_model),
            tenant=tenant,
        )


@dataclass
class CallOutcome:
    """How one judge call ended.

    Attributes:
        value: The converted answer (plain JSON data), or None when the call failed.
        record: What the call cost, for the result's provenance.
        reason: Why the call failed (an unscored reason), or None when it succeeded.
        detail: A readable account of the failure.
    """

    value: Any
    record: CallRecord
    reason: UnscoredReason | None = None
    detail: str | None = None


class _CircuitOpen(Exception):
    """The provider's outage outlasted ``max_outage``: the call gives up waiting."""


@dataclass
class _CallState:
    """One call's running account: what goes into its ``CallRecord``.

    Attributes:
        tenant: Whom the call is made for (:data:`TENANT`).
        failures: Its requests that failed (retryable failures only).
        answered_then: The breaker's count of answered calls at its first failure.
        follows_item: It stopped retrying: the provider answered other calls meanwhile.
    """

    spec: CallSpec
    key: str
    ref: RubricRef
    started: float
    tenant: str | None = None
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    budget_exhausted: bool = False
    failures: int = 0
    answered_then: int | None = None
    follows_item: bool = False

    def record(self, outcome: str) -> CallRecord:
        """The call's record, ending with ``outcome`` (``ok`` or the unscored reason)."""
        return CallRecord(
            task=self.spec.task,
            rubric=self.ref,
            cached=False,
            attempts=self.attempts,
            outcome=outcome,
            prompt_tokens=self.prompt_tokens or None,
            completion_tokens=self.completion_tokens or None,
            cached_tokens=self.cached_tokens or None,
            cost_usd=self.cost or None,
            latency_s=round(time.monotonic() - self.started, 4),
            cache_key=self.key,
        )

    def failed(self, reason: UnscoredReason, detail: str) -> CallOutcome:
        """The outcome of a call that ended with ``reason``."""
        return CallOutcome(None, self.record(reason), reason, detail)


class Caller:
    """Makes judge calls through the cache, the provider, retries, the budget and the breakers.

    Args:
        provider: The judge backend.
        cache: The judge-call cache (a disabled one when caching is off).
        stats: The grader's counters, which the caller adds to.
        retry_budget: Retries allowed for the whole life of this caller (a run).
        breaker: The breaker whose settings every judge's breaker copies (the grader's default
            judge gets this one itself).
        rng: Random source for backoff jitter (seedable for tests).
        sleep: The sleep used between retries (tests inject a fast one).
        backoff: The delay before each retry (``backoff_delay``; tests wrap it).
        cache_scope: ``shared``: one cache for every caller (:data:`TENANT`), a hit on an entry
            another caller paid for reported as a fresh call (which hides only its ``cached``
            flag: its missing usage and its speed still show); ``per_key``: each caller's
            judge calls are cached apart (no caller ever sees another's entries, at the cost of
            paying again), and the grader keeps its metric values and matcher verdicts apart
            alike (:meth:`partition`). The service's default is ``per_key`` with API keys.
    """

    def __init__(
        self,
        provider: Provider,
        cache: Cache,
        stats: EngineStats,
        *,
        retry_budget: RetryBudget | None = None,
        breaker: CircuitBreaker | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        backoff: Backoff = backoff_delay,
        cache_scope: Literal["shared", "per_key"] = "shared",
    ) -> None:
        self.provider = provider
        self.cache = cache
        self.stats = stats
        self.retry_budget = retry_budget or RetryBudget()
        # Each provider's breaker and connection limit (breaker: the template of new breakers).
        self.gates = ProviderGates(breaker)
        self.cache_scope = cache_scope
        # Calls under way by cache key, so an identical call waits for the first one's answer
        # (single flight) rather than sending the same request again.
        self._in_flight: dict[str, asyncio.Event] = {}
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._backoff = backoff

    def partition(self) -> str | None:
        """The caller whose entries this task's cache look-ups read and write (:data:`TENANT`).

        None (one shared partition) under the ``shared`` scope or for a task made for nobody;
        the metric values and matcher verdicts of a grader are kept in the same partition as
        its judge calls, so a per-key scope leaves no cached result of another key to time.
        """
        if self.cache_scope != "per_key":
            return None
        return TENANT.get() or None  # "" is the one caller of a service without keys

    async def probe(self, config: JudgeConfig) -> None:
        """Send one probe request to ``config``'s provider and tell its breaker the outcome.

        For a caller that makes no judge call while the provider is in an outage or refuses the
        credentials (the service's readiness, with no traffic coming): only an answer can tell
        the breaker the provider is back. Claim the probe first (``CircuitBreaker.claim_probe``).
        The request is the preflight's (one token), fed to the breaker as a judge call's attempt
        would be; it is counted as a judge call. Never raises but ``CancelledError``: the
        outcome is the breaker's state.
        """
        breaker = self.gates.breaker_for(config)
        self.stats.add_requests(1, None, probe=True)
        try:
            async with self.gates.connection(config):
                completion = await self.provider.complete(
                    list(PROBE_MESSAGES), None, probe_config(config)
                )
        except asyncio.CancelledError:
            breaker.release_probe()
            raise
        except JudgeOutputError as exc:
            self._probe_spent(exc)
            # An answer, even a cut-off one: the provider is up.
            breaker.record_success(PROBE_SOURCE)
        except ProviderError as exc:
            self._probe_spent(exc)
            if exc.retryable:
                breaker.record_failure(PROBE_SOURCE)
            else:
                _answered(breaker, exc, PROBE_SOURCE)
            log.info("probe of %s: %s", config.model, exc)
        except Exception as exc:
            breaker.record_failure(PROBE_SOURCE)
            log.warning("probe of %s: unexpected %s: %s", config.model, type(exc).__name__, exc)
        else:
            self._probe_spent(completion)
            breaker.record_success(PROBE_SOURCE)

    def _probe_spent(self, spent: Completion | SpendingError) -> None:
        """Count a probe's re-asks and usage (for no caller: totals only)."""
        self.stats.add_requests(max(0, spent.attempts - 1), None, probe=True)
        self.stats.add_usage(
            spent.prompt_tokens, spent.completion_tokens, spent.cost_usd, None,
            cached_tokens=spent.cached_tokens, probe=True,
        )

    # -- one call ------------------------------------------------------------------------------

    async def call(self, spec: CallSpec) -> CallOutcome:
        """Make one judge call; see the module docstring for the path it takes.

        Raises:
            Exception: only an error the provider marks ``fatal``.
        """
        tenant = TENANT.get() or None  # "" is the one caller of a service without keys
        key = spec.cache_key(self.partition())
        ref = rubric_ref(spec.rubric, spec.language)
        started = time.monotonic()
        if not spec.config.cache:
            return await self._ask(spec, key, ref, tenant, started)
        hit = await self._cached(spec, key, ref, tenant, started)
        if hit is not None:
            return hit
        leader = self._in_flight.get(key)
        if leader is not None:
            # The same call is on its way (five candidates of one question need the same
            # extraction): its answer lands in the cache, so wait for it there instead of
            # paying for it twice. Should it fail, this call is sent on its own.
            await leader.wait()
            hit = await self._cached(spec, key, ref, tenant, started)
            if hit is not None:
                return hit
            return await self._ask(spec, key, ref, tenant, started)
        done = self._in_flight[key] = asyncio.Event()
        try:
            return await self._ask(spec, key, ref, tenant, started)
        finally:
            del self._in_flight[key]
            done.set()

    async def _ask(
        self, spec: CallSpec, key: str, ref: RubricRef, tenant: str | None, started: float
    ) -> CallOutcome:
        """The provider's part of ``call``: retries, conversion, and the answer cached."""
        state = _CallState(spec=spec, key=key, ref=ref, started=started, tenant=tenant)
        try:
            completion = await self._with_retries(state)
        except _CircuitOpen as exc:
            return state.failed("circuit_open", str(exc))
        except BudgetExhausted as exc:
            return state.failed("budget_exhausted", str(exc))
        except ProviderError as exc:
            if state.budget_exhausted:
                return state.failed(exc.reason, f"{exc} (the run's retry budget is exhausted)")
            if state.follows_item:
                return state.failed(
                    exc.reason,
                    f"{exc} (failed {state.failures} times while the provider answered other "
                    "calls: not retried further, as what this call sends is what fails)",
                )
            return state.failed(exc.reason, str(exc))
        except JudgeOutputError as exc:
            return state.failed(exc.reason, str(exc))
        try:
            value = spec.convert(completion.output)
        except JudgeOutputError as exc:
            return state.failed(exc.reason, str(exc))
        if spec.config.cache:
            await self.cache.aset(
                key, {"value": value, "raw": stored_raw(completion.raw_text), "tenant": tenant}
            )
        return CallOutcome(value, state.record("ok"))

    async def _cached(
        self, spec: CallSpec, key: str, ref: RubricRef, tenant: str | None, started: float
    ) -> CallOutcome | None:
        """The outcome served from the cache, or None on a miss."""
        cached = await self.cache.aget(key)
        if cached is None:
            return None
        self.stats.add_cache_hit(tenant)
        # An entry another caller paid for is reported as a fresh call: "cached" would tell this
        # caller that someone else graded the same item (a cross-key oracle). Only the flag is
        # hidden: no usage and a millisecond latency still tell, hence per_key for keyed services.
        own = tenant is None or cached.get("tenant") == tenant
        return CallOutcome(
            value=cached["value"],
            record=CallRecord(
                task=spec.task,
                rubric=ref,
                cached=own,
                attempts=0 if own else 1,
                outcome="ok",
                cache_key=key,
                latency_s=round(time.monotonic() - started, 4),
            ),
        )

    async def _with_retries(self, state: _CallState) -> Completion:
        """The provider's answer, retrying retryable errors (tenacity) within both limits.

        The decision to retry spends the run's budget, so it is taken once, in the ``retry``
        predicate: a retry refused by the budget marks the call (its detail says so). Retry
        number ``n`` waits ``backoff(n, retry_after=...)`` through the injectable sleep.
        """
        limit = state.spec.config.retries

        def should_retry(retry_state: RetryCallState) -> bool:
            exc = _failure(retry_state)
            if not isinstance(exc, ProviderError) or not exc.retryable or state.follows_item:
                return False
            if retry_state.attempt_number > limit:  # this call's own retries are spent
                return False
            if not self.retry_budget.take():
                state.budget_exhausted = True
                return False
            self.stats.retries += 1
            self.stats.retries_by_reason[exc.reason] += 1
            return True

        def wait(retry_state: RetryCallState) -> float:
            exc = _failure(retry_state)
            retry_after = exc.retry_after if isinstance(exc, ProviderError) else None
            return self._backoff(retry_state.attempt_number, retry_after=retry_after, rng=self._rng)

        # Most calls succeed at once, and setting tenacity up costs ~50 us of CPU per call (a
        # tenth of a judge call on the direct transport): the first attempt runs before it, and
        # only a retryable failure is handed over, as the outcome of tenacity's first attempt, so
        # the retry decision, budget and backoff are tenacity's as before.
        try:
            return await self._attempt(state)
        except ProviderError as exc:
            if not exc.retryable:
                raise
            first: ProviderError | None = exc

        async def attempt(state: _CallState) -> Completion:
            nonlocal first
            if first is not None:
                failed, first = first, None
                raise failed
            return await self._attempt(state)

        retrying = AsyncRetrying(retry=should_retry, wait=wait, sleep=self._pause)
        completion: Completion = await retrying(attempt, state)
        return completion

    async def _pause(self, seconds: float) -> None:
        # tenacity hands over its own float subclass; the injected sleep records plain floats.
        await self._sleep(float(seconds))

    async def _attempt(self, state: _CallState) -> Completion:
        """One request to the provider, sent again for as long as an outage lasts.

        Feeds the breaker, naming the call's tenant: an answer (even an unusable one, or a 4xx)
        is a success, a transport failure a failure. A retryable failure that leaves the call's
        tenant held back (this one opened the breaker, a probe failed, or the tenant's own calls
        keep failing while others are answered) is waited out with the others and asked again,
        spending none of its retries; but a call that has failed ``ITEM_FAILURES`` times while
        the provider answered other calls ends there (``state.follows_item``). Every request is
        counted with what the provider reported for it.

        Raises:
            _CircuitOpen: the outage outlasted ``max_outage``.
            ProviderError: the provider failed (retryable or not); an unexpected exception is
                reported as a non-retryable one.
            JudgeOutputError: the judge answered, but not usably (after re-asks).
        """
        config, tenant = state.spec.config, state.tenant
        breaker = self.gates.breaker_for(config)
        while True:
            if not breaker.allow(tenant) and not await self._await_breaker(
                breaker, config, tenant
            ):
                raise _CircuitOpen(
                    f"calls to the provider have been failing for {breaker.open_for(tenant):.0f}"
                    f" s, longer than max_outage ({config.max_outage:g} s); grade this item "
                    "again later"
                )
            held = await self._reserve(state)
            try:
                completion = await self._send(state, held)
            except ProviderError as exc:
                self._spent(state, exc)
                if not exc.retryable:
                    _answered(breaker, exc, tenant)
                    raise
                breaker.record_failure(tenant)
                state.failures += 1
                if state.answered_then is None:
                    state.answered_then = breaker.answered
                elif state.failures >= ITEM_FAILURES and breaker.answered > state.answered_then:
                    state.follows_item = True
                    raise
                if breaker.holds(tenant):
                    self.stats.outage_waits += 1
                    continue
                raise
            except asyncio.CancelledError:
                breaker.release_probe(tenant)  # a cancelled probe must not leave others waiting
                raise
            except JudgeOutputError as exc:
                # The provider is up (it answered), so the breaker sees a success.
                breaker.record_success(tenant)
                self._spent(state, exc)
                raise
            except Exception as exc:
                if getattr(exc, "fatal", False):
                    raise
                log.exception("unexpected error from the judge provider")
                breaker.record_failure(tenant)
                raise ProviderError(
                    f"unexpected {type(exc).__name__}: {str(exc)[:300]}", reason="provider_error"
                ) from exc
            breaker.record_success(tenant)
            self._spent(state, completion)
            return completion

    async def _reserve(self, state: _CallState) -> tuple[Budget, Reservation] | None:
        """Reserve the next request against the budget in force (:data:`BUDGET`), if any.

        Raises:
            BudgetExhausted: the request would pass a cap; it is not sent.
        """
        budget = BUDGET.get()
        if budget is None:
            return None
        cost = budget.known_estimate(state.key)
        if cost is None:  # the tokenizer is CPU work: off the event loop
            cost = await asyncio.to_thread(budget.estimate, state.spec, state.key)
        return budget, budget.reserve(cost)

    async def _send(
        self, state: _CallState, held: tuple[Budget, Reservation] | None
    ) -> Completion:
        """One ``provider.complete`` of the call, settling its reservation with what it cost.

        Holds one of the provider's connections (:meth:`connection`) while it is in flight;
        the transport's re-asks go one after another inside it. The request is counted (the
        call's attempts, the totals and its tenant's usage) once it holds the connection, as
        it is sent: one cancelled while it waited for it was never sent, so it is not counted
        and its reservation is given back, while one cancelled in flight counts (the provider
        may bill it), so the usage equals what the provider received.
        """
        spec, sent = state.spec, False
        try:
            async with self.gates.connection(spec.config):
                sent = True  # from here on, _send_now settles the reservation
                state.attempts += 1
                self.stats.add_requests(1, state.tenant)
                return await self._send_now(spec, held)
        finally:
            if not sent and held is not None:  # cancelled before it was sent: nothing spent
                budget, reservation = held
                budget.settle(reservation, 0, answered=False)

    async def _send_now(
        self, spec: CallSpec, held: tuple[Budget, Reservation] | None
    ) -> Completion:
        request = self.provider.complete(
            spec.messages, spec.response_model, spec.config,
            validation_context=spec.validation_context,
        )
        if held is None:
            return await request
        budget, reservation = held
        spent: Completion | SpendingError | None = None
        try:
            spent = await request
            return spent
        except SpendingError as exc:
            spent = exc
            raise
        finally:
            if spent is None:  # cancelled, or an unexpected error: what it cost is unknown
                budget.settle(reservation, 1)
            else:
                budget.settle(
                    reservation, spent.attempts, prompt_tokens=spent.prompt_tokens,
                    completion_tokens=spent.completion_tokens, cost_usd=spent.cost_usd,
                    # A provider failure bills only the usage it reports (its earlier re-asks).
                    answered=not isinstance(spent, ProviderError),
                )

    def _spent(
        self, state: _CallState, spent: Completion | SpendingError
    ) -> None:
        """Count what one provider call spent beyond its first request (already counted).

        Its further requests (re-asks, those before a transport failure included) and the usage
        the provider reported, into the call's record, the totals and its tenant's usage.
        """
        extra = max(0, spent.attempts - 1)
        state.attempts += extra
        self.stats.add_requests(extra, state.tenant)
        self.stats.reasks += extra
        prompt, completion, cost = spent.prompt_tokens, spent.completion_tokens, spent.cost_usd
        state.prompt_tokens += prompt or 0
        state.completion_tokens += completion or 0
        state.cost += cost or 0.0
        state.cached_tokens += spent.cached_tokens or 0
        self.stats.add_usage(
            prompt, completion, cost, state.tenant, cached_tokens=spent.cached_tokens
        )

    async def _await_breaker(
        self, breaker: CircuitBreaker, config: JudgeConfig, tenant: str | None
    ) -> bool:
        """Wait while calls of ``tenant`` are held back; True once a call may go ahead.

        A call whose caller's fresh probe is out waits for its answer whatever ``max_outage``
        (one request's time). False when the pause has lasted longer than
        ``config.max_outage``: the item then ends
        ``circuit_open`` (a reason a re-run or ``--retry-unscored`` clears), so a provider that
        never comes back cannot hold a run forever.
        """
        while not breaker.allow(tenant):
            if breaker.open_for(tenant) >= config.max_outage and not breaker.probing_for(tenant):
                return False
            # Real time, not the injectable backoff sleep: the breaker's clock is monotonic.
            await asyncio.sleep(min(1.0, max(0.05, breaker.retry_in(tenant))))
        return True


def _answered(breaker: CircuitBreaker, exc: ProviderError, source: str | None) -> None:
    """Tell ``breaker`` of a request of ``source`` the provider answered with a 4xx (``exc``).

    A 4xx is this request's own problem, and the provider answered: it is up. A 401 or 403 is
    kept apart, as a refusal of the credentials, which no other request gets past either.
    """
    if exc.status in (401, 403):
        breaker.record_refusal(exc.status, source)
    else:
        breaker.record_success(source)


def _failure(retry_state: RetryCallState) -> BaseException | None:
    """The exception the last attempt raised, or None when it returned."""
    outcome = retry_state.outcome
    if outcome is None or not outcome.failed:
        return None
    return outcome.exception()
