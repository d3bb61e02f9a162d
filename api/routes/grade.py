"""Synchronous grading: one item, a batch, and bonus-point extraction."""

from __future__ import annotations

from api.deps import (
    BudgetsDep,
    GraderDep,
    OwnerDep,
    ReadyDep,
    SettingsDep,
    SyncItemsDep,
    bind_tenant,
)
from api.errors import error_responses
from api.routes.common import guarded_router
from api.services import grading
from bonusjudge_client.wire.grading import ExtractResult, GradeResult
from bonusjudge_client.wire.schemas import BatchBody, BatchResponse, ExtractBody, GradeBody

router = guarded_router("/v1", "grading", bind_tenant)


@router.post(
    "/grade", operation_id="grade", summary="Grade one response", responses=error_responses(429)
)
async def grade(
    body: GradeBody, grader: GraderDep, settings: SettingsDep, ready: ReadyDep,
    items: SyncItemsDep, owner: OwnerDep, budgets: BudgetsDep,
) -> GradeResult:
    """Grade one response: bonus-point coverage, defects, ROUGE-L and BERTScore as configured.

    A key whose judge calls reached its day's budget (`max_cost_per_key_usd`) is answered 429
    `budget_exhausted` with `Retry-After` (the next UTC midnight).
    """
    return await grading.grade_one(
        body, grader=grader, settings=settings, ready=ready, items=items, owner=owner,
        budgets=budgets,
    )


@router.post(
    "/grade/batch", operation_id="gradeBatch", summary="Grade a batch of responses",
    responses=error_responses(429),
)
async def grade_batch(
    body: BatchBody, grader: GraderDep, settings: SettingsDep, ready: ReadyDep,
    items: SyncItemsDep, owner: OwnerDep, budgets: BudgetsDep,
) -> BatchResponse:
    """Grade up to `max_batch` items concurrently; a bad item gets an error entry, not a 422.

    A key over its day's budget is answered 429 `budget_exhausted`, as `POST /v1/grade` is.
    """
    return await grading.grade_batch(
        body, grader=grader, settings=settings, ready=ready, items=items, owner=owner,
        budgets=budgets,
    )


@router.post(
    "/bonus-points", operation_id="extractBonusPoints",
    summary="Extract bonus points from a reference", responses=error_responses(429),
)
async def extract_points(
    body: ExtractBody, grader: GraderDep, settings: SettingsDep, owner: OwnerDep,
    budgets: BudgetsDep,
) -> ExtractResult:
    """Split a reference answer into bonus points with the extraction rubric (needs an LLM).

    A key over its day's budget is answered 429 `budget_exhausted`, as `POST /v1/grade` is.
    """
    return await grading.extract_points(
        body, grader=grader, settings=settings, owner=owner, budgets=budgets
    )
