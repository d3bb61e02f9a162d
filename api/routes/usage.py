"""The caller's own usage: its judge requests, tokens, cost, cache hits, items and jobs."""

from __future__ import annotations

from api.deps import GraderDep, JobsDep, OwnerDep, require_owner
from api.routes.common import guarded_router
from api.services.usage import usage_of
from bonusjudge_client.wire.usage import UsageReport

router = guarded_router("/v1", "usage", require_owner)


@router.get("/usage", operation_id="getUsage", summary="This key's usage")
async def usage(owner: OwnerDep, grader: GraderDep, jobs: JobsDep) -> UsageReport:
    """What this API key has used, and nothing of any other key.

    Provider requests (re-asks and retries included), their tokens and cost, cache hits and
    items since this process started; its jobs by status.
    """
    return await usage_of(owner, grader=grader, store=jobs.store)
