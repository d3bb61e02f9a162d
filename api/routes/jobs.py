"""Grading jobs: submit (JSON, JSONL or multipart upload), watch, stream results, cancel."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from pydantic import ConfigDict, field_validator

from api.deps import JobContextDep, JobsDep, OwnerDep
from api.errors import ERROR_RESPONSES, error_responses
from api.jobs import GRADE, UploadDoc, receive_job_upload
from api.routes.common import add_results_route
from api.services.jobs import list_grading_jobs, retry_unscored_items, submit_grading_job
from bonusjudge_client.wire.options import comma_list
from bonusjudge_client.wire.schemas import (
    JOB_EXAMPLE,
    MAX_JOBS_PAGE,
    BatchEntry,
    JobBody,
    JobList,
    JobState,
    JobStatus,
    RetryUnscoredBody,
)
from judge.aggregate import Summary
from judge.config import JudgeOverrides

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

_JSONL_EXAMPLE = (
    '{"id": "en-belief-2", "question": "What does Elizabeth believe?", "answer": "She realises '
    'Wickham lied to her.", "bonus_points": ["Elizabeth realises Wickham deceived her"], '
    '"context_1000": "...", "tom_dimension": "belief", "response": "She sees Wickham lied."}\n'
)
UPLOAD = UploadDoc(
    JobBody, "JobLines", "JobForm", JOB_EXAMPLE, _JSONL_EXAMPLE,
    form_fields={"judge": "Optional judge selection as a JSON object (`JudgeOverrides`)."},
)
"""How ``POST /v1/jobs`` reads its three forms of submission (the app adds the schemas)."""


class JudgeQuery(JudgeOverrides):
    """The judge selection as query parameters: the fields of ``JudgeOverrides``.

    ``metrics`` may be repeated or comma-separated (``metrics=coverage,rouge_l``). Other query
    parameters are ignored, as they are on every route.
    """

    model_config = ConfigDict(extra="ignore")

    @field_validator("metrics", mode="before")
    @classmethod
    def _split_metrics(cls, value: Any) -> Any:
        # A query parameter of a sequence field arrives as a list, one entry per occurrence.
        if isinstance(value, list | tuple):
            return comma_list(value)
        return value


@router.post(
    "", status_code=202, operation_id="submitJob", summary="Submit a grading job",
    openapi_extra=UPLOAD.operation, response_description="The job, queued or already running.",
    responses=error_responses(415, 429),
)
async def submit_job(
    request: Request,
    response: Response,
    context: JobContextDep,
    query_judge: Annotated[JudgeQuery | None, Query()] = None,
    max_cost: Annotated[
        float | None,
        Query(ge=0, allow_inf_nan=False,
              description="The job's own cost cap in USD (JSONL and multipart uploads; a JSON "
              "body has it as `max_cost`); a finite number."),
    ] = None,
) -> JobStatus:
    """Submit items as JSON `{"items", "judge", "max_cost"}`, a JSONL body or a multipart `file`.

    Items may be grading requests or CharToM-QA lines. Bad lines are recorded per line (the
    `invalid` count; the first 1,000 are error entries of the results); the rest are graded in
    the background, and survive a restart of the service. For JSONL and multipart uploads, the
    judge is selected with query parameters (or a multipart `judge` field), never both.

    The body counts against the bytes in flight of the synchronous routes while it is read and
    stored: over the key's `max_sync_bytes_per_key` it is answered 429, over the service's
    `max_sync_bytes` 503, both with `Retry-After`, before it is read. A key over its quota
    (queued or running jobs, unfinished items, stored bytes) is answered 429 naming the limit
    and its current use; a key whose judge calls reached its day's budget
    (`max_cost_per_key_usd`), 429 `budget_exhausted` with `Retry-After` (the next UTC midnight).
    """
    async with receive_job_upload(request) as upload:
        status = await submit_grading_job(upload, query_judge, context, max_cost)
    response.headers["Location"] = f"/v1/jobs/{status.id}"
    return status


@router.get("", operation_id="listJobs", summary="The caller's grading jobs")
async def list_jobs(
    jobs: JobsDep,
    owner: OwnerDep,
    limit: Annotated[
        int, Query(ge=1, le=MAX_JOBS_PAGE, description="Jobs per page (at most 500).")
    ] = 50,
    offset: Annotated[int, Query(ge=0, description="Skip the N newest jobs first.")] = 0,
    status: Annotated[JobState | None, Query(description="Only jobs in this status.")] = None,
) -> JobList:
    """The caller's own grading jobs, newest first, one page at a time.

    Pass `next_offset` as `offset` to get the next page; it is null on the last one. Offsets
    count from the newest job and each page is read afresh: a job submitted between two requests
    shifts the later pages by one (a job then shows up twice); with `status`, jobs that change
    status shift them too.
    """
    return await list_grading_jobs(jobs, owner, limit=limit, offset=offset, status=status)


@router.get(
    "/{job_id}", operation_id="getJob", summary="A job's status",
    responses=error_responses(404),
)
async def get_job(job_id: str, jobs: JobsDep, owner: OwnerDep) -> JobStatus:
    """Progress of a job: counts, rate, ETA, judge."""
    return await jobs.status(job_id, owner)


add_results_route(
    router, "/{job_id}/results", kind=GRADE, entry=BatchEntry,
    summary="Stream a job's results", operation_id="getJobResults",
)


@router.get(
    "/{job_id}/summary", operation_id="getJobSummary",
    summary="Aggregates of a job's results", responses=error_responses(404),
)
async def job_summary(job_id: str, jobs: JobsDep, owner: OwnerDep) -> Summary:
    """BPC, penalty rate, ROUGE-L, BERTScore and breakdowns over the results finished so far."""
    return await jobs.summary(job_id, owner)


@router.post(
    "/{job_id}/retry-unscored", status_code=202, operation_id="retryUnscored",
    summary="Grade a job's unscored items again", responses=error_responses(404, 409, 429),
)
async def retry_unscored(
    job_id: str,
    context: JobContextDep,
    # Optional: a POST with no body re-sends the default reasons. A default factory (rather
    # than None) keeps the documented body a plain reference to its schema.
    body: Annotated[RetryUnscoredBody, Body(default_factory=RetryUnscoredBody)],
) -> JobStatus:
    """Queue a finished job's unscored items again (e.g. after a provider outage).

    Their old results leave the results stream and come back once graded; read the results from
    offset 0 again. Items the judge answered (a refusal, an unusable answer) are not re-sent
    unless `include` names their reason; those left out are counted in the job's `detail`. A
    job that is not `done`, or has had its `max_retry_passes` passes (3 by default), answers
    409; a pass that would take the key over its job or item quota answers 429.
    """
    return await retry_unscored_items(job_id, body, context)


@router.delete(
    "/{job_id}", operation_id="cancelJob", summary="Cancel a job",
    responses=error_responses(404),
)
async def cancel_job(job_id: str, jobs: JobsDep, owner: OwnerDep) -> JobStatus:
    """Cancel a job; results finished so far are kept. Cancelling a finished job changes nothing."""
    return await jobs.cancel(job_id, owner)
