"""Fuzzing the HTTP API from its own OpenAPI spec (schemathesis, in-process ASGI), and the limits
on body size, list lengths, string lengths and job sizes, each with a clear 4xx.

The fuzz run generates schema-valid and schema-violating requests for every operation and
requires zero 5xx, the uniform error body on every 4xx, and 2xx bodies that match the declared
response schemas. Examples are bounded so the run stays well under a minute.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import response_schema_conformance
from schemathesis.core.control import SkipTest
from schemathesis.python import asgi as schemathesis_asgi

from tests.helpers.engine import levin_item

KEY = "fuzz-key-1"
EXAMPLES = settings().max_examples // 5
"""Examples per operation and generation mode (about 40 operation-modes in all): a fifth of the
Hypothesis profile's count, 20 in ``scripts/test.sh`` and 2 in ``scripts/test-fast.sh``."""


@pytest.fixture
def fuzz_app(make_app: Callable[..., FastAPI]) -> Callable[..., FastAPI]:
    """The service with one API key and small limits (``overrides`` change them)."""

    def build(**overrides: Any) -> FastAPI:
        options: dict[str, Any] = {
            "api_keys": [KEY],
            "max_batch": 8,
            "max_job_items": 50,
            "max_bonus_points": 8,
            "max_body_bytes": 200_000,
            "lease_seconds": 30.0,
        }
        return make_app(**{**options, **overrides})

    return build


def test_fuzz_every_operation_from_the_openapi_spec(fuzz_app: Callable[..., FastAPI]) -> None:
    app = fuzz_app()
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    statuses: Counter[str] = Counter()
    server_errors: list[str] = []
    contract: list[str] = []
    calls: Counter[tuple[str, GenerationMode]] = Counter()

    def fuzz(session: Any, operation: Any, mode: GenerationMode) -> None:
        label = operation.label

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case: Any) -> None:
            calls[label, mode] += 1
            for headers in ({"Authorization": f"Bearer {KEY}"}, {}):
                response = case.call(session=session, headers=headers, timeout=300)
                status = response.status_code
                statuses[f"{status // 100}xx"] += 1
                if status >= 500:
                    server_errors.append(f"{label}: {status} {response.text[:300]}")
                    continue
                if status >= 400 and label != "GET /metrics":
                    body = response.json()
                    error = body.get("error") if isinstance(body, dict) else None
                    if set(body) != {"error"} or set(error or {}) != {"type", "message", "field"}:
                        contract.append(f"{label}: {status} {response.text[:200]}")
                if 200 <= status < 300 and headers:
                    try:
                        case.validate_response(response, checks=[response_schema_conformance])
                    except BaseException as exc:  # schemathesis raises an exception group
                        contract.append(f"{label}: {str(exc)[:300]}")

        try:
            run()
        except (SkipTest, Unsatisfiable):
            # Operations whose parameters and body cannot be broken (none, or a free-text path
            # segment) have no schema-violating requests: schemathesis says so at the first draw,
            # before any request (a skip after some would leave the rest of the run unsent).
            assert mode is GenerationMode.NEGATIVE and calls[label, mode] == 0, (label, mode)

    # One client for the whole run: the app's lifespan (job runner) starts once, as in a server.
    with schemathesis_asgi.get_client(cast("Any", app)) as session:
        operations = [cast("Any", result).ok() for result in schema.get_all_operations()]
        assert len(operations) >= 12
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            # One mode at a time: schemathesis then skips an operation it cannot break at once,
            # where with both modes enabled it rejects ~460 drafts before Unsatisfiable (2 s each).
            schema.config.generation.update(modes=[mode])
            for operation in operations:
                fuzz(session, operation, mode)
    print("\nfuzz statuses:", dict(statuses))
    # Both paths really exercised: about 8-11 successes and 70 refusals come of each example per
    # operation-mode (22 and 142 at 2 examples, 169 and 1,363 at 20).
    assert statuses["2xx"] >= 5 * EXAMPLES and statuses["4xx"] >= 20 * EXAMPLES
    assert server_errors == [], server_errors[:5]
    assert contract == [], contract[:5]


# -- limits ---------------------------------------------------------------------------------------


@pytest.fixture
def client(fuzz_app: Callable[..., FastAPI]) -> Iterator[TestClient]:
    with TestClient(fuzz_app(max_body_bytes=1_000_000)) as test_client:
        test_client.headers["Authorization"] = f"Bearer {KEY}"
        yield test_client


