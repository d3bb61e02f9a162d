"""Calibration runs as jobs of kind ``calibrate``: starting one, its status, and its runner.

A run grades a human-rated set with each judge configuration and writes a report
(``api.services.reports`` serves it). It is a job in the shared job store, so it has an owner
(another API key gets 404 for it and its report), a lease, and survives restarts.

Where the report lives: the process running a job writes it into a scratch folder,
``<data dir>/reports/<job id>/``; once the run is finished its files (report, plots, mappings,
grades, ``run.json``) are stored in the job store with the job, and the folder is removed. Every
replica sharing the store then serves the report, and retention deletes it with the job. An
uploaded set is stored with the job when it is submitted, so whichever replica claims the run
can load it.

Restarts resume: ``run_calibration`` writes each configuration's grades to the scratch folder as
they finish and skips graded items when run again, so the next run of an interrupted job in the
same process's data folder (after a clean shutdown at once, after a crash when the lease lapses)
completes it without repeating judge calls; another replica starts it over. A file lock in the
folder keeps two runs of one report apart.

A run grades on the service's event loop with the service's grader (its concurrency, cache and
breakers), at most a job's share in flight, so ``DELETE /v1/calibrate/{id}`` stops it at once
(``cancel_calibration``). Its judge requests reserve against its key's day budget
(``max_cost_per_key_usd``), as grading's do: a run that would call a judge is refused 429
``budget_exhausted`` while the key's day is spent, and a run that reaches the budget stops
sending and fails, saying so (``budget_exhausted: ...``, with how many items it graded; their
judge calls are cached, so the same run submitted again sends only the rest).

Building the report (bootstraps, plots) executes in a daemon thread rather than
``asyncio.to_thread``: the default executor's threads are joined at interpreter exit, so a long
report would hold a shutting-down service hostage; a daemon thread is simply dropped, and the
next process resumes the work.

Sets are chosen by name only (shared or bundled): a request can never make the service read an
arbitrary path. An uploaded set is written to the scratch folder (``input.jsonl``), kept in the
job store, and loaded by the same loader as files, line by line; bad lines are left out and
listed in the status.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

from api.budgets import KeyBudgets
from api.deps import JobContext
from api.errors import JudgeNotConfigured, OverBudget
from api.jobs import JobManager, JobRow, JobRunner, JobStore, Quota, job_status
from api.jobs.files import MAX_FILE_BYTES
from api.services.calibration_runs import in_daemon_thread, scratch_folder, try_lock
from api.services.judges import LLM_METRICS, allowed_models
from api.settings import ServiceSettings
from bonusjudge_client.wire.schemas import CalibrateBody, CalibrationJob, SetProblem
from core.errors import ConfigError, InputError, JudgeError
from judge.budget import Budget
from judge.config import JudgeConfig

if TYPE_CHECKING:
    from calibration.runner import BudgetStopped, GradedSet
    from calibration.sets import LoadedSet

log = logging.getLogger("bonusjudge.calibration")

CALIBRATE = "calibrate"
"""Job kind of calibration runs in the shared job store."""

REPORTS = "reports"
"""Folder of the runs' scratch folders (one per running job), under the service's data folder."""

REPORT_FILE = "report.json"
"""The report itself; a finished run without it in the store has no report."""

INPUT_FILE = "input.jsonl"
"""An uploaded set, as written into its report folder."""

RUN_FILE = "run.json"
"""Timings and counts of a finished run, next to its report."""

SERVED = {
    ".png": "image/png",
    ".json": "application/json",
    ".md": "text/markdown; charset=utf-8",
    ".jsonl": "application/x-ndjson",
}
"""Files of a run kept in the store and served (``/files/{name}``), by suffix: their media types."""

_MAX_PROBLEMS = 100

_T = TypeVar("_T")


def reports_dir(settings: ServiceSettings) -> Path:
    """The folder holding the runs' scratch folders (``<data dir>/reports``)."""
    return settings.resolved_data_dir() / REPORTS


def report_remover(settings: ServiceSettings) -> Callable[[str], None]:
    """What removes a run's scratch folder here, if any, once retention deletes its job.

    The files kept in the store go with the job itself.
    """
    root = reports_dir(settings)

    def remove(job_id: str) -> None:
        # The id comes from the job store (a uuid hex), never from a request.
        shutil.rmtree(root / job_id, ignore_errors=True)

    return remove


