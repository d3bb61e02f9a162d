"""Operations: liveness, readiness and the Prometheus scrape."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse

from api.deps import GraderDep, JobsDep, ObservabilityDep, WarmupDep, require_operator
from api.errors import error_responses
from api.observability import METRICS_CONTENT_TYPE
from api.services.health import readiness
from bonusjudge_client.wire.schemas import Health, Readiness

router = APIRouter(tags=["operations"])


@router.get("/healthz", operation_id="getHealth", summary="Liveness")
async def healthz() -> Health:
    """The process answers (no auth, no checks)."""
    return Health(status="ok")


@router.get(
    "/readyz", operation_id="getReadiness", summary="Readiness", response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Not ready; see the failing checks."}},
)
async def readyz(warmup: WarmupDep, grader: GraderDep, jobs: JobsDep) -> JSONResponse:
    """Encoder loaded (if needed), job store writable now, judge answering; cache degradation.

    The judge answers when it is configured, its circuit breaker is closed and its last answer
    was no refusal of the credentials.
    """
    body = await readiness(warmup, grader, jobs.store)
    return JSONResponse(body.model_dump(), status_code=200 if body.ready else 503)


@router.get(
    "/metrics", operation_id="getPrometheusMetrics", summary="Prometheus metrics",
    dependencies=[Depends(require_operator)], response_class=Response,
    responses={200: {"content": {METRICS_CONTENT_TYPE: {"schema": {"type": "string"}}},
                     "description": "The Prometheus text exposition format."},
               **error_responses(401, 403, 500)},
)
async def prometheus(observability: ObservabilityDep) -> Response:
    """Requests, latency, judge calls, cache hits, unscored by reason, tokens, cost, jobs.

    The counters span every API key, so when keys are configured this takes an operator key
    (`operator_keys`); an API key gets 403.
    """
    payload = await asyncio.to_thread(observability.render)
    return Response(payload, media_type=METRICS_CONTENT_TYPE)
