"""Calibration runs as jobs of kind ``calibrate``: starting one, its status, and its runner.

A run grades a human-rated set with each judge configuration and writes a report folder
(``api.services.reports``). It is a job in the shared job store, so it has an owner (another API
key gets 404 for it and its report), a lease, and survives restarts.

Restarts resume: ``run_calibration`` writes each configuration's grades to the report folder as
they finish and skips graded items when run again, so the next process that claims an
interrupted run (after a clean shutdown at once, after a crash when the lease lapses) completes
it without repeating judge calls. A file lock in the folder keeps two runs of one report apart.

The run executes in a daemon thread rather than ``asyncio.to_thread``: the default executor's
threads are joined at interpreter exit, so a long run would hold a shutting-down service hostage;
a daemon thread is simply dropped, and the next process resumes its work.

Sets are chosen by name only (shared or bundled): a request can never make the service read an
arbitrary path. An uploaded set is written to the report folder (``input.jsonl``) and loaded by
the same loader as files, line by line; bad lines are left out and listed in the status.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from api.deps import JobContext
from api.errors import JudgeNotConfigured
from api.jobs import JobManager, JobRunner, Quota, job_status
from api.schemas import CalibrateBody, CalibrationJob, SetProblem
from api.services.judges import allowed_models
from core.errors import ConfigError, InputError, JudgeError
from judge.config import Settings

if TYPE_CHECKING:
    from calibration.sets import LoadedSet

log = logging.getLogger("bonusjudge.calibration")

CALIBRATE = "calibrate"
"""Job kind of calibration runs in the shared job store."""

REPORTS = "reports"
"""Folder of the reports, under the service's data folder."""

INPUT_FILE = "input.jsonl"
"""An uploaded set, as written into its report folder."""

RUN_FILE = "run.json"
"""Timings and counts of a finished run, next to its report."""

_LOCK_FILE = ".lock"
_MAX_PROBLEMS = 100

_T = TypeVar("_T")


def reports_dir(settings: Settings) -> Path:
    """The folder holding one subfolder per calibration report (``<data dir>/reports``)."""
    return settings.resolved_data_dir() / REPORTS


def report_remover(settings: Settings) -> Callable[[str], None]:
    """What removes a calibration run's report folder once retention deletes its job."""
    root = reports_dir(settings)

    def remove(job_id: str) -> None:
        # The id comes from the job store (a uuid hex), never from a request.
        shutil.rmtree(root / job_id, ignore_errors=True)

    return remove


