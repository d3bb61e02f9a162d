"""What the circuit breaker knows of its provider beyond an outage (issue 28): a refusal of the
credentials (401/403), and when a probe request is due, for the service's readiness.

The ``Caller`` tests send calls at a scripted provider; the breaker's own tests drive it directly.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from core.errors import JudgeOutputError, ProviderError
from judge.cache import JudgeCache
from judge.calls import Caller, CallSpec
from judge.config import JudgeConfig
from judge.providers.fake import FakeCall, FakeProvider, defects
from judge.retry import CircuitBreaker
from judge.stats import EngineStats
from judge.verdicts import DefectJudgement
from rubrics.loader import load_library

CFG = JudgeConfig(model="fake/judge", metrics=("defects",), retries=0)

DOWN = ProviderError("503", reason="provider_error", retryable=True, status=503)


def refused(status: int) -> ProviderError:
    """The provider's answer to a key it does not accept (its text quotes part of the key)."""
    return ProviderError(f"{status}: Incorrect API key provided: sk-ab***yz", status=status)


def spec() -> CallSpec:
    """A defects call, rendered from the shipped rubric."""
    library = load_library()
    prompt = library.render(
        library.for_task(CFG.rubric, "defects"), "en",
        {"question": "Why?", "reference": "Because.", "response": "No idea."},
    )
    return CallSpec.for_prompt(
        "defects", prompt, CFG, lambda out: [d.model_dump() for d in out.defects],
        response_model=DefectJudgement,
    )


def caller(provider: Any, breaker: CircuitBreaker | None = None) -> Caller:
    return Caller(provider, JudgeCache(None), EngineStats(), breaker=breaker)


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_is_remembered_until_a_call_is_answered(status: int) -> None:
    answers: list[Any] = [refused(status), refused(status), defects()]
    fake = FakeProvider(handler=lambda call: answers.pop(0))
    calls = caller(fake)
    breaker = calls.gates.breaker_for(CFG)
    outcome = await calls.call(spec())
    assert outcome.reason == "provider_error"
    assert breaker.refused_status == status and breaker.state == "closed"
    assert breaker.snapshot()["refused_status"] == status
    await calls.call(spec())
    assert breaker.refused_status == status
    assert (await calls.call(spec())).reason is None  # the key is accepted again
    assert breaker.refused_status is None


async def test_other_4xx_answers_are_no_refusal() -> None:
    bad_request = ProviderError("400: bad request", status=400)
    fake = FakeProvider(handler=lambda call: bad_request)
    calls = caller(fake)
    assert (await calls.call(spec())).reason == "provider_error"
    assert calls.gates.breaker_for(CFG).refused_status is None


def test_a_refusal_ends_an_outage_and_rechecks_are_spaced() -> None:
    breaker = CircuitBreaker(threshold=1, cooldown=60, recheck=0.2)
    breaker.record_failure()
    assert breaker.state == "open"
    breaker.record_refusal(401)  # it answered: it is up, but refuses the key
    assert breaker.state == "closed" and breaker.open_for() == 0.0
    assert not breaker.claim_probe()  # refused a moment ago: not yet
    time.sleep(0.25)
    assert breaker.claim_probe()
    assert not breaker.claim_probe()  # one probe at a time
    breaker.record_refusal(401)  # refused again: the next recheck waits again
    assert not breaker.claim_probe()
    time.sleep(0.25)
    assert breaker.claim_probe()
    breaker.release_probe()  # cancelled: another may go
    assert breaker.claim_probe()
    breaker.record_success()
    assert breaker.refused_status is None and not breaker.claim_probe()


def test_a_probe_of_an_open_breaker_is_due_after_its_cooldown_only() -> None:
    breaker = CircuitBreaker(threshold=2, cooldown=0.2, max_cooldown=0.2)
    assert not breaker.claim_probe()  # closed and healthy: traffic tells
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.claim_probe()
    time.sleep(0.25)
    assert breaker.claim_probe() and breaker.state == "half_open"
    assert not breaker.claim_probe() and not breaker.allow()  # the probe is out
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.claim_probe()


async def test_a_probe_sends_the_preflight_request_and_feeds_the_breaker() -> None:
    seen: list[FakeCall] = []
    answers: list[Any] = [DOWN, JudgeOutputError("cut off", reason="truncated_output"),
                          refused(401), "OK"]

    def handler(call: FakeCall) -> Any:
        seen.append(call)
        return answers.pop(0)

    calls = caller(FakeProvider(handler=handler), CircuitBreaker(threshold=1, cooldown=0.0))
    breaker = calls.gates.breaker_for(CFG)
    await calls.probe(CFG)
    assert breaker.state == "open"  # a transport failure: the outage goes on
    await calls.probe(CFG)
    assert breaker.state == "closed"  # an answer, even a cut-off one: up
    await calls.probe(CFG)
    assert breaker.refused_status == 401
    await calls.probe(CFG)
    assert breaker.refused_status is None
    assert calls.stats.provider_calls == 4
    # The preflight's request: one message, no structured output, one token.
    assert {(c.user, c.response_model, c.config.max_tokens) for c in seen} == {
        ("Reply with OK.", None, 1)
    }


async def test_a_cancelled_probe_lets_another_go() -> None:
    class Hanging:
        async def complete(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(3600)

    calls = caller(Hanging(), CircuitBreaker(threshold=1, cooldown=0.0))
    breaker = calls.gates.breaker_for(CFG)
    breaker.record_failure()
    assert breaker.claim_probe()
    probe = asyncio.create_task(calls.probe(CFG))
    await asyncio.sleep(0.01)
    assert not breaker.claim_probe()
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert breaker.claim_probe()
