"""The readiness checks behind ``/readyz``: encoder, cache and judge.

The judge check reports the default judge's state as its judge calls left it, so answering
``/readyz`` costs no judge call: its circuit breaker open (an outage: ``circuit_open``) or its
last answer a refusal of the credentials (``credentials_refused``) make it fail. A load balancer
that stops sending traffic to a service that is not ready would keep it there, since only an
answer closes the breaker; so while the judge is in trouble, ``/readyz`` sends one probe request
(the preflight's one-token call) in the background when one is due, and never waits for it: at
most one at a time, once per breaker cool-down (5 s, doubling up to 60 s) or every 30 s after a
refusal.
"""

from __future__ import annotations

import asyncio
import math

from api.observability import EncoderWarmup
from api.services.judges import LLM_METRICS
from bonusjudge_client.wire.schemas import Readiness, ReadyCheck
from judge.engine import Grader

_PROBES: set[asyncio.Task[None]] = set()
"""Probe requests in flight, held so the event loop does not drop them before they end."""


async def readiness(warmup: EncoderWarmup, grader: Grader) -> Readiness:
    """Encoder loaded (when the default judge needs it), judge answering; cache degradation.

    The judge answers when it is configured, its circuit breaker is closed and its last answer
    was no refusal of the credentials.
    """
    cache, degraded = await _cache_check(grader)
    checks = {"encoder": warmup.check(), "cache": cache, "judge": _judge_check(grader)}
    ready = all(check.ok for check in checks.values())
    return Readiness(ready=ready, checks=checks, degraded=degraded)


async def _cache_check(grader: Grader) -> tuple[ReadyCheck, bool]:
    """The cache check and whether the cache is degraded.

    Always ok: a failing cache only costs repeated judge calls, so the service keeps serving.
    Degraded while the cache cannot be written now (probed here), not for a past error.
    The detail counts errors and never names the folder or quotes an error (``/readyz`` needs no
    key, and an OSError's text carries the path).
    """
    cache = grader.cache
    if not cache.enabled and cache.directory is None:
        return ReadyCheck(ok=True, detail="disabled: judge calls are not cached"), False
    writable = cache.enabled and await asyncio.to_thread(cache.writable)
    if writable:
        # What is true now: a cache that failed once and works again is not degraded (it was
        # until restart); the errors since start stay in the detail and in /metrics.
        since = f" ({cache.errors} cache error(s) since start)" if cache.errors else ""
        return ReadyCheck(ok=True, detail=f"writable{since}"), False
    state = "could not be opened" if not cache.enabled else "not writable now"
    detail = (
        f"degraded: {cache.errors} cache error(s) since start, cache {state}; grading goes on "
        "uncached where the cache fails"
    )
    return ReadyCheck(ok=True, detail=detail), True


def _judge_check(grader: Grader) -> ReadyCheck:
    """The default judge's check: configured, and neither in an outage nor refused.

    The detail names the model and the status only: ``/readyz`` needs no key, and a provider's
    error text may quote part of the key.
    """
    config = grader.config
    model = config.model
    if not model.strip():
        if LLM_METRICS.intersection(config.metrics):
            return ReadyCheck(ok=False, detail="no judge model configured")
        return ReadyCheck(ok=True, detail="no judge model needed (reference metrics only)")
    if config.is_embedded:
        return ReadyCheck(ok=True, detail=model)
    breaker = grader.breaker_for(config)
    if breaker.claim_probe():
        task = asyncio.create_task(grader.caller.probe(config))
        _PROBES.add(task)
        task.add_done_callback(_PROBES.discard)
    state = breaker.snapshot()
    if state["state"] != "closed":
        # Half-open: a probe request is out (this one's, or a judge call's) and decides.
        again = (
            "a probe request is under way" if state["state"] == "half_open"
            else f"next try in {math.ceil(breaker.retry_in())} s"
        )
        return ReadyCheck(
            ok=False,
            detail=f"circuit_open: {model} is in an outage ({state['consecutive_failures']} "
            f"failed requests in a row, for {breaker.open_for():.0f} s); {again}",
        )
    if state["refused_status"] is not None:
        return ReadyCheck(
            ok=False,
            detail=f"credentials_refused: the provider of {model} answered "
            f"{state['refused_status']} to the last call (its API key is wrong, revoked or "
            "not allowed this model); every call fails until it accepts the key",
        )
    return ReadyCheck(ok=True, detail=model)
