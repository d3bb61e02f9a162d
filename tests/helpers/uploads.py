"""Job uploads against a running ``bonusjudge serve``: what one key's uploads cost another key.

The attack of issue 41.3, for the tests (``tests/api/test_rel_uploads.py``) and the benchmark
(``bench/uploads.py``): key A posts several large job uploads at once (a JSON body of many
items, or JSONL of lines that are all bad) while key B keeps using the service; what B waits,
the service's memory, and what the job store holds afterwards (against what A's stored-bytes
quota counted) say whether an upload is read in bounded memory, off the event loop, and counted
as written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.helpers.tenants import grade_item

__all__ = [
    "StoreUse",
    "UploadRun",
    "bad_lines",
    "grade_every",
    "job_body",
    "median",
    "p95",
    "poll",
    "store_use",
    "upload_at_once",
]


def job_body(tag: str, total_bytes: int, item_bytes: int = 1_000) -> bytes:
    """A JSON ``POST /v1/jobs`` body about ``total_bytes`` long, of items of ``item_bytes``."""
    pad = max(0, item_bytes - len(json.dumps(grade_item(tag, 0))))
    count = max(1, total_bytes // (len(json.dumps(grade_item(tag, 0, pad))) + 2))
    return json.dumps({"items": [grade_item(tag, n, pad) for n in range(count)]}).encode()


def bad_lines(count: int = 100_000) -> bytes:
    """JSONL of ``count`` lines that are not JSON, 8 bytes each (0.8 MB for 100,000)."""
    return b"{bad:1}\n" * count


@dataclass
class UploadRun:
    """What a key's uploads got.

    Attributes:
        first: The status each upload's first attempt was answered (0: no answer).
        final: The status each upload ended with, after retries.
        retry_after: The ``Retry-After`` of each refusal that had one.
        attempts: Requests sent in all.
        wall_s: Seconds from the first request to the last answer.
        job_ids: The ids of the jobs stored.
    """

    first: list[int] = field(default_factory=list)
    final: list[int] = field(default_factory=list)
    retry_after: list[str] = field(default_factory=list)
    attempts: int = 0
    wall_s: float = 0.0
    job_ids: list[str] = field(default_factory=list)


async def upload_at_once(
    url: str, key: str, bodies: list[bytes], *, content_type: str = "application/json",
    path: str = "/v1/jobs", retry_for: float = 0.0, timeout: float = 600.0,
) -> UploadRun:
    """Post every body at once; a refused one (429, 503) is sent again after its ``Retry-After``.

    Args:
        url: The service's root URL.
        key: The API key the uploads are sent with.
        bodies: One request body per upload.
        content_type: Their content type.
        path: The route (``/v1/jobs`` or ``/v1/mcq/jobs``).
        retry_for: Seconds during which a refused upload is sent again (0: never).
        timeout: Seconds any request may take.
    """
    run = UploadRun()
    headers = {"Authorization": f"Bearer {key}", "content-type": content_type}
    limits = httpx.Limits(max_connections=len(bodies) + 2)
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:

        async def one(body: bytes) -> None:
            first = True
            while True:
                run.attempts += 1
                try:
                    answer = await client.post(path, content=body, headers=headers)
                    status = answer.status_code
                except httpx.HTTPError:
                    answer, status = None, 0
                if first:
                    run.first.append(status)
                    first = False
                wait = answer.headers.get("retry-after") if answer is not None else None
                if wait is not None:
                    run.retry_after.append(wait)
                if status == 202 and answer is not None:
                    run.job_ids.append(answer.json()["id"])
                elapsed = time.perf_counter() - started
                if status not in (429, 503, 0) or elapsed > retry_for:
                    run.final.append(status)
                    return
                await asyncio.sleep(float(wait or 1))

        await asyncio.gather(*(one(body) for body in bodies))
    run.wall_s = time.perf_counter() - started
    return run


async def poll(
    client: httpx.AsyncClient, key: str, path: str, *, every: float, until: asyncio.Event,
    least: int = 5,
) -> list[float]:
    """``GET path`` every ``every`` seconds until ``until`` is set (at least ``least`` times).

    Returns:
        The seconds each request took (a failed one counts the time it took to fail).
    """
    headers = {"Authorization": f"Bearer {key}"}
    latencies: list[float] = []
    while len(latencies) < least or not until.is_set():
        started = time.perf_counter()
        with contextlib.suppress(httpx.HTTPError):  # a failure counts the time it took
            await client.get(path, headers=headers)
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(max(0.0, every - latencies[-1]))
    return latencies


async def grade_every(
    client: httpx.AsyncClient, key: str, *, every: float, until: asyncio.Event, tag: str,
    least: int = 10,
) -> list[float]:
    """B's ``/v1/grade`` sent every ``every`` seconds, whether or not the last was answered.

    An open loop, as users arrive: while the service stalls, every request sent meanwhile waits,
    and the percentiles show it (one request after another would count a stall once). Sends
    until ``until`` is set (at least ``least``), then waits for every answer.

    Returns:
        The seconds each request took (a failed one counts the time it took to fail).
    """
    headers = {"Authorization": f"Bearer {key}"}
    latencies: list[float] = []

    async def one(n: int) -> None:
        started = time.perf_counter()
        with contextlib.suppress(httpx.HTTPError):
            await client.post("/v1/grade", json=grade_item(tag, n), headers=headers)
        latencies.append(time.perf_counter() - started)

    tasks: list[asyncio.Task[None]] = []
    begun = time.perf_counter()
    while len(tasks) < least or not until.is_set():
        tasks.append(asyncio.create_task(one(len(tasks))))
        await asyncio.sleep(max(0.0, begun + len(tasks) * every - time.perf_counter()))
    await asyncio.gather(*tasks)
    return latencies


def p95(values: list[float]) -> float:
    """The 95th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def median(values: list[float]) -> float:
    """The median of ``values``."""
    return statistics.median(values)


@dataclass(frozen=True)
class StoreUse:
    """What a SQLite job store holds now.

    Attributes:
        used: Bytes of its pages in use (page count less the free list), write-ahead log
            included: what a new job really takes once it is written.
        counted: The ``bytes`` of every job: what the stored-bytes quotas count.
        files: Bytes of the database file and its write-ahead log on disk.
    """

    used: int
    counted: int
    files: int


def store_use(database: Path) -> StoreUse:
    """Read a live SQLite job store, beside the service using it (reads only).

    Not opened read-only: a reader of a WAL database needs its shared-memory file, which a
    read-only connection cannot create when the service has none open at that moment.
    """
    conn = sqlite3.connect(database, timeout=30)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        counted = conn.execute("SELECT coalesce(sum(bytes), 0) FROM jobs").fetchone()[0]
    finally:
        conn.close()
    files = sum(p.stat().st_size for p in database.parent.glob(database.name + "*"))
    return StoreUse(used=(pages - free) * size, counted=int(counted), files=files)