def read_json(path: Path) -> Any:
    """A JSON file's value, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# -- loading sets --------------------------------------------------------------------------------


def _source_of(name: str) -> str:
    """``example`` or ``shared`` for a set's name (blocking on first use: imports the package).

    Raises:
        InputError: (``set``) not the name of a shared or bundled set.
    """
    # Imported here: the calibration package pulls in scipy and matplotlib (seconds), which the
    # service should not pay for at start-up when nobody calibrates.
    from calibration.sets import EXAMPLE_SETS, SHARED_SETS

    if name in EXAMPLE_SETS:
        return "example"
    if name in SHARED_SETS:
        return "shared"
    known = ", ".join([*sorted(EXAMPLE_SETS), *sorted(SHARED_SETS)])
    raise InputError(f"set: unknown calibration set {name!r}; known: {known}", field="set")


def load_dataset(options: dict[str, Any], folder: Path, settings: Settings) -> LoadedSet:
    """Load the set a calibration job names (blocking: run it in a worker thread).

    Raises:
        InputError: (``scale``) an invalid scale for an uploaded set.
        ConfigError: a shared set that the service cannot read (its folder or file is missing):
            the service's data, not the caller's input, is at fault.
    """
    from calibration.sets import load_example_set, load_set, load_shared_set

    source = options["source"]
    if source == "upload":
        return load_set(folder / INPUT_FILE, name=options["set"], scale=options.get("scale"))
    if source == "example":
        return load_example_set(options["set"])
    try:
        return load_shared_set(options["set"], directory=settings.calibration_dir)
    except InputError as exc:
        raise ConfigError(
            f"the shared calibration set {options['set']!r} is not available on this service: "
            f"{exc}",
            field="calibration_dir",
        ) from exc


def _write_upload(folder: Path, items: list[Any]) -> None:
    # One JSON value per line, exactly as a file would hold it: the loader then validates an
    # upload and a file alike, and reports problems by line (= 1-based position here).
    with (folder / INPUT_FILE).open("w", encoding="utf-8") as handle:
        for item in items:
            handle.write(json.dumps(item, ensure_ascii=False) + "\n")


def _problems(dataset: LoadedSet) -> list[dict[str, Any]]:
    return [
        {"line": p.line, "reason": p.message, "id": p.id} for p in dataset.problems[:_MAX_PROBLEMS]
    ]


# -- status --------------------------------------------------------------------------------------


def calibration_status(row: sqlite3.Row, settings: Settings) -> CalibrationJob:
    """The public status of a calibration job row (reads ``run.json`` once it is done)."""
    options = json.loads(row["options"])
    base = job_status(row)
    timings: dict[str, float] = {}
    report = None
    if base.status == "done":
        report = f"/v1/reports/{base.id}"
        run = read_json(reports_dir(settings) / base.id / RUN_FILE)
        if isinstance(run, dict) and isinstance(run.get("timings"), dict):
            timings = {str(k): float(v) for k, v in run["timings"].items()}
    return CalibrationJob(
        id=base.id,
        status=base.status,
        set=options["set"],
        source=options["source"],
        items=base.total,
        problems=options.get("problems", 0),
        problem_lines=[SetProblem.model_validate(p) for p in options.get("problem_lines", [])],
        metrics=options["metrics"],
        judges=options.get("judges", []),
        limit=options.get("limit"),
        seed=options["seed"],
        resamples=options["resamples"],
        retest=options.get("retest", False),
        created_at=base.created_at,
        updated_at=base.updated_at,
        detail=base.detail,
        report=report,
        timings=timings,
    )


async def calibration_job(
    job_id: str, *, jobs: JobManager, owner: str, settings: Settings
) -> CalibrationJob:
    """The status of ``owner``'s calibration run ``job_id``.

    Raises:
        NotFound: no such calibration job for ``owner``.
    """
    return calibration_status(await jobs.row(job_id, owner, CALIBRATE), settings)


# -- starting a run ------------------------------------------------------------------------------


def _check_judges(body: CalibrateBody, default: str, settings: Settings) -> list[str]:
    allowed = allowed_models(default, settings)
    seen: set[str] = set()
    for index, model in enumerate(body.judges):
        if model not in allowed:
            raise InputError(
                f"judges.{index}: model {model!r} is not allowed; allowed: "
                f"{', '.join(repr(m) for m in allowed)}",
                field=f"judges.{index}",
            )
        if model in seen:
            raise InputError(f"judges.{index}: {model!r} is listed twice", field=f"judges.{index}")
        seen.add(model)
    if "coverage" not in body.metrics:
        if body.judges:
            raise InputError(
                "judges: judges are calibrated through the coverage metric; add `coverage` to "
                "metrics or leave judges out",
                field="judges",
            )
        return []
    judges = list(body.judges) or [default]
    if not all(model.strip() for model in judges):
        raise JudgeNotConfigured(
            "the coverage metric needs a judge model and none is configured: set "
            "BONUSJUDGE_JUDGE__MODEL, or calibrate only rouge_l/bertscore"
        )
    return judges


async def start_calibration(body: CalibrateBody, context: JobContext) -> CalibrationJob:
    """Check a calibration request, prepare its report folder and store it as a job of the caller.

    The set is loaded once here, so a set without a usable line is refused at once (and its
    problems are listed in the status); the folder is removed again when the job is not stored.

    Raises:
        InputError: an unknown set, both or neither of a set and items, options that do not
            apply, judges not allowed, or no usable line.
        JudgeNotConfigured: the coverage metric without a judge model.
        QuotaExceeded: the job would take ``owner`` over a quota.
    """
    if (body.dataset is None) == (body.items is None):
        raise InputError("set: give exactly one of `set` (a set's name) and `items`", field="set")
    if body.items is None and (body.name is not None or body.scale is not None):
        field = "name" if body.name is not None else "scale"
        raise InputError(f"{field}: only applies to an uploaded set (`items`)", field=field)
    source = (
        "upload" if body.items is not None
        else await asyncio.to_thread(_source_of, body.dataset or "")
    )
    settings = context.settings
    judges = _check_judges(body, context.grader.config.model, settings)
    metrics = list(dict.fromkeys(body.metrics))
    job_id = uuid.uuid4().hex
    folder = reports_dir(settings) / job_id
    options: dict[str, Any] = {
        "set": body.dataset if body.items is None else (body.name or "uploaded"),
        "source": source,
        "scale": body.scale,
        "judges": judges,
        "metrics": metrics,
        "limit": body.limit,
        "seed": body.seed,
        "resamples": body.resamples,
        "retest": body.retest,
    }

    def prepare() -> LoadedSet:
        folder.mkdir(parents=True, exist_ok=True)
        if body.items is not None:
            _write_upload(folder, body.items)
        return load_dataset(options, folder, settings)

    try:
        dataset = await asyncio.to_thread(prepare)
        if not dataset.items:
            first = "; ".join(str(p) for p in dataset.problems[:3])
            raise InputError(
                f"items: no line of the set loaded ({len(dataset.problems)} bad: {first})",
                field="items" if body.items is not None else "set",
            )
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, folder, True)
        raise
    options["problems"] = len(dataset.problems)
    options["problem_lines"] = _problems(dataset)
    total = min(len(dataset.items), body.limit) if body.limit else len(dataset.items)
    try:
        await context.jobs.submit(
            owner=context.owner, items=[], overrides=None, config=None, kind=CALIBRATE,
            options=options,
            total=total, model=", ".join(judges), config_hash=dataset.short_hash, job_id=job_id,
            quota=Quota.from_settings(settings),
        )
    except BaseException:  # over quota (or the store failed): the prepared folder goes too
        await asyncio.to_thread(shutil.rmtree, folder, True)
        raise
    return await calibration_job(
        job_id, jobs=context.jobs, owner=context.owner, settings=settings
    )


# -- the runner ----------------------------------------------------------------------------------


def _in_daemon_thread(work: Callable[[], _T], name: str) -> asyncio.Future[_T]:
    """Run ``work`` in a daemon thread; its outcome arrives as an asyncio future."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def deliver(setter: Callable[[], None]) -> None:
        if not future.done():
            setter()

    def target() -> None:
        try:
            value = work()
        except BaseException as exc:  # delivered to the awaiting task, which decides
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(deliver, lambda: future.set_exception(error))
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(deliver, lambda: future.set_result(value))

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


