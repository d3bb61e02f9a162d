"""Calibration runs as jobs (``POST /v1/calibrate``) and the reports they write (``/v1/reports``).

What a run does and where its report lives (the job store) are the services'
(``api.services.calibration``, ``api.services.reports``); the routes read the request and serve
the files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Response

from api.deps import JobContextDep, JobsDep, OwnerDep, require_owner
from api.errors import error_responses
from api.jobs import JobManager
from api.routes.common import guarded_router
from api.services import calibration as service
from api.services import reports
from bonusjudge_client.wire.schemas import CalibrateBody, CalibrationJob, ReportList

router = guarded_router("/v1", "calibration", require_owner)

_OBJECT: dict[str, Any] = {"type": "object"}


def _file_route(
    path: str, operation_id: str, summary: str, answer: str, schemas: dict[str, dict[str, Any]]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``@router.get`` for a route serving a report file.

    It answers the file (``answer`` describes it, in the content types of ``schemas``) or a 404.
    """
    content = {media: {"schema": schema} for media, schema in schemas.items()}
    return router.get(
        path, operation_id=operation_id, summary=summary, response_class=Response,
        responses={200: {"content": content, "description": answer}, **error_responses(404)},
    )


async def _report_file(report_id: str, name: str, jobs: JobManager, owner: str) -> Response:
    """The file ``name`` of a report, as its own media type."""
    content, media = await reports.report_content(report_id, name, jobs=jobs, owner=owner)
    return Response(content, media_type=media)


@router.post(
    "/calibrate", status_code=202, operation_id="startCalibration",
    summary="Start a calibration run", responses=error_responses(429),
    response_description="The calibration job, queued or already running.",
)
async def calibrate(
    body: CalibrateBody, response: Response, context: JobContextDep
) -> CalibrationJob:
    """Correlate judges and metrics with the human ratings of a set; runs in the background.

    The report (`GET /v1/reports/{id}`) has agreement statistics with bootstrap intervals,
    inter-annotator ceilings, calibrated mappings and plots. Poll `GET /v1/calibrate/{id}`.
    A run that calls a judge spends the key's day budget (`max_cost_per_key_usd`): while it is
    spent the run is answered 429 `budget_exhausted`, and a run that reaches it ends `failed`
    with a `detail` saying so.
    """
    job = await service.start_calibration(body, context)
    response.headers["Location"] = f"/v1/calibrate/{job.id}"
    return job


@router.get(
    "/calibrate/{job_id}", operation_id="getCalibration",
    summary="A calibration run's status", responses=error_responses(404),
)
async def calibration_job(job_id: str, jobs: JobsDep, owner: OwnerDep) -> CalibrationJob:
    """Status of the run: queued, running, done (with its report) or failed (with why)."""
    return await service.calibration_job(job_id, jobs=jobs, owner=owner)


@router.delete(
    "/calibrate/{job_id}", operation_id="cancelCalibration",
    summary="Cancel a calibration run", responses=error_responses(404),
)
async def cancel_calibration(job_id: str, jobs: JobsDep, owner: OwnerDep) -> CalibrationJob:
    """Stop a queued or running run; its status then says `cancelled`.

    No judge call is started after this and those in flight are abandoned. A finished run is
    left as it is.
    """
    return await service.cancel_calibration(job_id, jobs=jobs, owner=owner)


@router.get("/reports", operation_id="listReports", summary="Stored calibration reports")
async def list_reports(jobs: JobsDep, owner: OwnerDep) -> ReportList:
    """The caller's finished calibration reports, newest first."""
    return await reports.list_reports(jobs=jobs, owner=owner)


@_file_route(
    "/reports/{report_id}", "getReport", "A calibration report (report.json)",
    "The report's JSON (set, options, configs, metrics, ...).", {"application/json": _OBJECT},
)
async def get_report(report_id: str, jobs: JobsDep, owner: OwnerDep) -> Response:
    """The whole `report.json`: set, options, configurations, per-metric agreement, plots."""
    return await _report_file(report_id, "report.json", jobs, owner)


@_file_route(
    "/reports/{report_id}/report.md", "getReportMarkdown", "A calibration report as Markdown",
    "The report's Markdown.", {"text/markdown": {"type": "string"}},
)
async def get_report_markdown(report_id: str, jobs: JobsDep, owner: OwnerDep) -> Response:
    """The human-readable report (`report.md`); its plots are under `files/`."""
    return await _report_file(report_id, "report.md", jobs, owner)


@_file_route(
    "/reports/{report_id}/files/{name:path}", "getReportFile", "A file of a calibration report",
    "A plot (PNG), a mapping (JSON) or another report file.",
    {"image/png": {"type": "string", "format": "binary"}, "application/json": _OBJECT},
)
async def get_report_file(
    report_id: str, name: str, jobs: JobsDep, owner: OwnerDep
) -> Response:
    """A file of the report folder by its relative name.

    For example `scatter_rouge_l.png` or `mappings/rouge_l.json` (see `files` in
    `GET /v1/reports`). A name leaving the folder, a hidden file or another type is a 404.
    """
    return await _report_file(report_id, name, jobs, owner)
