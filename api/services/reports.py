"""The reports calibration runs write: listing them, and serving their files from the job store.

A finished run's files (``report.json``, ``report.md``, PNG plots, mapping JSON, its grades) are
kept in the job store with its job (``api.services.calibration``), so every replica sharing the
store serves them. A report belongs to the calibration job that wrote it: another API key gets
404 for both. Only names of the types in ``SERVED`` are looked up, never a hidden one, and a name
is only ever a key in the store, never a path on this machine.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import PurePosixPath
from typing import Any

from api.errors import NotFound
from api.jobs import JobManager, JobRow, JobStore, job_status
from api.services.calibration import CALIBRATE, REPORT_FILE, SERVED, is_served, read_json
from bonusjudge_client.wire.schemas import ReportInfo, ReportList

__all__ = ["SERVED", "finished_report", "list_reports", "report_content"]


async def finished_report(report_id: str, *, jobs: JobManager, owner: str) -> JobRow:
    """The job row of ``owner``'s finished report ``report_id``.

    Raises:
        NotFound: no such calibration job for ``owner``, or it has no report (yet).
    """
    row = await jobs.row(report_id, owner, CALIBRATE)
    if row["status"] != "done" or REPORT_FILE not in await asyncio.to_thread(
        jobs.store.file_names, str(row["id"])
    ):
        raise NotFound(f"calibration {report_id!r} has no report (status {row['status']})")
    return row


async def report_content(
    report_id: str, name: str, *, jobs: JobManager, owner: str
) -> tuple[bytes, str]:
    """A file of ``owner``'s finished report by its relative name, and its media type.

    Raises:
        NotFound: no such report, or ``name`` is hidden, not a served type, leaves the report
            (``..``) or is not one of its files.
    """
    row = await finished_report(report_id, jobs=jobs, owner=owner)
    data = None
    if is_served(name):
        data = await asyncio.to_thread(jobs.store.read_file, str(row["id"]), name)
    if data is None:
        raise NotFound(f"report {report_id!r} has no file {name!r}")
    return data, SERVED[PurePosixPath(name).suffix]


def _report_info(row: JobRow, store: JobStore) -> ReportInfo | None:
    job_id = str(row["id"])
    data = read_json(store.read_file(job_id, REPORT_FILE))
    if not isinstance(data, dict):
        return None
    options = json.loads(row["options"])
    info: dict[str, Any] = data["set"] if isinstance(data.get("set"), dict) else {}
    metrics: dict[str, Any] = data["metrics"] if isinstance(data.get("metrics"), dict) else {}
    return ReportInfo(
        id=job_id,
        set=str(info.get("name") or options["set"]),
        set_hash=info.get("hash"),
        items=info.get("n_items"),
        created_at=job_status(row).created_at,
        metrics=list(metrics),
        files=[name for name in store.file_names(job_id) if is_served(name)],
    )


async def list_reports(*, jobs: JobManager, owner: str) -> ReportList:
    """``owner``'s finished calibration reports, newest first."""

    def collect() -> list[ReportInfo]:
        out: list[ReportInfo] = []
        for row in jobs.store.list_jobs(owner, CALIBRATE, status="done"):
            info = _report_info(row, jobs.store)
            if info is not None:
                out.append(info)
        return out

    return ReportList(reports=await asyncio.to_thread(collect))
