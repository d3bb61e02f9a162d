"""The two-tenant load helpers (``tests.helpers.tenants``) of the tenant tests and bench.tenants."""

from __future__ import annotations

import asyncio

import httpx

from tests.helpers.tenants import probe


def answering(statuses: list[int]) -> httpx.AsyncClient:
    """A client whose every ``/v1/grade`` is answered 200, each status noted in ``statuses``."""

    def handle(request: httpx.Request) -> httpx.Response:
        statuses.append(200)
        return httpx.Response(200, json={})

    return httpx.AsyncClient(base_url="http://service", transport=httpx.MockTransport(handle))


async def test_probe_sends_its_first_request_even_when_the_flood_has_ended() -> None:
    # A's refused batches can all be answered before B starts probing (it waits 0.5 s): the run
    # must still say how B fared, not leave B's statuses empty (CI failed so, 2026-11-27).
    sent: list[int] = []
    ended = asyncio.Event()
    ended.set()
    async with answering(sent) as client:
        run = await probe(client, "key-b", 6, tag="t", until=ended)
    assert sent == [200] and run.probe_statuses == [200] and len(run.probe_latencies) == 1


async def test_probe_stops_after_the_request_under_way_when_the_flood_ends() -> None:
    sent: list[int] = []
    ended = asyncio.Event()
    async with answering(sent) as client:

        async def end_soon() -> None:
            await asyncio.sleep(0.05)
            ended.set()

        stopper = asyncio.create_task(end_soon())
        run = await probe(client, "key-b", 100, tag="t", every=0.02, until=ended)
        await stopper
    assert 2 <= len(run.probe_statuses) < 100 and set(run.probe_statuses) == {200}
