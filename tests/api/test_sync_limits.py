"""Limits on one key's synchronous work (issue 31.1 and 31.5, in-process): items in flight on the
grading routes, and request bodies in flight, refused with 429 (per key) or 503 (all keys) and
``Retry-After``, a body before it is read. The real-server attack is in test_rel_tenants.py."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from api.limits import Allowance, SyncBodyLimit
from api.settings import ServiceSettings

KEYS = {"A": "sync-limits-key-a", "B": "sync-limits-key-b"}
DIGEST = {name: hashlib.sha256(key.encode()).hexdigest() for name, key in KEYS.items()}


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


def item(n: int) -> dict[str, Any]:
    return {"id": f"i{n}", "question": "Q?", "reference": "The reference answer.",
            "bonus_points": ["a point"], "response": f"answer {n}"}


@pytest.fixture
def service(make_app: Callable[..., FastAPI]) -> Iterator[TestClient]:
    app = make_app(
        api_keys=list(KEYS.values()), max_batch=8, max_sync_items_per_key=10,
        max_body_bytes=5_000, max_sync_bytes_per_key=6_000, max_sync_bytes=9_000,
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def state(client: TestClient) -> Any:
    app = client.app
    assert isinstance(app, FastAPI)
    return app.state


def assert_refused(answer: Any, status: int, type_: str, setting: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["retry-after"] == "2"
    error = answer.json()["error"]
    assert error["type"] == type_
    assert setting in error["message"] and f"BONUSJUDGE_{setting.upper()}" in error["message"]


def test_a_key_over_its_items_in_flight_gets_429_and_another_key_does_not(
    service: TestClient,
) -> None:
    items = state(service).sync_items
    items.take(DIGEST["A"], 5)  # five of A's items are being graded
    batch = service.post("/v1/grade/batch", json={"items": [item(n) for n in range(6)]},
                         headers=auth("A"))
    assert_refused(batch, 429, "quota_exceeded", "max_sync_items_per_key")
    assert "has 5 in flight and the request adds 6" in batch.json()["error"]["message"]
    assert service.post("/v1/grade/batch", json={"items": [item(n) for n in range(5)]},
                        headers=auth("A")).status_code == 200  # 5 + 5 fits
    assert service.post("/v1/grade/batch", json={"items": [item(n) for n in range(8)]},
                        headers=auth("B")).status_code == 200
    items.take(DIGEST["A"], 5)
    assert_refused(service.post("/v1/grade", json=item(1), headers=auth("A")),
                   429, "quota_exceeded", "max_sync_items_per_key")
    items.give_back(DIGEST["A"], 10)
    assert service.post("/v1/grade", json=item(1), headers=auth("A")).status_code == 200
    assert items.held() == 0  # what the answered requests held is given back


def test_bodies_in_flight_are_refused_per_key_then_service_wide(service: TestClient) -> None:
    body = json.dumps({"items": [item(n) for n in range(3)]}).encode()
    held = state(service).sync_bytes
    held.take(DIGEST["A"], 6_000 - len(body) + 1)  # A's other requests: one byte too many
    answer = service.post("/v1/grade/batch", content=body, headers={
        **auth("A"), "content-type": "application/json"})
    assert_refused(answer, 429, "quota_exceeded", "max_sync_bytes_per_key")
    held.take(DIGEST["B"], 3_000)  # 9,000 in all now, less one body
    answer = service.post("/v1/metrics", content=body, headers={
        **auth("B"), "content-type": "application/json"})
    assert_refused(answer, 503, "unavailable", "max_sync_bytes")
    held.give_back(DIGEST["A"], 6_000 - len(body) + 1)
    held.give_back(DIGEST["B"], 3_000)
    assert service.post("/v1/grade/batch", content=body, headers={
        **auth("A"), "content-type": "application/json"}).status_code == 200
    assert held.held() == 0


def test_a_chunked_body_is_counted_as_it_streams(service: TestClient) -> None:
    body = json.dumps({"items": [item(n) for n in range(3)]}).encode()
    held = state(service).sync_bytes
    held.take(DIGEST["A"], 6_000 - len(body) + 1)

    def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked
        yield body[:100]
        yield body[100:]

    answer = service.post("/v1/grade/batch", content=chunks(), headers={
        **auth("A"), "content-type": "application/json"})
    assert "content-length" not in answer.request.headers
    assert_refused(answer, 429, "quota_exceeded", "max_sync_bytes_per_key")
    held.give_back(DIGEST["A"], 6_000 - len(body) + 1)
    answer = service.post("/v1/grade/batch", content=chunks(), headers={
        **auth("A"), "content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert held.held() == 0


async def test_a_refused_body_is_never_read_and_the_app_never_runs() -> None:
    settings = ServiceSettings(api_keys=[KEYS["A"]], max_sync_bytes_per_key=20_000_000,
                        max_sync_bytes=20_000_000)
    allowance = Allowance.body_bytes(settings)
    ran: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        ran.append("app")

    async def receive() -> dict[str, Any]:
        ran.append("receive")
        return {"type": "http.request", "body": b"", "more_body": False}

    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    limit = SyncBodyLimit(app, settings, allowance)
    scope = {"type": "http", "method": "POST", "path": "/v1/grade/batch", "root_path": "",
             "headers": [(b"authorization", f"Bearer {KEYS['A']}".encode()),
                         (b"content-length", b"18900000")], "query_string": b""}
    allowance.take(DIGEST["A"], 1_200_000)
    await limit(scope, receive, send)
    assert ran == [] and sent[0]["status"] == 429
    assert (b"retry-after", b"2") in sent[0]["headers"]
    assert allowance.held() == 1_200_000  # the refused request held nothing
    allowance.give_back(DIGEST["A"], 1_200_000)
    await limit(scope, receive, send)
    assert ran == ["app"] and allowance.held() == 0  # held while the app ran, then given back


def test_a_limit_below_the_largest_request_stops_start_up() -> None:
    with pytest.raises(ValidationError, match=r"max_sync_items_per_key .* max_batch"):
        ServiceSettings(max_batch=300, max_sync_items_per_key=299)
    with pytest.raises(ValidationError, match=r"max_sync_bytes_per_key .* max_body_bytes"):
        ServiceSettings(max_body_bytes=50_000_000)
    with pytest.raises(ValidationError, match=r"max_sync_bytes .* max_sync_bytes_per_key"):
        ServiceSettings(max_sync_bytes_per_key=90_000_000)
