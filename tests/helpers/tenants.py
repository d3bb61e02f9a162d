"""Two API keys against a running ``bonusjudge serve``: one floods it, the other keeps grading.

The attack of issue 31.1 and 31.5, for the tests (``tests/api/test_rel_tenants.py``) and the
benchmark (``bench/tenants.py``): key A posts concurrent ``/v1/grade/batch`` requests while key
B posts one ``/v1/grade`` at a time; what B waits, and what A is answered, say whether one key
can hold back another. Every item is new (distinct text), so nothing is answered from the cache.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["FloodRun", "big_batch_body", "flood", "grade_item", "probe"]


def grade_item(tag: str, n: int, response_chars: int = 0) -> dict[str, Any]:
    """A gradable item, distinct per ``tag`` and ``n``; ``response_chars`` pads its response."""
    response = f"Levin is ashamed ({tag} {n})."
    if response_chars > len(response):
        response += " " + ("He longs for the countryside. " * (response_chars // 31 + 1))
        response = response[:response_chars]
    return {
        "id": f"{tag}-{n}", "question": f"How does Levin feel ({tag} {n})?",
        "reference": "He feels humiliated and wants to go back to his estate.",
        "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
        "response": response,
    }


def big_batch_body(tag: str, items: int, total_bytes: int) -> bytes:
    """A ``/v1/grade/batch`` body of ``items`` items, about ``total_bytes`` long."""
    pad = max(0, total_bytes // items - 400)
    body = {"items": [grade_item(tag, n, pad) for n in range(items)]}
    return json.dumps(body).encode()


@dataclass
class FloodRun:
    """What a flood did.

    Attributes:
        probe_latencies: Seconds each of B's answered ``/v1/grade`` took.
        probe_statuses: The status of each of B's requests (0: no answer).
        flood_statuses: The status of each of A's batches (0: the connection failed, e.g.
            closed by the service after refusing a body it did not read).
        retry_after: The ``Retry-After`` of each of A's refusals that had one.
        wall_s: Seconds from the first of A's batches to the last answer.
    """

    probe_latencies: list[float] = field(default_factory=list)
    probe_statuses: list[int] = field(default_factory=list)
    flood_statuses: list[int] = field(default_factory=list)
    retry_after: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def probe_median(self) -> float:
        """B's median latency (seconds)."""
        return statistics.median(self.probe_latencies)

    def probe_quantile(self, q: float) -> float:
        """B's latency at quantile ``q`` (0.95: p95), interpolated between answered requests."""
        if len(self.probe_latencies) < 2:
            return self.probe_latencies[0]
        cuts = statistics.quantiles(self.probe_latencies, n=100, method="inclusive")
        return cuts[round(q * 100) - 1]


async def probe(
    client: httpx.AsyncClient, key: str, count: int, *, tag: str, every: float = 0.0,
    run: FloodRun | None = None, until: asyncio.Event | None = None,
) -> FloodRun:
    """B's side: ``count`` ``/v1/grade`` requests one after another, ``every`` seconds apart.

    Stops early once ``until`` is set (A's batches are all answered), but always sends the first:
    A's refused batches can all be answered before B starts, and a run must still say how B fared.
    """
    run = run if run is not None else FloodRun()
    headers = {"Authorization": f"Bearer {key}"}
    for n in range(count):
        if n and until is not None and until.is_set():
            break
        started = time.perf_counter()
        try:
            answer = await client.post("/v1/grade", json=grade_item(tag, n), headers=headers)
            status = answer.status_code
        except httpx.HTTPError:
            status = 0
        run.probe_statuses.append(status)
        if status == 200:
            run.probe_latencies.append(time.perf_counter() - started)
        await asyncio.sleep(max(0.0, every - (time.perf_counter() - started)))
    return run


async def flood(
    url: str, flood_key: str, probe_key: str, *, batches: int, batch_items: int = 256,
    body: bytes | None = None, probes: int = 40, probe_every: float = 0.25, tag: str = "run",
    timeout: float = 600.0, persist: bool = False,
) -> FloodRun:
    """A's ``batches`` concurrent batches, with B probing until they are all answered.

    Args:
        url: The service's root URL.
        flood_key: A's API key.
        probe_key: B's API key.
        batches: A's batches in flight at once.
        batch_items: Items per batch (when ``body`` is None).
        body: One body every batch sends (e.g. :func:`big_batch_body`); default: new items.
        probes: At most this many of B's requests (0: B sends none).
        probe_every: Seconds between the starts of B's requests.
        tag: Makes this run's items distinct from another run's.
        timeout: Seconds any request may take.
        persist: A resends a refused batch (429 or 503) after its ``Retry-After`` until it is
            taken, as a well-behaved harness does: the pressure lasts until all ``batches`` are
            graded, instead of ending with the refusals. ``flood_statuses`` then holds every
            answer, refusals included.
    """
    run = FloodRun()
    done = asyncio.Event()
    headers = {"Authorization": f"Bearer {flood_key}", "content-type": "application/json"}
    limits = httpx.Limits(max_connections=batches + 4, max_keepalive_connections=batches + 4)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:

        async def batch(index: int) -> None:
            content = body if body is not None else json.dumps({"items": [
                grade_item(f"{tag}-a{index}", n) for n in range(batch_items)]}).encode()
            while True:
                try:
                    answer = await client.post("/v1/grade/batch", content=content,
                                               headers=headers)
                except httpx.HTTPError:
                    run.flood_statuses.append(0)
                    return
                run.flood_statuses.append(answer.status_code)
                wait = answer.headers.get("retry-after")
                if wait is not None:
                    run.retry_after.append(wait)
                if not persist or answer.status_code not in (429, 503):
                    return
                await asyncio.sleep(float(wait) if wait is not None else 1.0)

        async def all_batches() -> None:
            await asyncio.gather(*(batch(index) for index in range(batches)))
            done.set()

        started = time.perf_counter()
        flooding = asyncio.create_task(all_batches())
        if probes:
            await asyncio.sleep(0.5)  # A's batches are in before B's first request
            await probe(client, probe_key, probes, tag=f"{tag}-b", every=probe_every, run=run,
                        until=done)
        await flooding
        run.wall_s = time.perf_counter() - started
    return run
