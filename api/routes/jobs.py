"""Grading jobs: submit (JSON, JSONL or multipart upload), watch, stream results, cancel."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from api.deps import GraderDep, JobsDep, OwnerDep, SettingsDep, select_judge
from api.errors import ERROR_RESPONSES, QUOTA_RESPONSE
from api.jobs import GRADE, Quota, build_items, job_status, read_job_upload
from api.schemas import JOB_EXAMPLE, MAX_JOBS_PAGE, JobList, JobState, JobStatus
from core.errors import InputError, field_of
from judge.aggregate import Summary
from judge.config import JudgeOverrides

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

_JSONL_EXAMPLE = (
    '{"id": "en-belief-2", "question": "What does Elizabeth believe?", "answer": "She realises '
    'Wickham lied to her.", "bonus_points": ["Elizabeth realises Wickham deceived her"], '
    '"context_1000": "...", "tom_dimension": "belief", "response": "She sees Wickham lied."}\n'
)
_UPLOAD_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/JobBody"},
                "example": JOB_EXAMPLE,
            },
            "application/x-ndjson": {
                "schema": {"type": "string", "description": "One item (JSON object) per line."},
                "example": _JSONL_EXAMPLE,
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary",
                                 "description": "JSONL file, one item per line."},
                        "judge": {"type": "string",
                                  "description": "Optional judge selection as a JSON object."},
                    },
                },
            },
        },
    }
}


def judge_query(
    model: Annotated[str | None, Query(description="Judge model (allow-listed).")] = None,
    temperature: Annotated[float | None, Query(description="Judge temperature.")] = None,
    rubric: Annotated[str | None, Query(description="Rubric family.")] = None,
    metrics: Annotated[
        str | None, Query(description="Comma-separated metrics (coverage,defects,rouge_l,...).")
    ] = None,
    length_control: Annotated[bool | None, Query(description="Apply the length cap.")] = None,
    context_window: Annotated[
        int | None, Query(description="CharToM plot window for the defect judge (0/1000/2000).")
    ] = None,
) -> JudgeOverrides | None:
    """Judge selection from query parameters (for JSONL and multipart uploads)."""
    values = {
        "model": model, "temperature": temperature, "rubric": rubric, "metrics": metrics,
        "length_control": length_control, "context_window": context_window,
    }
    given = {key: value for key, value in values.items() if value is not None}
    if not given:
        return None
    try:
        return JudgeOverrides.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_of(first["loc"])
        raise InputError(f"{field}: {first['msg']}", field=field) from None


@router.post(
    "", status_code=202, summary="Submit a grading job", openapi_extra=_UPLOAD_DOC,
    response_description="The job, queued or already running.",
    responses={429: QUOTA_RESPONSE},
)
async def submit_job(
    request: Request,
    response: Response,
    jobs: JobsDep,
    grader: GraderDep,
    settings: SettingsDep,
    owner: OwnerDep,
    query_judge: Annotated[JudgeOverrides | None, Depends(judge_query)],
) -> JobStatus:
    """Submit items as JSON `{"items", "judge"}`, a JSONL body or a multipart `file`.

    Items may be grading requests or CharToM-QA lines. Bad lines are recorded per line (see the
    `invalid` count and the error entries of the results); the rest are graded in the background,
    and survive a restart of the service. For JSONL and multipart uploads, the judge is selected
    with query parameters (or a multipart `judge` field), never both.

    A key over its quota (queued or running jobs, unfinished items, stored bytes) is answered
    429 naming the limit and its current use.
    """
    upload = await read_job_upload(request)
    if upload.judge is not None and query_judge is not None:
        raise InputError("judge: select the judge in the body or the query, not both",
                         field="judge")
    overrides = upload.judge or query_judge
    config = select_judge(grader=grader, settings=settings, overrides=overrides)
    items = build_items(upload, context_window=config.context_window, settings=settings)
    status = await jobs.submit(
        owner=owner, items=items, overrides=overrides, config=config,
        quota=Quota.from_settings(settings),
    )
    response.headers["Location"] = f"/v1/jobs/{status.id}"
    return status


@router.get("", summary="The caller's grading jobs")
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
    # One row more than the page: whether it exists says if there is a next page.
    rows = await asyncio.to_thread(
        lambda: jobs.store.list_jobs(owner, GRADE, status, limit=limit + 1, offset=offset)
    )
    more = len(rows) > limit
    return JobList(
        jobs=[job_status(row) for row in rows[:limit]],
        next_offset=offset + limit if more else None,
    )


@router.get("/{job_id}", summary="A job's status")
async def get_job(job_id: str, jobs: JobsDep, owner: OwnerDep) -> JobStatus:
    """Progress of a job: counts, rate, ETA, judge."""
    return await jobs.status(job_id, owner)


@router.get(
    "/{job_id}/results",
    summary="Stream a job's results",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}},
                     "description": "One `BatchEntry` JSON object per line."}},
)
async def job_results(
    job_id: str,
    jobs: JobsDep,
    owner: OwnerDep,
    offset: Annotated[int, Query(ge=0, description="Skip the first N finished entries.")] = 0,
) -> StreamingResponse:
    """Entries finished so far, one JSON line each, in finishing order (partial while running)."""
    lines = await jobs.entries(job_id, owner, offset)
    return StreamingResponse(lines, media_type="application/x-ndjson")


@router.get("/{job_id}/summary", summary="Aggregates of a job's results")
async def job_summary(job_id: str, jobs: JobsDep, owner: OwnerDep) -> Summary:
    """BPC, penalty rate, ROUGE-L, BERTScore and breakdowns over the results finished so far."""
    return await jobs.summary(job_id, owner)


@router.post(
    "/{job_id}/retry-unscored", status_code=202, summary="Grade a job's unscored items again"
)
async def retry_unscored(job_id: str, jobs: JobsDep, owner: OwnerDep) -> JobStatus:
    """Queue a finished job's unscored items again (e.g. after a provider outage).

    Their old results leave the results stream and come back once graded; read the results from
    offset 0 again. A job that is not `done` answers 409.
    """
    return await jobs.retry_unscored(job_id, owner)


@router.delete("/{job_id}", summary="Cancel a job")
async def cancel_job(job_id: str, jobs: JobsDep, owner: OwnerDep) -> JobStatus:
    """Cancel a job; results finished so far are kept. Cancelling a finished job changes nothing."""
    return await jobs.cancel(job_id, owner)