def read_json(data: bytes | None) -> Any:
    """The value of a stored JSON file, or None when it is missing or not JSON."""
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def is_served(name: str) -> bool:
    """Whether ``name`` can name a kept file.

    That is a relative POSIX path of a served type with no hidden, empty, ``.`` or ``..`` part:
    a name from a request can never name anything else.
    """
    if not name or len(name) > 1024 or "\x00" in name or "\\" in name:
        return False
    parts = name.split("/")
    if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return False
    return PurePosixPath(name).suffix in SERVED


def kept_files(folder: Path) -> dict[str, bytes]:
    """The files of a finished run's folder to keep in the store, by relative name.

    Served types only (never the lock or a hidden file). A file over the store's per-file limit
    is left out with a warning, except the report itself. (A run that wrote no report keeps
    what it wrote; it is done, and has no report to serve.)

    Raises:
        JudgeError: ``report.json`` is over the store's per-file limit.
    """
    files: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if not path.is_file() or not is_served(name):
            continue
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            if name == REPORT_FILE:
                raise JudgeError(
                    f"the report is {size} bytes, more than the job store keeps per file "
                    f"({MAX_FILE_BYTES}); calibrate fewer items or metrics"
                )
            log.warning("calibration report file %s (%d bytes) is too large to keep", name, size)
            continue
        files[name] = path.read_bytes()
    return files


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


def load_dataset(options: dict[str, Any], folder: Path, settings: ServiceSettings) -> LoadedSet:
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


def calibration_status(row: JobRow, store: JobStore) -> CalibrationJob:
    """The public status of a calibration job row (reads its ``run.json`` once it is done).

    Blocking (a store read): run it in a worker thread.
    """
    options = json.loads(row["options"])
    base = job_status(row)
    timings: dict[str, float] = {}
    report = None
    if base.status == "done":
        report = f"/v1/reports/{base.id}"
        run = read_json(store.read_file(base.id, RUN_FILE))
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


async def calibration_job(job_id: str, *, jobs: JobManager, owner: str) -> CalibrationJob:
    """The status of ``owner``'s calibration run ``job_id``.

    Raises:
        NotFound: no such calibration job for ``owner``.
    """
    row = await jobs.row(job_id, owner, CALIBRATE)
    return await asyncio.to_thread(calibration_status, row, jobs.store)


async def cancel_calibration(job_id: str, *, jobs: JobManager, owner: str) -> CalibrationJob:
    """Cancel ``owner``'s calibration run ``job_id``; its status then says ``cancelled``.

    The run's task is cancelled here (another replica's at its next lease renewal, within
    ``poll_seconds``), and with it the judge calls in flight. A finished run is left as it is.

    Raises:
        NotFound: no such calibration job for ``owner``.
    """
    await jobs.cancel(job_id, owner, CALIBRATE)
    return await calibration_job(job_id, jobs=jobs, owner=owner)


# -- starting a run ------------------------------------------------------------------------------


def _check_judges(body: CalibrateBody, default: str, settings: ServiceSettings) -> list[str]:
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


def _calls_judge(config: JudgeConfig) -> bool:
    """Whether a pass with ``config`` sends requests to a provider (an LLM judge's metrics)."""
    return not config.is_embedded and bool(LLM_METRICS.intersection(config.metrics))


async def _check_budget(body: CalibrateBody, judges: list[str], context: JobContext) -> None:
    """Refuse a run that would call a judge while the caller's day budget is used up.

    Runs of ROUGE-L and BERTScore alone, or of the embedded matcher, send nothing and pass.

    Raises:
        OverBudget: a judge of the run is an LLM and the key's day budget is used up.
        InputError: (``judges.N``) a budget is in force and litellm has no price for a judge.
    """
    base = context.grader.config.model_copy(update={"metrics": ("coverage",)})
    budgets = context.budgets
    for index, model in enumerate(judges):
        config = base.model_copy(update={"model": model})
        if not _calls_judge(config):
            continue
        await budgets.check(context.owner)
        field = f"judges.{index}" if body.judges else "judges"
        await budgets.budget(context.owner, config, field=field)