ITEM = levin_item()


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "field"}
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("question", "q" * 20_001, "question"),
        ("reference", "r" * 50_001, "reference"),
        ("response", "x" * 50_001, "response"),
        ("book_name", "b" * 501, "book_name"),
        ("id", "i" * 257, "id"),
        ("bonus_points", ["p"] * 9, "bonus_points"),  # above the service's max_bonus_points
        ("bonus_points", ["p"] * 33, "bonus_points"),  # above the hard cap
        ("bonus_points", ["p" * 2_001], "bonus_points"),
        ("bonus_points", [], "bonus_points"),
        ("question", "   ", "question"),
    ],
)
def test_string_and_list_limits_name_the_field(
    client: TestClient, field: str, value: Any, named: str
) -> None:
    error = error_of(client.post("/v1/grade", json={**ITEM, field: value}), 422)
    assert error["field"] == named and named in error["message"]


def test_batch_and_metrics_list_limits(client: TestClient) -> None:
    error = error_of(client.post("/v1/grade/batch", json={"items": [ITEM] * 9}), 422)
    assert error["field"] == "items" and "8" in error["message"]
    pairs = [{"response": "a", "reference": "b"}] * 9
    error = error_of(client.post("/v1/metrics", json={"pairs": pairs, "metrics": ["rouge_l"]}), 422)
    assert error["field"] == "pairs"


def test_job_size_limit_for_json_and_jsonl(client: TestClient) -> None:
    error = error_of(client.post("/v1/jobs", json={"items": [ITEM] * 51}), 422)
    assert error["field"] == "items" and "50" in error["message"]
    body = "\n".join(json.dumps(ITEM) for _ in range(51)).encode()
    response = client.post("/v1/jobs", content=body, headers={"content-type": "application/jsonl"})
    assert error_of(response, 422)["field"] == "items"
    empty = client.post("/v1/jobs", content=b"\n\n", headers={"content-type": "application/jsonl"})
    assert error_of(empty, 422)["field"] == "items"


def test_body_size_limit_on_every_upload_path(fuzz_app: Callable[..., FastAPI]) -> None:
    with TestClient(fuzz_app(max_body_bytes=5_000)) as small:
        small.headers["Authorization"] = f"Bearer {KEY}"
        big_item = {**ITEM, "response": "x" * 6_000}
        for response in (
            small.post("/v1/grade", json=big_item),
            small.post("/v1/grade/batch", json={"items": [big_item]}),
            small.post("/v1/jobs", json={"items": [big_item]}),
            small.post(
                "/v1/jobs",
                content=json.dumps(big_item).encode(),
                headers={"content-type": "application/x-ndjson"},
            ),
            small.post("/v1/jobs", files={"file": ("in.jsonl", json.dumps(big_item).encode())}),
        ):
            assert error_of(response, 413)["type"] == "payload_too_large"

        def chunks() -> Iterator[bytes]:  # no Content-Length: checked while reading
            yield b'{"items": ['
            for _ in range(100):
                yield json.dumps(ITEM).encode() + b","
            yield b"{}]}"

        streamed = small.post(
            "/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
        )
        assert error_of(streamed, 413)["type"] == "payload_too_large"


def test_bad_job_lines_are_per_line_errors_never_a_500(client: TestClient) -> None:
    lines = [
        json.dumps({**ITEM, "id": "ok-1"}),
        json.dumps({**ITEM, "id": "meta", "metadata": 5}),  # crashed the mapper before the fix
        json.dumps({**ITEM, "id": "meta2", "metadata": "ab"}),
        '{"id": "torn", "question": ',
        json.dumps([1, 2]),
        json.dumps({**ITEM, "id": "ok-2", "response": "Pride\u2028and humiliation."}),
    ]
    response = client.post(
        "/v1/jobs",
        content="\n".join(lines).encode(),
        headers={"content-type": "application/x-ndjson"},
    )
    assert response.status_code == 202, response.text
    job = response.json()
    deadline = time.monotonic() + 60
    while job["status"] not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(0.05)
        job = client.get(f"/v1/jobs/{job['id']}").json()
    entries = [json.loads(x) for x in client.get(f"/v1/jobs/{job['id']}/results").text.splitlines()]
    errors = {e["id"]: e["error"] for e in entries if e["error"]}
    assert errors["meta"]["field"] == "metadata" and errors["meta2"]["field"] == "metadata"
    assert job["invalid"] == 4
    graded = sorted(e["id"] for e in entries if e["result"])
    assert graded == ["ok-1", "ok-2"]


def test_jsonl_job_keeps_a_line_with_a_raw_line_separator(client: TestClient) -> None:
    line = json.dumps({**ITEM, "id": "sep", "response": "Pride\u2028and humiliation."},
                      ensure_ascii=False)  # fmt: skip
    response = client.post(
        "/v1/jobs", content=line.encode(), headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 202, response.text
    assert response.json()["invalid"] == 0 and response.json()["total"] == 1
