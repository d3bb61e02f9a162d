"""The runner of grading jobs (kind ``grade``): grade the pending items, store each result.

A job is graded with the judge configuration it was submitted with (rebuilt from its stored
overrides); if the service's settings changed that configuration since, the job fails rather
than mix two judges in one set of aggregates. At most the job's share of the grader's
concurrency is in flight, and each result is stored as soon as it is ready, so a restart loses
at most the items in flight.
"""

from __future__ import annotations

import asyncio

from api.jobs.manager import JobManager
from api.jobs.schema import JobRow
from api.jobs.worker import store_retry
from bonusjudge_client.wire.grading import GradeRequest, GradeResult
from judge.config import JudgeConfig, JudgeOverrides

_PAGE = 256
"""Pending items read from the store at a time."""


async def grade_job(manager: JobManager, job_id: str, row: JobRow) -> None:
    """Grade a claimed grading job to the end (or until it is halted or its lease lost)."""
    store, token = manager.store, manager.token
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
    if not await asyncio.to_thread(store.start_run, job_id, token):
        return
    await grade_items(manager, job_id, config)
    await store_retry(store.complete_if_finished, job_id, token)


async def grade_items(manager: JobManager, job_id: str, config: JudgeConfig) -> None:
    """Grade a job's pending items, at most its ``share`` in flight, storing each result."""
    store = manager.store
    pending: dict[asyncio.Task[GradeResult], int] = {}
    page: list[tuple[int, str, str]] = []
    after = -1
    exhausted = False

    async def fill() -> None:
        nonlocal page, after, exhausted
        while (
            not exhausted and not manager.halted(job_id)
            and len(pending) < manager.share(config.concurrency)
        ):
            if not page:
                page = await asyncio.to_thread(store.pending, job_id, after, _PAGE)
                page.reverse()  # popped from the end, in index order
                if not page:
                    exhausted = True
                    return
            index, item_id, payload = page.pop()
            after = index
            request = GradeRequest.model_validate_json(payload)
            task = asyncio.ensure_future(
                manager.grader.grade(request, config=config, item_id=item_id)
            )
            pending[task] = index

    try:
        await fill()
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            finished = [(pending.pop(task), task) for task in done]
            await fill()  # the freed slots work while the results are stored
            for index, task in finished:
                await store_retry(store.save_result, job_id, index, task.result())
            await fill()
    finally:
        for task in pending:
            task.cancel()
