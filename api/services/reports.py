"""The reports calibration runs write: listing them, and serving their files safely.

A finished run's report folder is ``<data dir>/reports/<job id>/`` (``report.json``,
``report.md``, PNG plots, mapping JSON). A report belongs to the calibration job that wrote it:
another API key gets 404 for both. Only files of the types in ``SERVED`` are served, never a
hidden file, and never anything outside the folder.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from api.errors import NotFound
from api.jobs import JobManager, job_status
from api.schemas import ReportInfo, ReportList
from api.services.calibration import CALIBRATE, read_json, reports_dir
from judge.config import Settings

SERVED = {
    ".png": "image/png",
    ".json": "application/json",
    ".md": "text/markdown; charset=utf-8",
    ".jsonl": "application/x-ndjson",
}
"""Report-folder files served by ``/files/{name}``, by suffix: their media types."""


async def report_folder(
    report_id: str, *, jobs: JobManager, owner: str, settings: Settings
) -> Path:
    """The folder of ``owner``'s finished report ``report_id``.

    Raises:
        NotFound: no such calibration job for ``owner``, or it has no report (yet).
    """
    row = await jobs.row(report_id, owner, CALIBRATE)
    folder = reports_dir(settings) / str(row["id"])
    if row["status"] != "done" or not (folder / "report.json").is_file():
        raise NotFound(f"calibration {report_id!r} has no report (status {row['status']})")
    return folder


async def report_file(
    report_id: str, name: str, *, jobs: JobManager, owner: str, settings: Settings
) -> tuple[Path, str]:
    """A served file of a report folder by its relative name, and its media type.

    Raises:
        NotFound: no such report, or ``name`` leaves the folder, is hidden, is not a served
            type or does not exist.
    """
    folder = (await report_folder(report_id, jobs=jobs, owner=owner, settings=settings)).resolve()
    try:
        target = (folder / name).resolve()
        served = (
            target.is_relative_to(folder)
            and target != folder
            and not any(part.startswith(".") for part in target.relative_to(folder).parts)
            and target.suffix in SERVED
            and target.is_file()
        )
    except (ValueError, OSError):
        # A NUL byte (ValueError) or a name too long for the file system: no such file either.
        served = False
    if not served:
        raise NotFound(f"report {report_id!r} has no file {name!r}")
    return target, SERVED[target.suffix]


def _served_files(folder: Path) -> list[str]:
    names: list[str] = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and path.suffix in SERVED and not any(
            part.startswith(".") for part in relative.parts
        ):
            names.append(relative.as_posix())
    return names


def _report_info(row: sqlite3.Row, folder: Path) -> ReportInfo | None:
    data = read_json(folder / "report.json")
    if not isinstance(data, dict):
        return None
    options = json.loads(row["options"])
    info: dict[str, Any] = data["set"] if isinstance(data.get("set"), dict) else {}
    metrics: dict[str, Any] = data["metrics"] if isinstance(data.get("metrics"), dict) else {}
    return ReportInfo(
        id=row["id"],
        set=str(info.get("name") or options["set"]),
        set_hash=info.get("hash"),
        items=info.get("n_items"),
        created_at=job_status(row).created_at,
        metrics=list(metrics),
        files=_served_files(folder),
    )


async def list_reports(*, jobs: JobManager, owner: str, settings: Settings) -> ReportList:
    """``owner``'s finished calibration reports, newest first."""
    root = reports_dir(settings)

    def collect() -> list[ReportInfo]:
        out: list[ReportInfo] = []
        for row in jobs.store.list_jobs(owner, CALIBRATE, status="done"):
            info = _report_info(row, root / str(row["id"]))
            if info is not None:
                out.append(info)
        return out

    return ReportList(reports=await asyncio.to_thread(collect))
