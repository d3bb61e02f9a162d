"""Job uploads read in bounded memory (issue 41.3, in-process): a JSON body split into its items
element by element and read as before, and uploads held to the in-flight byte limits of the
synchronous routes. How items are stored is test_stored_items.py's; the real-server attack is
tests/api/test_rel_uploads.py."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.jobs.spool import split_json_body
from core.errors import InputError

Finished = Callable[[TestClient, str], list[dict[str, Any]]]
"""The ``finished`` fixture (tests/api/jobs/conftest.py)."""

KEYS = {"A": "upload-key-a", "B": "upload-key-b"}
DIGEST = {name: hashlib.sha256(key.encode()).hexdigest() for name, key in KEYS.items()}
NDJSON = {"content-type": "application/x-ndjson"}


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


def item(n: int, **extra: Any) -> dict[str, Any]:
    return {"id": f"it-{n}", "question": f"How does Levin feel? ({n})",
            "reference": "He feels humiliated and hurt.",
            "bonus_points": ["Levin feels humiliated"], "response": f"Levin is ashamed ({n}).",
            **extra}


def split(body: bytes) -> tuple[dict[str, Any], list[Any], int | None]:
    lines = io.BytesIO()
    members, count = split_json_body(io.BytesIO(body), lines)
    return members, [json.loads(line) for line in lines.getvalue().splitlines()], count


def test_a_json_body_is_split_into_its_items_exactly_as_sent() -> None:
    # Over 3 MB: elements, strings and numbers fall across the 1 MB windows the body is read in.
    items: list[Any] = [
        {"id": f"x{n}", "text": "é\u2028ü" * (n % 7) + "a" * (n * 37 % 5000), "n": n * 1.5}
        for n in range(2_000)
    ]
    items += [12345678901234567890, "a\nb", [1, [2, {"x": None}]], True, {"big": "z" * 1_500_000}]
    body = json.dumps({"judge": {"model": "m"}, "items": items, "max_cost": 2}, indent=1)
    members, lines, count = split(body.encode())
    assert members == {"judge": {"model": "m"}, "max_cost": 2}
    assert count == len(items) and lines == items


@pytest.mark.parametrize(
    ("body", "field", "start"),
    [
        (b'{"items": [', "body", "body: invalid JSON"),
        (b'{"items": [1, 2] "judge": {}}', "body", "body: invalid JSON"),
        (b'{"items": [1]} trailing', "body", "body: invalid JSON: Extra data"),
        (b'[{"id": 1}]', "body", "body: expected a JSON object"),
        (b'{"items": ["caf\xe9"]}', "body", "body: invalid JSON: not valid UTF-8"),
        (b'{"items": [1], "items": [2]}', "items", "items: given twice"),
        (b'{"items": [' + b"[" * 5_000 + b"]" * 5_000 + b"]}", "body", "body: invalid JSON"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_refused_naming_it(
    body: bytes, field: str, start: str
) -> None:
    with pytest.raises(InputError) as refused:
        split(body)
    assert refused.value.field == field and str(refused.value).startswith(start)


@pytest.fixture
def service(make_app: Callable[..., FastAPI]) -> Iterator[TestClient]:
    app = make_app(api_keys=list(KEYS.values()), max_body_bytes=5_000,
                   max_sync_bytes_per_key=6_000, max_sync_bytes=9_000)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_a_json_body_is_read_as_before(
    client: TestClient, finished: Finished
) -> None:
    body = {"items": [item(1), {"question": ""}, item(1), 7], "judge": {"metrics": ["rouge_l"]}}
    created = client.post("/v1/jobs", json=body)
    assert created.status_code == 202, created.text
    assert (created.json()["total"], created.json()["invalid"]) == (1, 3)
    path = f"/v1/jobs/{created.json()['id']}"
    entries = {entry["index"]: entry for entry in finished(client, path)}
    assert entries[0]["id"] == "it-1" and entries[0]["result"]["rouge_l"] is not None
    assert entries[0]["result"]["coverage"] is None  # the body's judge: rouge_l only
    assert entries[1]["id"] == "2" and entries[1]["error"]["field"] == "question"
    assert entries[1]["error"]["line"] is None  # a JSON body's items have positions, no lines
    assert entries[2]["error"]["message"] == "id: duplicate id 'it-1'"
    assert entries[3]["id"] == "4"
    for refused, field in [
        ({"items": []}, "items"), ({"judge": {}}, "items"), ({"items": 5}, "items"),
        ({"items": [item(1)], "other": 1}, "other"),
        ({"items": [item(1)], "max_cost": -1}, "max_cost"),
        ({"items": [item(1)], "judge": {"metrics": ["accuracy"]}}, "judge.metrics.0"),
    ]:
        answer = client.post("/v1/jobs", json=refused)
        assert answer.status_code == 422, (refused, answer.text)
        assert answer.json()["error"]["field"] == field, (refused, answer.text)


def test_job_uploads_share_the_in_flight_byte_limits(service: TestClient) -> None:
    body = b"\n".join(json.dumps(item(n)).encode() for n in range(3))
    held = service.app.state.sync_bytes  # type: ignore[attr-defined]
    held.take(DIGEST["A"], 6_000 - len(body) + 1)  # A's other requests: one byte too many
    for path in ("/v1/jobs", "/v1/mcq/jobs"):
        answer = service.post(path, content=body, headers={**auth("A"), **NDJSON})
        assert answer.status_code == 429, answer.text
        assert answer.headers["retry-after"] == "2"
        message = answer.json()["error"]["message"]
        assert "max_sync_bytes_per_key" in message and "submit a job" not in message
    held.take(DIGEST["B"], 3_000)  # 9,000 in all now, less one body
    answer = service.post("/v1/jobs", content=body, headers={**auth("B"), **NDJSON})
    assert answer.status_code == 503 and answer.headers["retry-after"] == "2"
    assert "max_sync_bytes" in answer.json()["error"]["message"]
    held.give_back(DIGEST["A"], 6_000 - len(body) + 1)
    held.give_back(DIGEST["B"], 3_000)
    answer = service.post("/v1/jobs", content=body, headers={**auth("A"), **NDJSON})
    assert answer.status_code == 202, answer.text
    assert held.held() == 0  # held while it was read and stored, then given back
