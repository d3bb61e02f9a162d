"""The runner of grading jobs (kind ``grade``): grade a chunk's pending items, store each result.

A grading job is leased in chunks (``api.jobs.claims``): each runner grades the pending items of
its chunk (``current_chunk()``), so every replica with room works on the same job at once, and
whichever stores the job's last result marks it done. A job is graded with the judge
configuration it was submitted with (rebuilt from its stored overrides); if the service's
settings changed that configuration since, the job fails rather than mix two judges in one set
of aggregates. At most the chunk's share of the grader's concurrency is in flight, and each
result is stored as soon as it is ready, so a restart loses at most the items in flight.

A job runs under its key's day budget and its own ``max_cost`` (``api.budgets``, set in
``judge.budget.BUDGET``). When a cap refuses a call, the runner stops feeding items, stores what
finished, and leaves the items whose calls were refused pending (never stored as
``budget_exhausted`` results); the job is *paused* (``api.jobs.spend``): at its key's day
budget until the next UTC midnight, or a restart, which lets it try again; at its own
``max_cost`` for good (cancel it and submit the rest as a new job).
"""

from __future__ import annotations

import asyncio
import json

from api.budgets import JOB_LIMIT, KEY_LIMIT, KeyBudgets
from api.jobs.claims import Chunk
from api.jobs.manager import JobManager, JobRunner
from api.jobs.schema import JobRow
from api.jobs.spend import FOREVER
from api.jobs.worker import current_chunk, store_retry
from bonusjudge_client.wire.grading import GradeRequest, GradeResult
from judge.budget import BUDGET, Budget, Cap
from judge.config import JudgeConfig, JudgeOverrides
from judge.stats import ITEM_LEDGER, ItemLedger

_PAGE = 256
"""Pending items read from the store at a time."""


def grade_runner(budgets: KeyBudgets) -> JobRunner:
    """The runner of grading jobs (kind ``grade``): :func:`grade_job` under ``budgets``."""

    async def run(manager: JobManager, job_id: str, row: JobRow) -> None:
        await grade_job(manager, job_id, row, budgets)

    return run


async def grade_job(manager: JobManager, job_id: str, row: JobRow, budgets: KeyBudgets) -> None:
    """Grade a claimed chunk of a grading job to its end (or until halted or its lease lost).

    A chunk left with no item to grade is marked done; the job is marked done once every item
    has a result, by whichever runner (on any replica) sees it first.
    """
    store, token = manager.store, manager.token
    chunk = current_chunk()
    if chunk is None or chunk.job_id != job_id:
        raise RuntimeError(f"job {job_id}: a grading runner runs in a worker's chunk task")
    config = manager.grader.resolve(JudgeOverrides.model_validate_json(row["overrides"]))
    if config.config_hash() != row["config_hash"]:
        # Mixing two judge configurations in one job would make its aggregates meaningless.
        await asyncio.to_thread(
            store.fail, job_id, token,
            f"the judge settings changed since the job was created (config hash "
            f"{row['config_hash']} -> {config.config_hash()}); submit it again",
        )
        return
    # Wait for the warm-up (the same serialized loader): a job resumed at start-up would
    # otherwise make its first heavy imports while the start-up thread is making them.
    await manager.grader.prepare(config)
    budget = await _job_budget(budgets, row, config)
    if budget is not None and await pause_if_spent(manager, budgets, job_id, budget):
        return  # over a cap already: nothing is sent
    if not await asyncio.to_thread(store.start_run, job_id, token):
        return
    if row["paused_until"] is not None:
        await store_retry(store.spend.unpause, job_id)
    BUDGET.set(budget)  # this runner's task only (the worker runs each chunk in its own)
    await grade_items(manager, chunk, config)
    if budget is not None and await pause_if_spent(manager, budgets, job_id, budget):
        return  # its refused items stay pending
    # The job first: finishing the chunk gives up its lease, and only a holder completes it.
    if not await store_retry(store.complete_if_finished, job_id, token):
        await store_retry(store.finish_chunk, job_id, chunk.lo, token)