def _try_lock(folder: Path) -> int | None:
    """An exclusive lock on the report folder (fd), or None when another run holds it."""
    fd = os.open(folder / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def make_runner(settings: Settings) -> JobRunner:
    """The ``calibrate`` job runner for a service with these settings."""

    async def run(manager: JobManager, job_id: str, row: sqlite3.Row) -> None:
        options = json.loads(row["options"])
        folder = reports_dir(settings) / job_id
        folder.mkdir(parents=True, exist_ok=True)
        fd = _try_lock(folder)
        if fd is None:
            # An earlier run of this report is still going in this or another process (its
            # thread outlived a lost lease): leave the job queued and try again later.
            log.info("calibration %s: its folder is locked by another run; retrying later", job_id)
            await asyncio.sleep(manager.poll_seconds)
            return
        if not await asyncio.to_thread(manager.store.start_run, job_id, manager.token):
            os.close(fd)
            return
        # The service's default judge (possibly injected) is the calibration's default judge.
        base = settings.model_copy(update={"judge": manager.grader.config})

        def work() -> dict[str, Any]:
            from calibration.runner import run_calibration

            try:
                dataset = load_dataset(options, folder, settings)
                outcome = run_calibration(
                    dataset, settings=base, judges=options["judges"],
                    metrics=options["metrics"], limit=options.get("limit"), out_dir=folder,
                    retest=bool(options.get("retest")), seed=int(options["seed"]),
                    n_resamples=int(options["resamples"]),
                )
                summary = {"timings": outcome.timings, "graded": outcome.graded}
                (folder / RUN_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
                return summary
            finally:
                os.close(fd)  # releases the lock

        pending = _in_daemon_thread(work, f"bonusjudge-calibrate-{job_id[:8]}")
        stopping: asyncio.Future[Any] = asyncio.ensure_future(manager.stopping.wait())
        try:
            await asyncio.wait([pending, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not pending.done():
            # Shutting down: the thread is dropped with the process, the next one resumes.
            log.info("calibration %s: left to resume after the restart", job_id)
            return
        try:
            summary = pending.result()
        except (JudgeError, ValueError) as exc:
            # Input and statistics problems (too few rated items, a set the judge cannot
            # grade) are the caller's to read; anything else stays in the log.
            log.warning("calibration %s failed: %s", job_id, exc)
            await asyncio.to_thread(manager.store.fail, job_id, manager.token,
                                    f"calibration failed: {exc}")
            return
        graded = max((int(v) for v in summary["graded"].values()), default=0)
        total = int(row["total"])
        await asyncio.to_thread(
            manager.store.set_progress, job_id, manager.token, total, min(graded, total)
        )
        await asyncio.to_thread(manager.store.complete_if_finished, job_id, manager.token)

    return run
