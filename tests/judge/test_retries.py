"""Retries, the run's retry budget and the circuit breaker, through the ``Caller`` and the engine.

The ``Caller`` tests send one ``CallSpec`` at a scripted provider and check what it did: which
backoff it asked for (retry number, ``Retry-After``), how many requests went out, what the
budget and the breaker saw, and the reason and detail a failure ends with. The engine tests
check the same policy over whole items. ``backoff_delay`` itself (full jitter, the cap) is
pinned in ``test_rel_faults.py``; real HTTP faults there too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from typing import Any

import pytest
from pydantic import BaseModel

from core.errors import JudgeOutputError, ProviderError
from judge.cache import JudgeCache
from judge.calls import Caller, CallSpec
from judge.config import JudgeConfig
from judge.providers.base import Completion
from judge.providers.fake import FakeCall, FakeProvider, FakeProviderExhausted, covering, defects
from judge.retry import CircuitBreaker, RetryBudget, backoff_delay
from judge.stats import EngineStats
from judge.verdicts import DefectJudgement
from rubrics.loader import load_library
from tests.helpers.engine import ENGINE_CONFIG as CFG
from tests.helpers.engine import by_task
from tests.helpers.engine import levin_request as request
from tests.helpers.engine import quiet_grader as grader

RATE_LIMITED = ProviderError("429", reason="rate_limited", retryable=True, status=429)
DOWN = ProviderError("503", reason="provider_error", retryable=True, status=503)
UNAUTHORIZED = ProviderError("401", reason="provider_error", retryable=False, status=401)


class Sleeps:
    """An instant sleep that records the delays it was asked for."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Backoffs:
    """``backoff_delay`` that records ``(retry number, retry_after, delay)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, float | None, float]] = []

    def __call__(
        self, attempt: int, *, retry_after: float | None = None, rng: Any = None
    ) -> float:
        delay = backoff_delay(attempt, retry_after=retry_after, rng=rng)
        self.calls.append((attempt, retry_after, delay))
        return delay


def spec(config: JudgeConfig = CFG) -> CallSpec:
    """A defects call, rendered from the shipped rubric."""
    library = load_library()
    prompt = library.render(
        library.for_task(config.rubric, "defects"),
        "en",
        {"question": "Why?", "reference": "Because.", "response": "No idea."},
    )
    return CallSpec.for_prompt(
        "defects",
        prompt,
        config,
        lambda out: [d.model_dump() for d in out.defects],
        response_model=DefectJudgement,
    )


def make_caller(provider: Any, breaker: CircuitBreaker | None = None, **kw: Any) -> Caller:
    """A caller over ``provider``; ``breaker`` (when given) is CFG's judge's breaker."""
    kw.setdefault("sleep", Sleeps())
    kw.setdefault("rng", random.Random(0))
    caller = Caller(provider, JudgeCache(None), EngineStats(), breaker=breaker, **kw)
    if breaker is not None:
        caller.gates.set_breaker(CFG, breaker)
    return caller


def scripted(*outputs: Any) -> FakeProvider:
    return FakeProvider(outputs=list(outputs))


def opened(threshold: int = 1, cooldown: float = 0.05, max_cooldown: float = 1.0) -> CircuitBreaker:
    """A breaker that an outage has just opened."""
    breaker = CircuitBreaker(threshold=threshold, cooldown=cooldown, max_cooldown=max_cooldown)
    for _ in range(threshold):
        breaker.record_failure()
    assert breaker.state == "open"
    return breaker


# -- retries and backoff through the Caller --------------------------------------------------------


async def test_retry_number_and_retry_after_reach_the_backoff() -> None:
    err = ProviderError("429", reason="rate_limited", retryable=True, status=429, retry_after=3)
    sleeps, backoffs = Sleeps(), Backoffs()
    caller = make_caller(scripted(err, DOWN, err, defects()), sleep=sleeps, backoff=backoffs)
    outcome = await caller.call(spec())
    assert outcome.reason is None and outcome.value == []
    assert [(n, after) for n, after, _ in backoffs.calls] == [(1, 3), (2, None), (3, 3)]
    # What the backoff chose is what was slept, as plain floats.
    assert sleeps.delays == [delay for _, _, delay in backoffs.calls]
    assert all(type(d) is float for d in sleeps.delays)
    assert sleeps.delays[0] >= 3 and sleeps.delays[2] >= 3  # Retry-After is a floor
    assert outcome.record.attempts == 4 and outcome.record.outcome == "ok"
    assert caller.stats.retries == 3 and caller.stats.provider_calls == 4
    assert caller.stats.retries_by_reason == {"rate_limited": 2, "provider_error": 1}


async def test_retries_end_at_the_configured_number() -> None:
    sleeps = Sleeps()
    caller = make_caller(scripted(*[DOWN] * 5), sleep=sleeps)
    outcome = await caller.call(spec(CFG.model_copy(update={"retries": 2})))
    assert outcome.reason == "provider_error" and outcome.detail == "503"
    assert outcome.record.attempts == 3 and outcome.record.outcome == "provider_error"
    assert len(sleeps.delays) == 2 and caller.stats.retries == 2
    assert caller.retry_budget.spent == 2


async def test_a_refusal_of_the_run_budget_is_named_in_the_detail() -> None:
    budget = RetryBudget(limit=1)
    caller = make_caller(scripted(*[RATE_LIMITED] * 3), retry_budget=budget)
    first = await caller.call(spec())
    assert first.reason == "rate_limited"
    assert first.detail == "429 (the run's retry budget is exhausted)"
    assert first.record.attempts == 2  # one retry spent, the second refused
    second = await caller.call(spec())
    assert second.record.attempts == 1 and "retry budget is exhausted" in (second.detail or "")
    assert budget.spent == 1 and budget.refused == 2 and caller.stats.retries == 1


async def test_no_retries_means_no_budget_spent() -> None:
    budget = RetryBudget(limit=5)
    caller = make_caller(scripted(RATE_LIMITED), retry_budget=budget)
    outcome = await caller.call(spec(CFG.model_copy(update={"retries": 0})))
    assert outcome.reason == "rate_limited" and outcome.detail == "429"
    assert budget.spent == 0 and budget.refused == 0


async def test_non_retryable_errors_are_not_retried_and_leave_the_breaker_closed() -> None:
    sleeps = Sleeps()
    breaker = CircuitBreaker(threshold=1)
    caller = make_caller(scripted(UNAUTHORIZED), sleep=sleeps, breaker=breaker)
    outcome = await caller.call(spec())
    assert outcome.reason == "provider_error" and outcome.record.attempts == 1
    assert sleeps.delays == [] and caller.stats.retries == 0
    assert caller.gates.breaker_for(CFG).state == "closed"


async def test_unusable_answers_keep_their_reason_and_count_re_asks() -> None:
    err = JudgeOutputError("bad", reason="validation_failure", attempts=3)
    caller = make_caller(scripted(err), breaker=CircuitBreaker(threshold=1))
    outcome = await caller.call(spec())
    assert outcome.reason == "validation_failure" and outcome.detail == "bad"
    assert outcome.record.attempts == 3 and caller.stats.reasks == 2
    # It answered: the provider is up.
    assert caller.gates.breaker_for(CFG).consecutive_failures == 0


async def test_a_transport_failure_after_re_asks_counts_every_request() -> None:
    err = ProviderError("401", reason="provider_error", retryable=False, status=401, attempts=2)
    outcome = await make_caller(scripted(err)).call(spec())
    assert outcome.record.attempts == 2


async def test_unexpected_errors_end_provider_error_and_count_as_a_failure() -> None:
    caller = make_caller(scripted(ValueError("boom")))
    outcome = await caller.call(spec())
    assert outcome.reason == "provider_error"
    assert outcome.detail == "unexpected ValueError: boom"
    assert caller.stats.retries == 0 and caller.gates.breaker_for(CFG).consecutive_failures == 1


async def test_fatal_errors_escape() -> None:
    caller = make_caller(scripted())
    with pytest.raises(FakeProviderExhausted):
        await caller.call(spec())


async def test_a_failed_conversion_is_unscored_with_the_tokens_spent() -> None:
    def refuse(out: Any) -> Any:
        raise JudgeOutputError("cannot read", reason="parse_failure")

    caller = make_caller(scripted(defects()))
    outcome = await caller.call(dataclasses.replace(spec(), convert=refuse))
    assert outcome.reason == "parse_failure" and outcome.record.prompt_tokens == 100


# -- the circuit breaker through the Caller --------------------------------------------------------


async def test_an_outage_pauses_the_call_and_a_probe_resumes_it() -> None:
    """The failure that opens the breaker spends no retry: the call waits, then goes on."""
    sleeps = Sleeps()
    breaker = CircuitBreaker(threshold=1, cooldown=0.05)
    caller = make_caller(scripted(DOWN, defects()), sleep=sleeps, breaker=breaker)
    outcome = await caller.call(spec(CFG.model_copy(update={"retries": 0})))
    assert outcome.reason is None and outcome.record.attempts == 2
    assert caller.stats.outage_waits == 1 and caller.stats.retries == 0
    assert sleeps.delays == []  # the wait is the breaker's (real time), not a backoff
    assert breaker.state == "closed" and breaker.opened_count == 1


class Timed:
    """A provider that answers after ``latency`` seconds, logging when each request ran."""

    def __init__(self, latency: float, outputs: list[Any] | None = None) -> None:
        self.latency = latency
        self.outputs = list(outputs or [])
        self.spans: list[tuple[float, float]] = []

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        start = time.monotonic()
        await asyncio.sleep(self.latency)
        self.spans.append((start, time.monotonic()))
        output = self.outputs.pop(0) if self.outputs else defects()
        if isinstance(output, BaseException):
            raise output
        assert response_model is not None
        return Completion(output=response_model.model_validate(output), raw_text="{}")


async def test_while_half_open_one_probe_goes_out_alone() -> None:
    provider = Timed(latency=0.05)
    caller = make_caller(provider, breaker=opened(cooldown=0.02))
    outcomes = await asyncio.gather(*(caller.call(spec()) for _ in range(5)))
    assert all(o.reason is None for o in outcomes)
    spans = sorted(provider.spans)
    probe_end = spans[0][1]
    assert all(start >= probe_end for start, _ in spans[1:])  # the others waited for its answer


async def test_a_failed_probe_reopens_the_breaker_for_longer() -> None:
    provider = Timed(latency=0.0, outputs=[DOWN, defects()])
    breaker = opened(cooldown=0.05, max_cooldown=1.0)
    caller = make_caller(provider, breaker=breaker)
    outcome = await caller.call(spec(CFG.model_copy(update={"retries": 0})))
    assert outcome.reason is None and caller.stats.outage_waits == 1
    (_, failed_probe), (second_probe, _) = provider.spans
    assert second_probe - failed_probe >= 0.09  # the cool-down doubled: 0.05 -> 0.1 s
    assert breaker.state == "closed"


async def test_past_max_outage_the_call_ends_circuit_open_without_a_request() -> None:
    provider = scripted()
    caller = make_caller(provider, breaker=opened(cooldown=3600))
    outcome = await caller.call(spec(CFG.model_copy(update={"max_outage": 0.0})))
    assert outcome.reason == "circuit_open" and outcome.record.attempts == 0
    assert "longer than max_outage (0 s)" in (outcome.detail or "")
    assert provider.calls == []


async def test_a_cancelled_probe_lets_another_call_probe() -> None:
    breaker = opened(cooldown=0.01)
    caller = make_caller(Timed(latency=10.0), breaker=breaker)
    probe = asyncio.ensure_future(caller.call(spec()))
    await asyncio.sleep(0.1)  # past the cool-down: the call is the probe, out for 10 s
    assert breaker.state == "half_open" and not breaker.allow()
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert breaker.allow()  # the next call may probe at once


# -- the same policy over whole items (the engine) -------------------------------------------------


async def test_a_grader_passes_its_settings_to_its_caller() -> None:
    budget, breaker = RetryBudget(limit=3), CircuitBreaker(threshold=7)
    g = grader(FakeProvider(outputs=[]), retry_budget=budget, breaker=breaker)
    assert g.caller.retry_budget is budget
    assert g.caller.gates.breaker_for(CFG) is breaker


async def test_retryable_provider_errors_are_retried_then_succeed():
    err = ProviderError("429", reason="rate_limited", retryable=True, status=429, retry_after=1)
    fake = FakeProvider(handler=by_task([err, err, covering(1, 2, n=2)], [defects()]))
    g = grader(fake)
    result = await g.grade(request())
    assert result.coverage.coverage == 1.0
    assert g.stats.retries == 2


async def test_provider_errors_beyond_retries_are_unscored_with_reason():
    err = ProviderError("503", reason="provider_error", retryable=True, status=503)
    fake = FakeProvider(handler=by_task([err] * 10, [defects()]))
    cfg = CFG.model_copy(update={"retries": 2})
    result = await grader(fake, cfg).grade(request())
    assert result.coverage.status == "unscored"
    assert result.coverage.reason == "provider_error"
    assert result.provenance.calls[0].attempts == 3


async def test_non_retryable_error_is_not_retried():
    err = ProviderError("401", reason="provider_error", retryable=False, status=401)
    fake = FakeProvider(handler=by_task([err], [defects()]))
    g = grader(fake)
    result = await g.grade(request())
    assert result.coverage.reason == "provider_error"
    assert g.stats.retries == 0


async def test_retry_budget_caps_retries_for_the_run():
    err = ProviderError("429", reason="rate_limited", retryable=True, status=429)
    fake = FakeProvider(handler=lambda call: err)
    g = grader(fake, retry_budget=RetryBudget(limit=3))
    results = [r async for r in g.grade_many([request(id=f"q{i}") for i in range(5)])]
    assert g.stats.retries == 3
    assert all(r.status == "unscored" for r in results)
    assert g.caller.retry_budget.refused > 0


async def test_circuit_breaker_past_max_outage_ends_circuit_open():
    """A provider that never comes back cannot hold a run forever: past max_outage, items end
    circuit_open (a reason --retry-unscored clears), and nothing more reaches the provider."""
    err = ProviderError("down", reason="provider_error", retryable=True, status=502)
    fake = FakeProvider(handler=lambda call: err)
    breaker = CircuitBreaker(threshold=3, cooldown=3600)
    cfg = CFG.model_copy(update={"retries": 4, "concurrency": 1, "max_outage": 0.0})
    g = grader(fake, cfg, breaker=breaker)
    results = [r async for r in g.grade_many([request(id=f"q{i}") for i in range(6)], config=cfg)]
    reasons = [r.coverage.reason for r in results]
    assert reasons.count("circuit_open") >= 5, reasons
    assert breaker.snapshot()["state"] == "open"
    assert len(fake.calls) == 3  # nothing reached the provider once open


async def test_outage_pauses_items_instead_of_ending_them():
    """Items wait out an outage (spending none of their own retries) and are graded after it."""
    calls = {"n": 0}
    err = ProviderError("down", reason="provider_error", retryable=True, status=503)

    def handler(call: FakeCall):
        calls["n"] += 1
        if calls["n"] <= 10:  # an outage: the first 10 requests fail
            return err
        return covering(1, n=2)

    fake = FakeProvider(handler=handler)
    breaker = CircuitBreaker(threshold=3, cooldown=0.05, max_cooldown=0.1)
    cfg = CFG.model_copy(update={"metrics": ("coverage",), "retries": 3, "concurrency": 4})
    g = grader(fake, cfg, breaker=breaker)
    results = [r async for r in g.grade_many([request(id=f"q{i}") for i in range(12)], config=cfg)]
    assert [r.status for r in results] == ["scored"] * 12
    assert breaker.snapshot()["opened_count"] >= 1 and breaker.state == "closed"
    assert g.stats.outage_waits > 0


async def test_one_breaker_per_model_and_base_url():
    err = ProviderError("down", reason="provider_error", retryable=True, status=502)

    def handler(call: FakeCall):
        return err if call.config.model == "fake/down" else covering(2, n=2)

    fake = FakeProvider(handler=handler)
    down = CFG.model_copy(update={"model": "fake/down", "metrics": ("coverage",),
                                  "retries": 0, "max_outage": 0.0})
    up = CFG.model_copy(update={"metrics": ("coverage",)})
    g = grader(fake, up, breaker=CircuitBreaker(threshold=2, cooldown=3600))
    for i in range(3):
        await g.grade(request(id=f"d{i}"), config=down)
    assert g.caller.gates.breaker_for(down).state == "open"
    default = g.caller.gates.breaker_for(g.config)
    assert g.caller.gates.breaker_for(up).state == "closed"
    assert g.caller.gates.breaker_for(up) is default
    other_base = up.model_copy(update={"api_base": "http://127.0.0.1:9/v1"})
    assert g.caller.gates.breaker_for(other_base) is not default
    result = await g.grade(request(id="u1"), config=up)
    assert result.status == "scored"  # another judge's outage does not pause this one


async def test_client_errors_do_not_open_the_breaker():
    err = ProviderError("bad request", reason="provider_error", retryable=False, status=400)
    fake = FakeProvider(handler=lambda call: err)
    breaker = CircuitBreaker(threshold=2, cooldown=3600)
    cfg = CFG.model_copy(update={"metrics": ("coverage",), "concurrency": 1})
    g = grader(fake, cfg, breaker=breaker)
    results = [r async for r in g.grade_many([request(id=f"q{i}") for i in range(5)], config=cfg)]
    assert [r.coverage.reason for r in results] == ["provider_error"] * 5
    assert breaker.state == "closed" and len(fake.calls) == 5