async def start_calibration(body: CalibrateBody, context: JobContext) -> CalibrationJob:
    """Check a calibration request, prepare its report folder and store it as a job of the caller.

    The set is loaded once here, so a set without a usable line is refused at once (and its
    problems are listed in the status); the folder is removed again when the job is not stored.
    An uploaded set is kept in the job store with the job (any replica may run it).

    Raises:
        InputError: an unknown set, both or neither of a set and items, options that do not
            apply, judges not allowed, no usable line, an upload larger than the job store
            keeps, or a judge without a price under a budget.
        JudgeNotConfigured: the coverage metric without a judge model.
        OverBudget: the run would call a judge and the caller's day budget is used up.
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
    await _check_budget(body, judges, context)
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

    store = context.jobs.store

    def prepare() -> LoadedSet:
        folder.mkdir(parents=True, exist_ok=True)
        if body.items is not None:
            _write_upload(folder, body.items)
        dataset = load_dataset(options, folder, settings)
        if not dataset.items:
            first = "; ".join(str(p) for p in dataset.problems[:3])
            raise InputError(
                f"items: no line of the set loaded ({len(dataset.problems)} bad: {first})",
                field="items" if body.items is not None else "set",
            )
        if body.items is not None:
            upload = (folder / INPUT_FILE).read_bytes()
            if len(upload) > MAX_FILE_BYTES:
                raise InputError(
                    f"items: the set takes {len(upload)} bytes as JSONL, more than the job "
                    f"store keeps ({MAX_FILE_BYTES}); upload fewer or shorter items",
                    field="items",
                )
            # Stored before the job: the replica that claims the run finds it there.
            store.put_files(job_id, {INPUT_FILE: upload})
        return dataset

    def discard() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        store.delete_files(job_id)

    try:
        dataset = await asyncio.to_thread(prepare)
    except BaseException:
        await asyncio.to_thread(discard)
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
    except BaseException:  # over quota (or the store failed): what was prepared goes too
        await asyncio.to_thread(discard)
        raise
    return await calibration_job(job_id, jobs=context.jobs, owner=context.owner)


# -- the runner ----------------------------------------------------------------------------------


def make_runner(settings: ServiceSettings, budgets: KeyBudgets) -> JobRunner:
    """The ``calibrate`` job runner for a service with these settings and cost ``budgets``.

    A run grades with the service's own grader, on the service's event loop: its judge calls
    share the grader's concurrency, cache and breakers with every other request, and the run
    keeps to a job's share of that concurrency (``JobManager.share``), as grading jobs do. A
    run built its own grader per judge before, so each run added 16 calls in flight to the
    service's 16 (96 with six runs), and could not be stopped. Since the run is the job's task,
    cancelling the job (``DELETE /v1/calibrate/{id}``) cancels the items in flight, and with
    them their provider requests. Only building the report (bootstraps, plots: CPU) runs in a
    daemon thread.
    """

    async def run(manager: JobManager, job_id: str, row: JobRow) -> None:
        options = json.loads(row["options"])
        folder = reports_dir(settings) / job_id
        await asyncio.to_thread(scratch_folder, manager.store, job_id, folder, options, INPUT_FILE)
        fd = try_lock(folder)
        if fd is None:
            # An earlier run of this report is still going in this or another process (its
            # thread outlived a lost lease): leave the job queued and try again later.
            log.info("calibration %s: its folder is locked by another run; retrying later", job_id)
            await asyncio.sleep(manager.poll_seconds)
            return
        handed_over = False  # once the report's thread runs, it releases the lock
        try:
            # Imported in a thread: the calibration package pulls in scipy and matplotlib
            # (seconds), which must not stall the event loop everyone's requests share.
            await asyncio.to_thread(importlib.import_module, "calibration.runner")
            from calibration.runner import BudgetStopped, Halted, write_calibration

            if not await asyncio.to_thread(manager.store.start_run, job_id, manager.token):
                return
            try:
                graded = await _grade(manager, job_id, str(row["owner"]), options, folder)
            except OverBudget as exc:  # the key's day was spent while the run was queued
                await _over_budget(manager, job_id, folder, f"{exc}; nothing was sent")
                return
            except BudgetStopped as exc:
                await _over_budget(manager, job_id, folder, await _stopped(budgets, row, exc))
                return
            except Halted:
                # Shutting down or making room: what was graded is in the grade files, and
                # the next run of the job resumes from them.
                log.info("calibration %s: stopped; left to resume", job_id)
                return
            except (JudgeError, ValueError) as exc:
                await _failed(manager, job_id, folder, exc)
                return

            def work() -> dict[str, Any]:
                try:
                    outcome = write_calibration(
                        graded, folder=folder, seed=int(options["seed"]),
                        n_resamples=int(options["resamples"]),
                    )
                    summary = {"timings": outcome.timings, "graded": outcome.graded}
                    (folder / RUN_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
                    # Into the store before the job is done: a status saying "done" has a report.
                    manager.store.put_files(job_id, kept_files(folder))
                    return summary
                finally:
                    os.close(fd)  # releases the lock

            pending = in_daemon_thread(work, f"bonusjudge-calibrate-{job_id[:8]}")
            handed_over = True
        finally:
            if not handed_over:
                os.close(fd)
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
            await _failed(manager, job_id, folder, exc)
            return
        graded_items = max((int(v) for v in summary["graded"].values()), default=0)
        total = int(row["total"])
        await asyncio.to_thread(
            manager.store.set_progress, job_id, manager.token, total, min(graded_items, total)
        )
        # The report is in the store: the scratch folder has served its purpose. Removed before
        # the run is marked done, so a caller who sees "done" never finds it still on disk (a
        # run this replica loses now is resumed from the judge's cache, scratch or not).
        await asyncio.to_thread(shutil.rmtree, folder, True)
        await asyncio.to_thread(manager.store.complete_if_finished, job_id, manager.token)

    async def _grade(
        manager: JobManager, job_id: str, owner: str, options: dict[str, Any], folder: Path
    ) -> GradedSet:
        """Load the run's set and grade it with the service's grader, paced as a job.

        Each judge pass spends against ``owner``'s day budget.

        Raises:
            OverBudget: a pass would call a judge and the key's day budget is used up.
            BudgetStopped: the budget refused a request midway.
        """
        from calibration.runner import Pace, calibration_subset, grade_passes, plan_passes

        dataset = await asyncio.to_thread(load_dataset, options, folder, settings)
        subset = calibration_subset(dataset, options.get("limit"))
        grader = manager.grader
        # The service's default judge (possibly injected) is the calibration's default judge.
        passes = plan_passes(
            grader.config, judges=options["judges"], metrics=options["metrics"],
            items=subset.items,
        )
        by_model: dict[str, Budget | None] = {}
        for grading in passes:
            await grader.prepare(grading.config)
            if _calls_judge(grading.config):
                await budgets.check(owner)
                by_model[grading.config.model] = await budgets.budget(
                    owner, grading.config, field="judges"
                )
        width = grader.config.concurrency
        pace = Pace(
            width=lambda: manager.share(width), stop=lambda: manager.halted(job_id),
            budget=lambda config: by_model.get(config.model) if _calls_judge(config) else None,
        )
        return await grade_passes(
            subset, passes, folder=folder, grader=grader,
            retest=bool(options.get("retest")), pace=pace,
        )

    return run


async def _stopped(budgets: KeyBudgets, row: JobRow, exc: BudgetStopped) -> str:
    """The detail of a run its key's day budget stopped: the limit, the spend, what was graded."""
    cap = await budgets.key_cap(str(row["owner"]))
    over = budgets.over_key(cap) if cap is not None else "budget_exhausted"
    return (
        f"{over}; {exc.label}: {exc} (their judge calls are cached: the same run submitted "
        "again then sends only the rest)"
    )


async def _over_budget(manager: JobManager, job_id: str, folder: Path, detail: str) -> None:
    """End a run the key's day budget stopped: failed, ``detail`` saying so; no report."""
    log.info("calibration %s: %s", job_id, detail)
    await asyncio.to_thread(manager.store.fail, job_id, manager.token, detail)
    await asyncio.to_thread(shutil.rmtree, folder, True)


async def _failed(manager: JobManager, job_id: str, folder: Path, exc: Exception) -> None:
    """Mark a run failed with why, and remove its scratch folder.

    Input and statistics problems (too few rated items, a set the judge cannot grade) are the
    caller's to read; anything else stays in the log.
    """
    log.warning("calibration %s failed: %s", job_id, exc)
    await asyncio.to_thread(manager.store.fail, job_id, manager.token, f"calibration failed: {exc}")
    await asyncio.to_thread(shutil.rmtree, folder, True)
