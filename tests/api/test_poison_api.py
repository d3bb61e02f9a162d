"""Poison items over HTTP: deep, huge or non-finite metadata is a 422 (or that entry's or that
line's error) before any judge call; an unparseable body is a 400; nothing is a 500."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from judge.providers.fake import FakeCall, FakeOutput, FakeProvider
from tests.helpers.engine import levin_item

DEEP = "[" * 5000 + "]" * 5000
"""JSON nested far past the parser's recursion limit."""


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def item(n: int, **extra: Any) -> dict[str, Any]:
    return levin_item(n, **extra)


def mcq_item(n: int) -> dict[str, Any]:
    return {"id": f"q{n}", "choices": ["In the drawer", "In the fridge"], "answer": "A",
            "response": "[[A]]"}


@pytest.fixture
def provider(fake_judge: Callable[[FakeCall], FakeOutput]) -> FakeProvider:
    return FakeProvider(handler=fake_judge)


@pytest.fixture
def http(make_app: Callable[..., FastAPI], provider: FakeProvider) -> Iterator[TestClient]:
    with TestClient(make_app(provider=provider), raise_server_exceptions=False) as client:
        yield client


def post_json(client: TestClient, path: str, text: str) -> Any:
    return client.post(path, content=text.encode(), headers={"content-type": "application/json"})


def results(client: TestClient, path: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while client.get(path).json()["status"] not in ("done", "failed", "cancelled"):
        assert time.monotonic() < deadline, "job never finished"
        time.sleep(0.02)
    response = client.get(f"{path}/results")
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def test_grade_rejects_deep_metadata_before_any_judge_call(
    http: TestClient, provider: FakeProvider
) -> None:
    response = http.post("/v1/grade", json=item(1, metadata=nested(256)))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "metadata" and "levels deep" in error["message"]
    assert provider.calls == []


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_grade_rejects_non_finite_metadata(
    http: TestClient, provider: FakeProvider, number: str
) -> None:
    body = json.dumps(item(1, metadata={"human_score": 0})).replace(
        '"human_score": 0', f'"human_score": {number}'
    )
    response = post_json(http, "/v1/grade", body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "metadata"
    assert provider.calls == []


def test_grade_rejects_oversized_metadata(http: TestClient) -> None:
    response = http.post("/v1/grade", json=item(1, metadata={"blob": "x" * 100_000}))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "metadata"


@pytest.mark.parametrize(
    "path", ["/v1/grade", "/v1/grade/batch", "/v1/jobs", "/v1/mcq", "/v1/mcq/jobs"]
)
def test_unparseably_deep_body_is_a_client_error(http: TestClient, path: str) -> None:
    response = post_json(http, path, '{"items": [' + DEEP + "]}")
    assert response.status_code in (400, 422), response.text
    assert response.json()["error"]["type"] != "internal_error"


def test_batch_with_one_poisoned_item_grades_the_others(
    http: TestClient, provider: FakeProvider
) -> None:
    items = [item(1), item(2, metadata=nested(256)), item(3, metadata={"x": math.nan})]
    # NaN is not JSON: send it as Python's json.dumps writes it.
    response = post_json(http, "/v1/grade/batch", json.dumps({"items": items}))
    assert response.status_code == 200, response.text
    entries = response.json()["results"]
    assert entries[0]["error"] is None and entries[0]["result"]["status"] == "scored"
    for entry in entries[1:]:
        assert entry["result"] is None and entry["error"]["field"] == "metadata"
    assert len(provider.calls) == 2  # coverage and defects of item 1 only


def test_ndjson_job_with_poisoned_lines_grades_the_rest(http: TestClient) -> None:
    lines = [
        json.dumps(item(1)),
        DEEP,
        json.dumps(item(3, metadata=nested(256))),
        json.dumps(item(4, metadata={"x": math.inf})),
        json.dumps(item(5)),
    ]
    response = http.post(
        "/v1/jobs", content=("\n".join(lines) + "\n").encode(),
        headers={"content-type": "application/x-ndjson"},
    )
    assert response.status_code == 202, response.text
    job = response.json()
    assert (job["total"], job["invalid"]) == (2, 3)
    entries = results(http, f"/v1/jobs/{job['id']}")
    errors = {e["error"]["line"]: e["error"] for e in entries if e["error"] is not None}
    assert set(errors) == {2, 3, 4}
    assert "nested too deeply" in errors[2]["message"]
    assert errors[3]["field"] == "metadata" and errors[4]["field"] == "metadata"
    assert sorted(e["id"] for e in entries if e["result"] is not None) == ["it-1", "it-5"]


def test_json_job_with_non_finite_metadata_marks_that_item(http: TestClient) -> None:
    body = json.dumps({"items": [item(1), item(2, metadata={"x": math.nan})]})
    response = post_json(http, "/v1/jobs", body)
    assert response.status_code == 202, response.text
    assert response.json()["invalid"] == 1
    entries = results(http, f"/v1/jobs/{response.json()['id']}")
    bad = [e for e in entries if e["error"] is not None]
    assert [(e["id"], e["error"]["field"]) for e in bad] == [("it-2", "metadata")]


def test_mcq_ndjson_job_with_a_deep_line_scores_the_rest(http: TestClient) -> None:
    lines = [json.dumps(mcq_item(1)), DEEP, json.dumps(mcq_item(3))]
    response = http.post(
        "/v1/mcq/jobs", content=("\n".join(lines) + "\n").encode(),
        headers={"content-type": "application/x-ndjson"},
    )
    assert response.status_code == 202, response.text
    assert (response.json()["total"], response.json()["invalid"]) == (2, 1)
    entries = results(http, f"/v1/mcq/jobs/{response.json()['id']}")
    bad = [e for e in entries if e["error"] is not None]
    assert [e["error"]["line"] for e in bad] == [2]
    assert "nested too deeply" in bad[0]["error"]["message"]
