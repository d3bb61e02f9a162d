"""One caller's failing items do not pause the others (issue 31.2), and a poison item's cost is
bounded; a real outage still pauses every caller as soon as before.

The breaker is told whom each call is for (``TENANT``, the service's key digest): failures that
follow one caller's items, while the provider answers another caller's calls, pause that caller
alone. The ``Caller`` tests send calls at a scripted provider; the breaker's own are direct.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from core.errors import ProviderError
from judge.cache import JudgeCache
from judge.calls import ITEM_FAILURES, TENANT, Caller, CallSpec
from judge.config import JudgeConfig
from judge.providers.fake import FakeCall, FakeProvider, defects
from judge.retry import PROBE_SOURCE, CircuitBreaker
from judge.stats import EngineStats
from judge.verdicts import DefectJudgement
from rubrics.loader import load_library

CFG = JudgeConfig(model="fake/judge", metrics=("defects",), retries=4, max_outage=0.0)
DOWN = ProviderError("503", reason="provider_error", retryable=True, status=503)


def spec(response: str) -> CallSpec:
    """A defects call for ``response``, rendered from the shipped rubric."""
    library = load_library()
    prompt = library.render(
        library.for_task(CFG.rubric, "defects"), "en",
        {"question": "Why?", "reference": "Because.", "response": response},
    )
    return CallSpec.for_prompt(
        "defects", prompt, CFG, lambda out: [d.model_dump() for d in out.defects],
        response_model=DefectJudgement,
    )


def poisoned(call: FakeCall) -> Any:
    """The provider fails (5xx) on content marked POISON and answers everything else."""
    return DOWN if "POISON" in call.user else defects()


async def no_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


def make_caller(provider: Any, breaker: CircuitBreaker) -> Caller:
    caller = Caller(provider, JudgeCache(None), EngineStats(), breaker=breaker, sleep=no_sleep)
    caller.gates.set_breaker(CFG, breaker)
    return caller


async def call_as(caller: Caller, tenant: str, response: str) -> Any:
    """One call made for ``tenant`` (in its own context, as the service's tasks are)."""

    async def run() -> Any:
        TENANT.set(tenant)
        return await caller.call(spec(response))

    return await asyncio.create_task(run())


async def test_one_callers_poison_items_do_not_pause_another() -> None:
    breaker = CircuitBreaker(threshold=5, cooldown=60)
    caller = make_caller(FakeProvider(handler=poisoned), breaker)
    assert (await call_as(caller, "b", "fine")).reason is None  # B has been answered
    # A sends many poison items: far more failures in a row than the threshold.
    outcomes = await asyncio.gather(*(call_as(caller, "a", f"POISON {n}") for n in range(30)))
    assert {o.reason for o in outcomes} <= {"provider_error", "circuit_open"}
    assert breaker.state == "closed" and breaker.opened_count == 0  # no outage for everyone
    assert breaker.isolated() == ["a"] and breaker.holds("a") and not breaker.holds("b")
    for n in range(5):
        assert (await call_as(caller, "b", f"fine {n}")).reason is None
    # A's own good item waits out A's pause (here: max_outage 0, so it ends circuit_open).
    assert (await call_as(caller, "a", "fine")).reason == "circuit_open"


async def test_a_poison_item_stops_retrying_once_others_are_answered() -> None:
    breaker = CircuitBreaker(threshold=50)
    provider = FakeProvider(handler=poisoned)
    caller = make_caller(provider, breaker)
    await call_as(caller, "a", "fine")
    first = asyncio.create_task(call_as(caller, "a", "POISON"))
    await asyncio.sleep(0)
    others = [await call_as(caller, "a", f"fine {n}") for n in range(3)]
    outcome = await first
    assert all(o.reason is None for o in others)
    assert outcome.reason == "provider_error" and outcome.record.attempts == ITEM_FAILURES
    assert "while the provider answered other calls" in (outcome.detail or "")
    poison_requests = [c for c in provider.calls if "POISON" in c.user]
    assert len(poison_requests) == ITEM_FAILURES == 2  # was 1 + retries (5)


async def test_without_other_answers_a_failing_call_retries_as_before() -> None:
    provider = FakeProvider(handler=lambda call: DOWN)
    caller = make_caller(provider, CircuitBreaker(threshold=50))
    outcome = await call_as(caller, "a", "anything")
    assert outcome.reason == "provider_error" and outcome.record.attempts == 1 + CFG.retries


async def test_a_real_outage_pauses_every_caller_as_fast_as_before() -> None:
    breaker = CircuitBreaker(threshold=5, cooldown=60)
    up = {"on": True}
    caller = make_caller(FakeProvider(handler=lambda c: defects() if up["on"] else DOWN), breaker)
    assert (await call_as(caller, "b", "fine")).reason is None
    assert (await call_as(caller, "a", "fine")).reason is None
    up["on"] = False
    await asyncio.gather(*(call_as(caller, "b", f"item {n}") for n in range(2)))
    await asyncio.gather(*(call_as(caller, "a", f"item {n}") for n in range(4)))
    # Both callers' last calls failed: nothing shows the provider up, so everyone pauses.
    assert breaker.state == "open" and breaker.holds("a") and breaker.holds("b")
    assert breaker.holds("c")  # a caller not seen yet as well


def test_the_only_active_caller_failing_opens_the_breaker_at_the_threshold() -> None:
    breaker = CircuitBreaker(threshold=3, cooldown=60, window=0.05)
    breaker.record_success("b")
    time.sleep(0.1)  # b's answer is older than the window: b is not active any more
    for _ in range(3):
        breaker.record_failure("a")
    assert breaker.state == "open" and breaker.opened_count == 1


def test_an_outage_ending_lifts_every_callers_pause() -> None:
    breaker = CircuitBreaker(threshold=2, cooldown=0.05, max_cooldown=0.05)
    breaker.record_success("b")
    for _ in range(2):
        breaker.record_failure("a")
    assert breaker.isolated() == ["a"] and breaker.state == "closed"
    breaker.record_failure("b")
    assert breaker.state == "open"  # b fails too: an outage after all
    time.sleep(0.06)
    assert breaker.allow("b")  # b's call is the probe, and is answered
    breaker.record_success("b")
    assert breaker.state == "closed" and breaker.isolated() == [] and breaker.allow("a")


def test_a_probe_answered_before_the_failures_began_does_not_hide_an_outage() -> None:
    breaker = CircuitBreaker(threshold=2, cooldown=60)
    breaker.record_success(PROBE_SOURCE)
    for _ in range(2):
        breaker.record_failure("a")
    assert breaker.state == "open"


def test_a_caller_arriving_after_one_callers_failures_opened_it_probes_at_once() -> None:
    breaker = CircuitBreaker(threshold=3, cooldown=60)
    for _ in range(3):
        breaker.record_failure("a")  # a was alone: an outage, as far as anyone can tell
    assert breaker.state == "open" and not breaker.allow("a") and breaker.retry_in("a") > 50
    assert breaker.retry_in("b") == 0 and breaker.allow("b")  # b's call goes, as the probe
    assert not breaker.allow("c")  # one probe at a time
    breaker.record_success("b")
    assert breaker.state == "closed"
    breaker.record_failure("a")
    assert breaker.isolated() == ["a"] and breaker.allow("c")  # a's items, not an outage


def test_a_failed_fresh_probe_keeps_the_outage_and_its_cooldown() -> None:
    breaker = CircuitBreaker(threshold=2, cooldown=60)
    for _ in range(2):
        breaker.record_failure("a")
    before = breaker.retry_in("a")
    assert breaker.allow("b")
    breaker.record_failure("b")  # the provider fails b too: a real outage
    assert breaker.state == "open" and not breaker.allow("b") and not breaker.allow("a")
    assert breaker.retry_in("a") <= before  # not lengthened by b's probe
    assert breaker.allow("c")  # a caller not yet failing may still look


def test_a_caller_waiting_on_the_answer_does_not_wait_out_an_outage() -> None:
    """``Grader.grade(max_outage=0)``: the service's synchronous routes say "do not wait" with
    one explicit parameter; a job's items (no parameter) keep the configuration's wait."""
    from judge.engine import Grader, _with_max_outage

    patient = CFG.model_copy(update={"max_outage": 600.0})
    assert _with_max_outage(patient, None) is patient
    assert _with_max_outage(patient, 600.0) is patient
    hurried = _with_max_outage(patient, 0)
    assert hurried.max_outage == 0 and hurried.config_hash() == patient.config_hash()
    embedded = JudgeConfig()
    assert _with_max_outage(embedded, 0) is embedded  # no provider: nothing to wait for

    breaker = CircuitBreaker(threshold=1, cooldown=60, max_cooldown=60)
    breaker.record_failure("a")  # the provider is down for every caller
    provider = FakeProvider(handler=lambda call: defects())
    grader = Grader(patient, provider=provider, cache=JudgeCache(None), breaker=breaker)
    from bonusjudge_client.wire.grading import GradeRequest

    request = GradeRequest(
        question="Why?", reference="Because.", bonus_points=["Because"], response="Just so."
    )

    async def run() -> Any:
        TENANT.set("a")
        return await asyncio.wait_for(grader.grade(request, max_outage=0), timeout=10)

    started = time.monotonic()
    result = asyncio.run(run())
    assert time.monotonic() - started < 5  # not the configuration's 600 s
    assert any(reason.endswith("circuit_open") for reason in result.unscored_reasons)
    assert provider.calls == []  # nothing sent during the outage
