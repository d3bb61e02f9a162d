"""Operations: liveness, readiness and the Prometheus scrape."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from api.deps import LLM_METRICS, GraderDep, ObservabilityDep, require_owner
from api.errors import ERROR_RESPONSES
from api.observability import METRICS_CONTENT_TYPE, EncoderWarmup
from api.schemas import Health, Readiness, ReadyCheck
from judge.engine import Grader

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness")
async def healthz() -> Health:
    """The process answers (no auth, no checks)."""
    return Health(status="ok")


@router.get(
    "/readyz", summary="Readiness", response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Not ready; see the failing checks."}},
)
async def readyz(request: Request, grader: GraderDep) -> JSONResponse:
    """Encoder loaded (when the default judge needs it), judge configured; cache degradation."""
    warmup: EncoderWarmup = request.app.state.warmup
    cache, degraded = await _cache_check(grader)
    checks = {"encoder": warmup.check(), "cache": cache, "judge": _judge_check(grader)}
    ready = all(check.ok for check in checks.values())
    body = Readiness(ready=ready, checks=checks, degraded=degraded)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get(
    "/metrics", summary="Prometheus metrics", dependencies=[Depends(require_owner)],
    response_class=Response, responses={200: {"content": {METRICS_CONTENT_TYPE: {}}}, **{
        k: v for k, v in ERROR_RESPONSES.items() if k == 401}},
)
async def prometheus(observability: ObservabilityDep) -> Response:
    """Requests, latency, judge calls, cache hits, unscored by reason, tokens, cost, jobs."""
    payload = await asyncio.to_thread(observability.render)
    return Response(payload, media_type=METRICS_CONTENT_TYPE)


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