async def _job_budget(budgets: KeyBudgets, row: JobRow, config: JudgeConfig) -> Budget | None:
    """The caps a job runs under: its key's day, and its own ``max_cost`` if it has one."""
    max_cost = json.loads(row["options"] or "{}").get(JOB_LIMIT)
    job = None if max_cost is None else budgets.job_cap(
        str(row["id"]), float(max_cost), float(row["cost_usd"])
    )
    return await budgets.budget(str(row["owner"]), config, job)


async def pause_if_spent(
    manager: JobManager, budgets: KeyBudgets, job_id: str, budget: Budget
) -> bool:
    """Pause the job if a cap of ``budget`` is used up; whether it did.

    A cap is used up once it refused a request, or when its spend reached its limit. Grading
    and multiple-choice jobs (``llm_extract``) pause alike.
    """
    over = next((cap for cap in budget.caps if _used_up(cap)), None)
    if over is None:
        return False
    if over.name == KEY_LIMIT:
        until = budgets.next_day()
        detail = (
            f"paused: {budgets.over_key(over)}; it resumes then, or when the service restarts "
            "with a higher limit"
        )
    else:
        until = FOREVER
        detail = (
            f"paused: budget_exhausted: the job's judge calls reached its {JOB_LIMIT} "
            f"${over.max_cost:g}: ${over.spent_cost:.6f} spent; it stays paused: cancel it and "
            "submit its items without a result as a new job to go on"
        )
    await store_retry(manager.store.spend.pause, job_id, until, detail)
    return True


def _used_up(cap: Cap) -> bool:
    return cap.exhausted or (cap.max_cost is not None and cap.spent_cost >= cap.max_cost)


async def grade_items(manager: JobManager, chunk: Chunk, config: JudgeConfig) -> None:
    """Grade a chunk's pending items, at most its ``share`` in flight, storing each result.

    Each result is stored as soon as it is ready; those that finish together, in one
    transaction.
    """
    store, job_id = manager.store, chunk.job_id
    pending: dict[asyncio.Task[GradeResult], int] = {}
    page: list[tuple[int, str, str]] = []
    after = chunk.lo - 1
    exhausted = False

    budget = BUDGET.get()

    async def fill() -> None:
        nonlocal page, after, exhausted
        # A cap that refused a call stops the feeding: the items in flight finish.
        while (
            not exhausted and not manager.halted(job_id)
            and not (budget is not None and budget.exhausted)
            and len(pending) < manager.share(config.concurrency)
        ):
            if not page:
                page = await asyncio.to_thread(store.pending, job_id, after, _PAGE, chunk.hi)
                page.reverse()  # popped from the end, in index order
                if not page:
                    exhausted = True
                    return
            index, item_id, payload = page.pop()
            after = index
            request = GradeRequest.model_validate_json(payload)
            task = asyncio.ensure_future(_graded(manager, request, config, item_id))
            pending[task] = index

    try:
        await fill()
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            finished = [(pending.pop(task), task) for task in done]
            await fill()  # the freed slots work while the results are stored
            # Results finished together are stored in one transaction (those of a grade that
            # failed beside them too, before its error ends the run).
            graded: list[tuple[int, GradeResult]] = []
            failure: Exception | None = None
            for index, task in finished:
                try:
                    result = task.result()
                except Exception as exc:
                    failure = exc
                    continue
                if not _refused(result):  # a refused item stays pending until the job resumes
                    graded.append((index, result))
            if graded:
                await store_retry(store.save_grades, job_id, graded)
            if failure is not None:
                raise failure
            await fill()
    finally:
        for task in pending:
            task.cancel()


async def _graded(
    manager: JobManager, request: GradeRequest, config: JudgeConfig, item_id: str
) -> GradeResult:
    """Grade one item, counted as graded in the usage only when its result will be stored.

    An item a cap refused stays pending and is graded again when the job goes on: counted
    now, it would be counted twice, so it is counted as refused (``judge.stats.ItemLedger``).
    """
    ledger = ItemLedger()
    token = ITEM_LEDGER.set(ledger)  # this item's task only
    result: GradeResult | None = None
    try:
        result = await manager.grader.grade(request, config=config, item_id=item_id)
    finally:
        ITEM_LEDGER.reset(token)
        ledger.settle(answered=result is not None and not _refused(result))
    return result


def _refused(result: GradeResult) -> bool:
    """Whether a cap refused one of the item's calls (the item is then not stored)."""
    return any(reason.endswith(": budget_exhausted") for reason in result.unscored_reasons)
