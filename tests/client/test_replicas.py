"""Several base URLs: grading spread over the replicas in turn, other calls on the first that
answers, and a replica that refuses connections skipped (both clients, one implementation)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import httpx
import pytest

from bonusjudge_client import (
    AsyncJudgeClient,
    ClientConnectionError,
    ClientInputError,
    JudgeClient,
    RetryPolicy,
)
from bonusjudge_client.flows import Replicas
from bonusjudge_client.wire.grading import GradeResult, Provenance

A, B, C = "http://a.test", "http://b.test", "http://c.test"


def _result(item_id: str) -> dict[str, Any]:
    return GradeResult(
        id=item_id, status="scored", language="en",
        provenance=Provenance(judge="fake/judge", config_hash="abc", bonusjudge_version="0"),
    ).model_dump(mode="json")


class Fleet:
    """A MockTransport answering as several replicas; ``down`` hosts refuse connections."""

    def __init__(self, down: set[str] | None = None) -> None:
        self.down = down or set()
        self.hosts: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        self.hosts.append(host)
        if request.url.path == "/v1/grade/batch":
            items = json.loads(request.content)["items"]
            entries = [
                {"index": i, "id": it["id"], "result": _result(it["id"]), "error": None}
                for i, it in enumerate(items)
            ]
            return httpx.Response(200, json={"results": entries})
        if request.url.path == "/healthz":
            return httpx.Response(200, json={"status": "ok"})
        return httpx.Response(404, json={"error": {"type": "not_found", "message": "no"}})


def _items(n: int) -> list[dict[str, Any]]:
    return [{"id": f"q{i}", "question": "Q?", "reference": "R.", "response": "A."}
            for i in range(n)]


def test_batches_go_to_each_replica_in_turn() -> None:
    fleet = Fleet()
    with JudgeClient([A, B], transport=httpx.MockTransport(fleet)) as client:
        results = client.grade_many(_items(40), batch_size=5, concurrency=1, progress=False)
    assert [r.id for r in results] == [f"q{i}" for i in range(40)]
    assert fleet.hosts == ["a.test", "b.test"] * 4  # 8 batches, alternating


def test_urls_from_one_comma_separated_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BONUSJUDGE_URL", f"{A}, {B}/,")
    client = JudgeClient(transport=httpx.MockTransport(Fleet()))
    assert client.replicas.urls == (A, B)
    assert client.base_url == A
    assert repr(client) == f"JudgeClient('{A}, {B}', no key)"


def test_an_unreachable_replica_is_skipped_and_nothing_is_lost() -> None:
    fleet = Fleet(down={"b.test"})
    with JudgeClient([A, B, C], transport=httpx.MockTransport(fleet)) as client:
        results = client.grade_many(_items(30), batch_size=5, concurrency=1, progress=False)
    assert sorted(r.id for r in results) == sorted(f"q{i}" for i in range(30))
    counts = Counter(fleet.hosts)
    assert counts["b.test"] == 0
    assert counts["a.test"] + counts["c.test"] == 6
    assert counts["a.test"] >= 2 and counts["c.test"] >= 2  # still spread over the live ones


def test_other_calls_stay_on_the_first_replica_that_answers() -> None:
    fleet = Fleet(down={"a.test"})
    with JudgeClient([A, B, C], transport=httpx.MockTransport(fleet)) as client:
        for _ in range(4):
            client.health()
    assert fleet.hosts == ["b.test"] * 4


def test_every_replica_down_is_a_connection_error() -> None:
    fleet = Fleet(down={"a.test", "b.test"})
    retry = RetryPolicy(retries=2, backoff_base=0.0)
    client = JudgeClient([A, B], transport=httpx.MockTransport(fleet), retry=retry)
    with pytest.raises(ClientConnectionError) as info:
        client.grade_many(_items(2), batch_size=2, progress=False)
    assert info.value.attempts == 3


def test_a_url_without_host_is_refused() -> None:
    with pytest.raises(ClientInputError) as info:
        JudgeClient([A, "ftp://b.test"])
    assert info.value.field == "base_url"
    with pytest.raises(ClientInputError):
        Replicas(" , ", clock=lambda: 0.0)


def test_a_down_replica_is_tried_again_after_its_pause() -> None:
    now = [0.0]
    replicas = Replicas([A, B], clock=lambda: now[0])
    request = httpx.Request("POST", f"{B}/v1/grade/batch")
    replicas.unreachable(httpx.ConnectError("refused", request=request))
    assert {replicas.pick(spread=True) for _ in range(4)} == {A}
    now[0] += Replicas.DOWN_SECONDS + 0.1
    assert {replicas.pick(spread=True) for _ in range(4)} == {A, B}


def test_the_async_client_spreads_the_same_way() -> None:
    fleet = Fleet()

    async def run() -> list[GradeResult]:
        async with AsyncJudgeClient([A, B], transport=httpx.MockTransport(fleet)) as client:
            return await client.grade_many(_items(20), batch_size=5, concurrency=1, progress=False)

    results = asyncio.run(run())
    assert len(results) == 20
    assert Counter(fleet.hosts) == {"a.test": 2, "b.test": 2}
