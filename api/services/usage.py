"""A caller's own usage (``GET /v1/usage``): read from the engine's counters and the job store."""

from __future__ import annotations

import asyncio
from typing import get_args

from api.jobs import JobStore
from bonusjudge_client.wire.schemas import JobState
from bonusjudge_client.wire.usage import UsageReport
from judge.engine import Grader

JOB_STATUSES: tuple[str, ...] = get_args(JobState)
"""The job statuses the report lists (0 included), ``paused`` among them."""


async def usage_of(owner: str, *, grader: Grader, store: JobStore) -> UsageReport:
    """What ``owner`` (the key digest the request authenticated as) has used, and no one else.

    The engine keeps each caller's counters apart (``EngineStats.by_caller``, keyed by the
    tenant its calls were made for, which is the owner), so no other key's figure is read.
    """
    usage = grader.stats.usage_of(owner)
    counts = await asyncio.to_thread(store.status_counts, owner)
    return UsageReport(
        **usage.as_dict(), jobs={status: counts.get(status, 0) for status in JOB_STATUSES}
    )
