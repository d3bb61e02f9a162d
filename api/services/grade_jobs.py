"""The runner of grading jobs (kind ``grade``): grade a chunk's pending items, store each result.

A grading job is leased in chunks (``api.jobs.claims``): each runner grades the pending items of
its chunk (``current_chunk()``), so every replica with room works on the same job at once, and
whichever stores the job's last result marks it done. A job is graded with the judge
configuration it was submitted with (rebuilt from its stored overrides); if the service's
settings changed that configuration since, the job fails rather than mix two judges in one set
of aggregates. At most the chunk's share of the grader's concurrency is in flight, and each
result is stored as soon as it is ready, so a restart loses at most the items in flight.
"""

from __future__ import annotations

import asyncio

from api.jobs.claims import Chunk
from api.jobs.manager import JobManager
from api.jobs.schema import JobRow
from api.jobs.worker import current_chunk, store_retry
from bonusjudge_client.wire.grading import GradeRequest, GradeResult
from judge.config import JudgeConfig, JudgeOverrides

_PAGE = 256
"""Pending items read from the store at a time."""


async def grade_job(manager: JobManager, job_id: str, row: JobRow) -> None:
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
    if not await asyncio.to_thread(store.start_run, job_id, token):
        return
    await grade_items(manager, chunk, config)
    # The job first: finishing the chunk gives up its lease, and only a holder completes it.
    if not await store_retry(store.complete_if_finished, job_id, token):
        await store_retry(store.finish_chunk, job_id, chunk.lo, token)


async def grade_items(manager: JobManager, chunk: Chunk, config: JudgeConfig) -> None:
    """Grade a chunk's pending items, at most its ``share`` in flight, storing each result."""
    store, job_id = manager.store, chunk.job_id
    pending: dict[asyncio.Task[GradeResult], int] = {}
    page: list[tuple[int, str, str]] = []
    after = chunk.lo - 1
    exhausted = False

    async def fill() -> None:
        nonlocal page, after, exhausted
        while (
            not exhausted and not manager.halted(job_id)
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
