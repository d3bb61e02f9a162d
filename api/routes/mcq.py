"""Multiple-choice scoring: one call (``POST /v1/mcq``) and persisted jobs (``/v1/mcq/jobs``).

What scoring does is the service's (``api.services.mcq``); here the requests are read: a JSON
body, or for jobs also a JSONL body or multipart ``file`` with the options as query parameters.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from api.deps import (
    BudgetsDep,
    GraderDep,
    JobContextDep,
    JobsDep,
    OwnerDep,
    SettingsDep,
    bind_tenant,
)
from api.errors import ERROR_RESPONSES, error_responses
from api.jobs import UploadDoc, receive_upload
from api.routes.common import add_results_route
from api.services import mcq as service
from api.services.mcq import MCQ, McqOptions
from bonusjudge_client.wire.mcq import Aggregate, McqSummary
from bonusjudge_client.wire.mcq_defaults import DEFAULT_FUZZY_THRESHOLD
from bonusjudge_client.wire.options import comma_list
from bonusjudge_client.wire.schemas import (
    MCQ_JOB_EXAMPLE,
    JobStatus,
    McqBody,
    McqEntry,
    McqResponse,
)

router = APIRouter(prefix="/v1/mcq", tags=["multiple choice"], responses=ERROR_RESPONSES)

_JSONL_EXAMPLE = json.dumps(MCQ_JOB_EXAMPLE["items"][0]) + "\n"
UPLOAD = UploadDoc(McqBody, "McqJobLines", "McqJobForm", MCQ_JOB_EXAMPLE, _JSONL_EXAMPLE)
"""How ``POST /v1/mcq/jobs`` reads its three forms of submission (the app adds the schemas)."""


def options_query(
    aggregate: Annotated[
        Aggregate | None, Query(description="mean (default) or majority.")
    ] = None,
    group_by: Annotated[
        str | None, Query(description="Comma-separated breakdown fields.")
    ] = None,
    llm_extract: Annotated[
        bool | None, Query(description="Let the default judge read unparseable answers.")
    ] = None,
    fuzzy_threshold: Annotated[
        float | None, Query(ge=0, le=101, description="Fuzzy option-text threshold (0-101).")
    ] = None,
) -> McqOptions | None:
    """Scoring options from query parameters (for JSONL and multipart uploads)."""
    if aggregate is None and group_by is None and llm_extract is None and fuzzy_threshold is None:
        return None
    fields = comma_list(group_by) if group_by is not None else None
    return McqOptions(
        aggregate=aggregate or "mean",
        group_by=fields or None,
        llm_extract=bool(llm_extract),
        fuzzy_threshold=DEFAULT_FUZZY_THRESHOLD if fuzzy_threshold is None else fuzzy_threshold,
    )


@router.post(
    "", operation_id="scoreMcq", summary="Score multiple-choice answers",
    dependencies=[Depends(bind_tenant)], responses=error_responses(429),
)
async def score_mcq(
    body: McqBody, grader: GraderDep, settings: SettingsDep, owner: OwnerDep,
    budgets: BudgetsDep,
) -> McqResponse:
    """Extract the chosen option of each item's response, score it, and summarise.

    Up to `max_job_items` items in one call (no judge call unless `llm_extract`). A bad item
    gets an error entry (and is listed in the summary's `bad_lines` by 1-based position); the
    others are scored. With `llm_extract`, a key over its day's budget is answered 429
    `budget_exhausted`, as `POST /v1/grade` is.
    """
    return await service.score_mcq(
        body, grader=grader, settings=settings, owner=owner, budgets=budgets
    )


@router.post(
    "/jobs", status_code=202, operation_id="submitMcqJob", summary="Submit a multiple-choice job",
    openapi_extra=UPLOAD.operation, response_description="The job, queued or already running.",
    responses=error_responses(415, 429),
)
async def submit_mcq_job(
    request: Request,
    response: Response,
    context: JobContextDep,
    query_options: Annotated[McqOptions | None, Depends(options_query)],
) -> JobStatus:
    """Submit items as JSON (the body of `POST /v1/mcq`), a JSONL body or a multipart `file`.

    For JSONL and multipart uploads, options are query parameters (`aggregate`, `group_by`,
    `llm_extract`, `fuzzy_threshold`). Bad lines are recorded with their line numbers (the
    `invalid` count; the first 1,000 as error entries in the results and `bad_lines` in the
    summary); the rest are scored in the background and survive a restart. The body is held
    to the in-flight byte limits as `POST /v1/jobs`'s is (429 per key, 503 in all).
    """
    async with receive_upload(request, McqBody) as upload:
        status = await service.submit_mcq_job(upload, query_options, context)
    response.headers["Location"] = f"/v1/mcq/jobs/{status.id}"
    return status


@router.get(
    "/jobs/{job_id}", operation_id="getMcqJob", summary="A multiple-choice job's status",
    responses=error_responses(404),
)
async def get_mcq_job(job_id: str, jobs: JobsDep, owner: OwnerDep) -> JobStatus:
    """Progress of the job: `scored` counts parsed answers, `unscored` unparseable ones."""
    return await jobs.status(job_id, owner, MCQ)


add_results_route(
    router, "/jobs/{job_id}/results", kind=MCQ, entry=McqEntry,
    summary="Stream a multiple-choice job's results", operation_id="getMcqJobResults",
)


@router.get(
    "/jobs/{job_id}/summary", operation_id="getMcqJobSummary",
    summary="Summary of a multiple-choice job", responses=error_responses(404),
)
async def mcq_job_summary(job_id: str, jobs: JobsDep, owner: OwnerDep) -> McqSummary:
    """Accuracy and breakdowns over the results finished so far, with the skipped lines."""
    return await service.mcq_job_summary(jobs, job_id, owner)


@router.delete(
    "/jobs/{job_id}", operation_id="cancelMcqJob", summary="Cancel a multiple-choice job",
    responses=error_responses(404),
)
async def cancel_mcq_job(job_id: str, jobs: JobsDep, owner: OwnerDep) -> JobStatus:
    """Cancel the job; results finished so far are kept."""
    return await jobs.cancel(job_id, owner, MCQ)
