"""Grading jobs: submitting an upload and listing a caller's jobs.

Watching, streaming, summarising and cancelling a job are the job manager's own operations
(``api.jobs.JobManager``); what is here needs the service's settings and judge selection too
(a retry pass is held to the settings' pass limit and the key's quotas).
"""

from __future__ import annotations

import asyncio
import uuid

from api.budgets import JOB_LIMIT
from api.deps import JobContext
from api.jobs import (
    GRADE,
    GradeItems,
    JobManager,
    JobUpload,
    Quota,
    RetryPolicy,
    grade_limit,
    in_upload_thread,
    job_status,
    stage_items,
)
from api.services.judges import select_judge
from bonusjudge_client.wire.schemas import JobList, JobState, JobStatus, RetryUnscoredBody
from core.errors import InputError
from judge.budget import Cap
from judge.config import JudgeOverrides


async def submit_grading_job(
    upload: JobUpload, query_judge: JudgeOverrides | None, context: JobContext,
    query_max_cost: float | None = None,
) -> JobStatus:
    """Validate an upload's items and store them as a grading job of the caller.

    The items are read, validated and encoded in batches in an upload thread
    (``api.jobs.staging``), then stored in one transaction: never all in memory, never on the
    event loop.

    Args:
        upload: The submission as read from the request.
        query_judge: The judge selected by query parameters (JSONL and multipart uploads).
        context: The job manager, the engine (its config is the default judge), the settings
            and the caller.
        query_max_cost: The job's ``max_cost`` as a query parameter (JSONL and multipart).

    Raises:
        InputError: the judge or ``max_cost`` given in both the body and the query, invalid
            options, no items or too many, or a cost cap on a model litellm cannot price.
        QuotaExceeded: the job would take ``owner`` over a quota.
        OverBudget: ``owner``'s judge calls reached its day's budget.
    """
    if upload.judge is not None and query_judge is not None:
        raise InputError("judge: select the judge in the body or the query, not both",
                         field="judge")
    if upload.max_cost is not None and query_max_cost is not None:
        raise InputError("max_cost: give it in the body or the query, not both",
                         field="max_cost")
    overrides = upload.judge or query_judge
    max_cost = upload.max_cost if upload.max_cost is not None else query_max_cost
    settings, budgets = context.settings, context.budgets
    config = select_judge(grader=context.grader, settings=settings, overrides=overrides)
    await budgets.check(context.owner)
    # A cap on a model without a price could not count its spend: refused before storing.
    job_cap = None if max_cost is None else Cap(JOB_LIMIT, max_cost=max_cost)
    await budgets.budget(context.owner, config, job_cap)
    job_id = uuid.uuid4().hex
    check = GradeItems(context_window=config.context_window, settings=settings)
    staged = await in_upload_thread(stage_items, job_id, upload.raw, check, grade_limit(settings))
    try:
        return await context.jobs.submit(
            owner=context.owner, items=staged.encoded, overrides=overrides, config=config,
            options={} if max_cost is None else {JOB_LIMIT: max_cost},
            quota=Quota.from_settings(settings), job_id=job_id,
        )
    finally:
        staged.close()


async def retry_unscored_items(
    job_id: str, body: RetryUnscoredBody, context: JobContext
) -> JobStatus:
    """Queue the caller's finished job's unscored items again, within its limits.

    Items the judge answered (a refusal, an unusable answer: ``api.jobs.FINAL_REASONS``) are
    left out unless ``body.include`` names their reason; the pass counts against the job's
    ``max_retry_passes`` and the key's quotas, as a new job would.

    Raises:
        NotFound: no such grading job of the caller.
        Conflict: the job is not done, or has had its retry passes.
        QuotaExceeded: the items would take the caller over a quota.
    """
    return await context.jobs.retry_unscored(
        job_id, context.owner, retry=RetryPolicy.from_settings(context.settings, body.include),
        quota=Quota.from_settings(context.settings),
    )


async def list_grading_jobs(
    jobs: JobManager, owner: str, *, limit: int, offset: int, status: JobState | None
) -> JobList:
    """One page of ``owner``'s grading jobs, newest first (``next_offset`` null on the last)."""
    # One row more than the page: whether it exists says if there is a next page.
    rows = await asyncio.to_thread(
        lambda: jobs.store.list_jobs(owner, GRADE, status, limit=limit + 1, offset=offset)
    )
    more = len(rows) > limit
    return JobList(
        jobs=[job_status(row) for row in rows[:limit]],
        next_offset=offset + limit if more else None,
    )
