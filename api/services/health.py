"""The readiness checks behind ``/readyz``: encoder, cache and judge."""

from __future__ import annotations

import asyncio

from api.observability import EncoderWarmup
from api.schemas import Readiness, ReadyCheck
from api.services.judges import LLM_METRICS
from judge.engine import Grader


async def readiness(warmup: EncoderWarmup, grader: Grader) -> Readiness:
    """Encoder loaded (when the default judge needs it), judge configured; cache degradation."""
    cache, degraded = await _cache_check(grader)
    checks = {"encoder": warmup.check(), "cache": cache, "judge": _judge_check(grader)}
    ready = all(check.ok for check in checks.values())
    return Readiness(ready=ready, checks=checks, degraded=degraded)


async def _cache_check(grader: Grader) -> tuple[ReadyCheck, bool]:
    """The cache check and whether the cache is degraded.

    Always ok: a failing cache only costs repeated judge calls, so the service keeps serving.
    The detail counts errors and never names the folder or quotes an error (``/readyz`` needs no
    key, and an OSError's text carries the path).
    """
    cache = grader.cache
    if not cache.enabled and cache.directory is None:
        return ReadyCheck(ok=True, detail="disabled: judge calls are not cached"), False
    writable = cache.enabled and await asyncio.to_thread(cache.writable)
    if writable and not cache.degraded:
        return ReadyCheck(ok=True, detail="writable"), False
    if not cache.enabled:
        state = "could not be opened"
    else:
        state = "writable now" if writable else "not writable now"
    detail = (
        f"degraded: {cache.errors} cache error(s) since start, cache {state}; grading goes on "
        "uncached where the cache fails"
    )
    return ReadyCheck(ok=True, detail=detail), True


def _judge_check(grader: Grader) -> ReadyCheck:
    config = grader.config
    if config.model.strip():
        return ReadyCheck(ok=True, detail=config.model)
    if LLM_METRICS.intersection(config.metrics):
        return ReadyCheck(ok=False, detail="no judge model configured")
    return ReadyCheck(ok=True, detail="no judge model needed (reference metrics only)")
