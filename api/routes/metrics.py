"""Reference metrics without a judge: ROUGE-L and BERTScore of response/reference pairs."""

from __future__ import annotations

from api.deps import GraderDep, ReadyDep, SettingsDep, require_owner
from api.routes.common import guarded_router
from api.services.metrics import compute_metrics
from bonusjudge_client.wire.schemas import MetricsBody, MetricsResponse

router = guarded_router("/v1", "metrics", require_owner)


@router.post("/metrics", operation_id="computeMetrics", summary="ROUGE-L and BERTScore of pairs")
async def metrics(
    body: MetricsBody, grader: GraderDep, settings: SettingsDep, ready: ReadyDep
) -> MetricsResponse:
    """Score up to `max_batch` response/reference pairs; no judge call is made."""
    return await compute_metrics(body, config=grader.config, settings=settings, ready=ready)
