"""A null response through the service: graded as an empty one on every route, never refused.

Harnesses write ``"response": null`` for a refusal or a timeout. ``/v1/grade``,
``/v1/grade/batch``, a JSONL job and the Python client all grade it as covering nothing (flag
``null_response``), without a judge call; any other non-string response is still refused, naming
the field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from bonusjudge_client import JudgeClient
from bonusjudge_client.wire.grading import GradeRequest
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider

ITEM = {
    "question": "How does Levin feel after Kitty refuses him?",
    "reference": "He feels humiliated and hurt, and wants to go back to his estate.",
    "bonus_points": ["Levin feels humiliated and hurt", "He wants to return to his estate"],
    "tom_dimension": "emotion",
    "respondent": "model-b",
}


@pytest.fixture
def provider(fake_judge: Callable[[FakeCall], FakeOutput]) -> FakeProvider:
    return FakeProvider(handler=fake_judge)


@pytest.fixture
def client(make_app: Callable[..., FastAPI], provider: FakeProvider) -> Iterator[TestClient]:
    with TestClient(make_app(provider=provider)) as test_client:
        yield test_client


def assert_null_graded(result: dict[str, Any]) -> None:
    assert result["status"] == "scored" and result["flags"] == ["null_response"]
    assert result["coverage"]["coverage"] == 0.0 and result["coverage"]["total"] == 2
    assert result["defects"]["penalized"] is False


def test_grade_takes_a_null_response(client: TestClient, provider: FakeProvider) -> None:
    response = client.post("/v1/grade", json={**ITEM, "id": "n", "response": None})
    assert response.status_code == 200, response.text
    assert_null_graded(response.json())
    assert provider.calls == []  # no judge call


@pytest.mark.parametrize(("value", "kind"), [(42, "a number"), ({"error": "timeout"}, "an object")])
def test_grade_refuses_other_non_strings_naming_the_field(
    client: TestClient, value: object, kind: str
) -> None:
    response = client.post("/v1/grade", json={**ITEM, "response": value})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "response"
    assert error["message"] == f"response: must be text, or null for no answer (got {kind})"


def test_batch_grades_a_null_response_beside_text(
    client: TestClient, provider: FakeProvider
) -> None:
    items = [{**ITEM, "id": "n", "response": None}, {**ITEM, "id": "t", "response": "Ashamed."}]
    response = client.post("/v1/grade/batch", json={"items": items})
    assert response.status_code == 200, response.text
    entries = {e["id"]: e for e in response.json()["results"]}
    assert entries["n"]["error"] is None
    assert_null_graded(entries["n"]["result"])
    assert entries["t"]["result"]["flags"] == []
    assert len(provider.calls) == 2  # coverage and defects of the text answer only


def test_a_jsonl_job_grades_null_lines_and_counts_them(client: TestClient) -> None:
    lines = [{**ITEM, "id": f"n{n}", "response": None} for n in range(2)]
    lines.append({**ITEM, "id": "t", "response": "He is humiliated."})
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()
    created = client.post("/v1/jobs", content=body,
                          headers={"content-type": "application/x-ndjson"})
    assert created.status_code == 202, created.text
    job = created.json()
    assert job["total"] == 3 and job["invalid"] == 0
    deadline = time.monotonic() + 30
    while (status := client.get(f"/v1/jobs/{job['id']}").json())["status"] != "done":
        assert time.monotonic() < deadline, status
        time.sleep(0.02)
    summary = client.get(f"/v1/jobs/{job['id']}/summary").json()
    assert summary["items"] == 3 and summary["flags"] == {"null_response": 2}
    # 1 of 6 points: the text answer covers one of its two, the nulls none of theirs.
    assert summary["by_respondent"]["model-b"]["bpc"] == pytest.approx(1 / 6, abs=1e-6)


def test_the_client_sends_a_null_response(client: TestClient) -> None:
    """The client leaves null fields out of what it sends, but a null answer is an answer."""
    judge = JudgeClient(http_client=client)
    request = GradeRequest.model_validate({**ITEM, "id": "n", "response": None})
    result = judge.grade(request)
    assert result.flags == ["null_response"] and result.coverage is not None
    assert result.coverage.coverage == 0.0
    (placed,) = judge.grade_many([request])
    assert placed.flags == ["null_response"]
