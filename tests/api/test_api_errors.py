"""Error statuses and the uniform error body: 422 naming the field, 413, 404, 503, 500."""



from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from core.errors import ConfigError
from judge.engine import Grader
from judge.providers.fake import FakeProvider
from tests.helpers.engine import levin_item

ITEM = levin_item()


@pytest.fixture
def client(make_app: Callable[..., FastAPI]) -> Iterator[TestClient]:
    with TestClient(make_app(max_bonus_points=4, max_body_bytes=4_000,
                             allowed_models=["fake/other"])) as test_client:
        yield test_client


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"type", "message", "field"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"question": ""}, "question"),
        ({"reference": "   "}, "reference"),
        ({"bonus_points": [f"point {i}" for i in range(5)]}, "bonus_points"),  # > settings' 4
        ({"bonus_points": [f"point {i}" for i in range(40)]}, "bonus_points"),  # > hard 32
        ({"bonus_points": []}, "bonus_points"),
        ({"language": "fr"}, "language"),
        ({"judge": {"rubric": "no-such-rubric"}}, "judge.rubric"),
        ({"judge": {"temperature": 9}}, "judge.temperature"),
        ({"judge": {"metrics": ["accuracy"]}}, "judge.metrics.0"),
        ({"judge": {"api_base": "http://evil"}}, "judge.api_base"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_grade_input_names_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    error = error_of(client.post("/v1/grade", json={**ITEM, **change}), 422)
    assert error["field"] == field
    assert field.split(".")[-1] in error["message"] or field in error["message"]


def test_unknown_rubric_has_its_own_type(client: TestClient) -> None:
    error = error_of(client.post("/v1/grade", json={**ITEM, "judge": {"rubric": "x"}}), 422)
    assert error["type"] == "unknown_rubric"
    assert "chartom" in error["message"]  # lists the known families


def test_missing_field_and_bad_json(client: TestClient) -> None:
    body = {k: v for k, v in ITEM.items() if k != "reference"}
    assert error_of(client.post("/v1/grade", json=body), 422)["field"] == "reference"
    bad = client.post("/v1/grade", content=b"{nope", headers={"content-type": "application/json"})
    assert error_of(bad, 422)["field"] == "body"


def test_model_outside_the_allow_list(client: TestClient) -> None:
    error = error_of(client.post("/v1/grade", json={**ITEM, "judge": {"model": "openai/gpt-4o"}}),
                     422)
    assert error["field"] == "judge.model"
    assert "fake/judge" in error["message"] and "fake/other" in error["message"]


def test_allow_listed_model_is_used(client: TestClient) -> None:
    response = client.post("/v1/grade", json={**ITEM, "judge": {"model": "fake/other"}})
    assert response.status_code == 200
    assert response.json()["provenance"]["judge"] == "fake/other"


def test_batch_over_the_limit_names_items(make_app: Callable[..., FastAPI]) -> None:
    with TestClient(make_app(max_batch=2)) as client:
        error = error_of(client.post("/v1/grade/batch", json={"items": [ITEM] * 3}), 422)
    assert error["field"] == "items"


def test_metrics_over_the_limit_names_pairs(make_app: Callable[..., FastAPI]) -> None:
    with TestClient(make_app(max_batch=1)) as client:
        pairs = [{"response": "a", "reference": "b"}] * 2
        response = client.post("/v1/metrics", json={"pairs": pairs, "metrics": ["rouge_l"]})
    assert error_of(response, 422)["field"] == "pairs"


def test_metrics_unknown_language(client: TestClient) -> None:
    pairs = [{"response": "a", "reference": "b", "language": "xx"}]
    response = client.post("/v1/metrics", json={"pairs": pairs, "metrics": ["rouge_l"]})
    assert error_of(response, 422)["field"] == "pairs.0.language"


def test_body_too_large_by_content_length(client: TestClient) -> None:
    body = {**ITEM, "response": "x" * 5_000}
    error = error_of(client.post("/v1/grade", json=body), 413)
    assert error["type"] == "payload_too_large"


def test_body_too_large_while_streaming(client: TestClient) -> None:
    # A chunked body has no Content-Length: the limit is enforced as the bytes arrive.
    chunks = (b"x" * 1_000 for _ in range(10))
    response = client.post("/v1/jobs", content=chunks,
                           headers={"content-type": "application/x-ndjson"})
    assert error_of(response, 413)["type"] == "payload_too_large"
    chunks = (b"x" * 1_000 for _ in range(10))
    response = client.post("/v1/grade", content=chunks,
                           headers={"content-type": "application/json"})
    assert error_of(response, 413)["type"] == "payload_too_large"


def test_not_found(client: TestClient) -> None:
    assert error_of(client.get("/v1/jobs/nope"), 404)["type"] == "not_found"
    assert error_of(client.get("/v1/jobs/nope/results"), 404)["type"] == "not_found"
    assert error_of(client.get("/v1/jobs/nope/summary"), 404)["type"] == "not_found"
    assert error_of(client.delete("/v1/jobs/nope"), 404)["type"] == "not_found"
    assert error_of(client.get("/v1/rubrics/nope"), 404)["type"] == "not_found"
    assert error_of(client.get("/no/such/route"), 404)["type"] == "not_found"


def test_wrong_method_and_media_type(client: TestClient) -> None:
    assert error_of(client.get("/v1/grade"), 405)["type"] == "method_not_allowed"
    response = client.post("/v1/jobs", content=b"<xml/>", headers={"content-type": "text/xml"})
    assert error_of(response, 415)["field"] == "content-type"


def test_judge_not_configured_is_503(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    with TestClient(make_app(make_grader(model=""))) as client:
        error = error_of(client.post("/v1/grade", json=ITEM), 503)
        assert error["type"] == "judge_not_configured"
        assert "model" in error["message"]
        extract = client.post("/v1/bonus-points", json={"question": "q", "reference": "r"})
        assert error_of(extract, 503)["type"] == "judge_not_configured"
        # Reference metrics need no judge.
        rouge_only = client.post("/v1/grade", json={**ITEM, "judge": {"metrics": ["rouge_l"]}})
        assert rouge_only.status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["judge"]["ok"] is False


def test_unexpected_error_is_a_bare_500(make_app: Callable[..., FastAPI]) -> None:
    provider = FakeProvider(outputs=[])  # runs out at once: a fatal, unexpected error
    app = make_app(provider=provider)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/grade", json=ITEM)
    error = error_of(response, 500)
    assert error == {"type": "internal_error", "message": error["message"], "field": None}
    assert "FakeProvider" not in response.text and "Traceback" not in response.text


def test_no_500_across_hostile_inputs(client: TestClient) -> None:
    hostile = [
        b"", b"null", b"[]", b"42", b'"x"', b'{"items": 3}', b"\xff\xfe", b'{"question": []}',
    ]
    for path in ("/v1/grade", "/v1/grade/batch", "/v1/jobs", "/v1/metrics", "/v1/bonus-points"):
        for raw in hostile:
            response = client.post(path, content=raw, headers={"content-type": "application/json"})
            assert 400 <= response.status_code < 500, (path, raw, response.text)
            error_of(response, response.status_code)


def test_service_side_config_failure_is_503_not_422(make_app: Callable[..., FastAPI]) -> None:
    app = make_app()

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise ConfigError("matcher parameter file is missing", field="matcher")

    app.state.grader.grade = broken
    with TestClient(app) as client:
        error = error_of(client.post("/v1/grade", json=ITEM), 503)
    assert error["type"] == "service_misconfigured"
    assert "matcher parameter file" in error["message"]
