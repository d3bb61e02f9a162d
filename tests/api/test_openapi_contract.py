"""The OpenAPI document is a contract: valid, self-contained, named, and the reviewed file.

Clients in other languages are generated from ``/openapi.json`` (tests/api/test_openapi_clients.py
runs two generators against a real service); here the document itself is checked: it validates,
every ``$ref`` resolves, every operation has a short stable id and a tag, every request body is a
named schema (job submission in its three content types), JSON Lines answers name their line's
schema, every error answer is ``ErrorBody``, batch items are typed, and what the service serves is
``docs/openapi.json`` byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openapi_spec_validator import validate

from api.app import openapi_document
from api.openapi import render
from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "docs" / "openapi.json"
REGENERATE = "bonusjudge openapi --out docs/openapi.json"
JSONL = "application/x-ndjson"
ERROR_BODY = "#/components/schemas/ErrorBody"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    """The document as the service builds it."""
    return openapi_document()


def operations(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``("METHOD /path", operation)`` for every operation of the document."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield f"{method.upper()} {path}", operation


def dangling_refs(document: dict[str, Any]) -> list[str]:
    """Every ``$ref`` of the document whose JSON pointer leads nowhere in it."""

    def resolves(ref: str) -> bool:
        if not ref.startswith("#/"):
            return False  # the document must be self-contained
        node: Any = document
        for part in ref[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return False
        return True

    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and not resolves(ref):
                found.append(ref)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    return found


def test_the_served_document_is_the_checked_in_one(make_app: Callable[..., FastAPI]) -> None:
    served = TestClient(make_app()).get("/openapi.json")
    assert served.status_code == 200
    checked_in = CONTRACT.read_text(encoding="utf-8")
    assert render(served.json()) == checked_in, (
        f"the service's OpenAPI document differs from docs/openapi.json: run `{REGENERATE}` and "
        "review the diff (the document is the contract generated clients are built from)"
    )


def test_the_command_writes_the_document(tmp_path: Path, document: dict[str, Any]) -> None:
    out = tmp_path / "openapi.json"
    assert main(["openapi", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render(document)


def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1")
    validate(document)  # raises, naming the first violation


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    assert dangling_refs(document) == []


def test_a_dangling_reference_is_found() -> None:
    # The document used to point POST /v1/jobs at a JobBody it did not define (and the validator
    # passed it): the walk above is what catches that.
    document = {
        "paths": {"/v1/jobs": {"post": {"requestBody": {"content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/JobBody"}}}}}}},
        "components": {"schemas": {"Job": {"properties": {"a": {
            "$ref": "#/components/schemas/Job"}}}}},
    }
    assert dangling_refs(document) == ["#/components/schemas/JobBody"]


def test_every_operation_has_a_short_stable_id_and_a_tag(document: dict[str, Any]) -> None:
    ids: dict[str, str] = {}
    for label, operation in operations(document):
        operation_id = operation.get("operationId", "")
        assert re.fullmatch(r"[a-z][a-zA-Z]{2,24}", operation_id), (label, operation_id)
        assert operation_id not in ids, (label, ids.get(operation_id))
        ids[operation_id] = label
        assert operation.get("tags"), label
    # What generated clients name their functions after: renaming one breaks every harness.
    assert {
        "grade": "POST /v1/grade", "gradeBatch": "POST /v1/grade/batch",
        "submitJob": "POST /v1/jobs", "listJobs": "GET /v1/jobs", "getJob": "GET /v1/jobs/{job_id}",
        "getJobResults": "GET /v1/jobs/{job_id}/results",
        "getJobSummary": "GET /v1/jobs/{job_id}/summary",
    }.items() <= ids.items()


def test_every_request_body_is_a_named_schema(document: dict[str, Any]) -> None:
    for label, operation in operations(document):
        for media, content in operation.get("requestBody", {}).get("content", {}).items():
            assert set(content["schema"]) == {"$ref"}, (label, media, content["schema"])
    for path, names in {
        "/v1/jobs": ("JobBody", "JobLines", "JobForm"),
        "/v1/mcq/jobs": ("McqBody", "McqJobLines", "McqJobForm"),
    }.items():
        content = document["paths"][path]["post"]["requestBody"]["content"]
        assert {media: body["schema"]["$ref"].rsplit("/", 1)[1]
                for media, body in content.items()} == dict(
            zip(("application/json", JSONL, "multipart/form-data"), names, strict=True)
        ), path


def test_json_lines_name_the_schema_of_their_lines(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    results = {
        "/v1/jobs/{job_id}/results": "BatchEntry", "/v1/mcq/jobs/{job_id}/results": "McqEntry",
    }
    for path, entry in results.items():
        answer = document["paths"][path]["get"]["responses"]["200"]["content"]
        assert list(answer) == [JSONL], path
        schema = answer[JSONL]["schema"]
        assert schema["contentMediaType"] == JSONL
        assert schema["contentSchema"]["items"] == {"$ref": f"#/components/schemas/{entry}"}
    for lines, body in (("JobLines", "JobBody"), ("McqJobLines", "McqBody")):
        # A line of an upload is what one item of the JSON body is.
        assert schemas[lines]["contentSchema"]["items"] == schemas[body]["properties"]["items"][
            "items"], lines
    assert set(schemas["JobForm"]["properties"]) == {"file", "judge"}
    # No other operation answers JSON Lines without saying what a line is.
    for label, operation in operations(document):
        for answer in operation["responses"].values():
            if JSONL in answer.get("content", {}):
                assert "contentSchema" in answer["content"][JSONL]["schema"], label


def test_every_error_answer_is_the_error_body(document: dict[str, Any]) -> None:
    for label, operation in operations(document):
        for status, answer in operation["responses"].items():
            if int(status) < 400 or label == "GET /readyz":  # readiness answers 503 as Readiness
                continue
            assert answer["content"]["application/json"]["schema"] == {"$ref": ERROR_BODY}, (
                label, status)
            assert answer.get("description"), (label, status)
    responses = {label: set(op["responses"]) for label, op in operations(document)}
    assert {"404"} <= responses["GET /v1/jobs/{job_id}/results"]
    assert {"415", "429"} <= responses["POST /v1/jobs"]
    assert {"404", "409"} <= responses["POST /v1/jobs/{job_id}/retry-unscored"]
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_batch_items_are_typed(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]

    def items(body: str) -> Any:
        return schemas[body]["properties"]["items"]["items"]

    assert items("BatchBody") == {"$ref": "#/components/schemas/GradeRequest"}
    assert items("McqBody") == {"$ref": "#/components/schemas/McqItem"}
    assert {"$ref": "#/components/schemas/GradeRequest"} in items("JobBody")["anyOf"]
    assert schemas["GradeRequest"]["required"] == ["question", "reference", "response"]


def test_a_bad_batch_item_is_still_its_own_error_entry(make_app: Callable[..., FastAPI]) -> None:
    # Typing the items in the document did not make the service validate them as a whole.
    item = {"question": "How does Levin feel?", "reference": "He feels humiliated.",
            "bonus_points": ["Levin feels humiliated"], "response": "Levin is humiliated."}
    with TestClient(make_app()) as client:
        answer = client.post("/v1/grade/batch", json={"items": [item, {"question": "?"}, 3]})
    assert answer.status_code == 422  # a non-object item is a malformed body, as before
    with TestClient(make_app()) as client:
        answer = client.post("/v1/grade/batch", json={"items": [item, {"question": "?"}]})
    assert answer.status_code == 200, answer.text
    first, second = answer.json()["results"]
    assert first["result"]["status"] == "scored" and first["error"] is None
    assert second["result"] is None and second["error"]["type"] == "invalid_input"

