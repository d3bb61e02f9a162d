"""Routes of the service, in-process, with a scripted judge (no LLM, no network)."""

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from bonusjudge_client.wire.grading import GradeResult
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider, covering, defects
from judge.verdicts import BonusPointsExtraction, DefectJudgement

ITEM = {
    "id": "item-1",
    "question": "How does Levin feel after Kitty refuses him?",
    "reference": "He feels humiliated and hurt, and wants to go back to his estate.",
    "bonus_points": ["Levin feels humiliated and hurt", "He wants to return to his estate"],
    "response": "Levin is humiliated and longs for his estate.",
    "tom_dimension": "emotion",
}


def points_of(call: FakeCall) -> int:
    assert call.validation_context is not None
    return int(call.validation_context["n_points"])


def handler(call: FakeCall) -> FakeOutput:
    if call.response_model is DefectJudgement:
        if "WRONG" in call.user:
            return defects("Kitty accepted him")
        return defects()
    if call.response_model is BonusPointsExtraction:
        return {"points": ["Levin feels humiliated", "He wants to go home"]}
    return covering(1, n=points_of(call))


@pytest.fixture
def judge_app(make_app: Callable[..., FastAPI]) -> FastAPI:
    """The service over this file's scripted judge."""
    return make_app(provider=FakeProvider(handler=handler))


@pytest.fixture
def client(judge_app: FastAPI) -> Iterator[TestClient]:
    with TestClient(judge_app) as test_client:
        yield test_client


def test_grade_returns_engine_result(client: TestClient) -> None:
    response = client.post("/v1/grade", json=ITEM)
    assert response.status_code == 200
    result = GradeResult.model_validate(response.json())
    assert result.id == "item-1"
    assert result.coverage is not None and result.coverage.covered == 1
    assert result.coverage.total == 2
    assert result.defects is not None and result.defects.penalized is False
    assert result.rouge_l is not None and 0 < result.rouge_l.f1 < 1
    assert result.bertscore is None  # not among the judge's metrics
    assert result.provenance.judge == "fake/judge"


def test_grade_judge_overrides_apply(client: TestClient) -> None:
    body = {**ITEM, "judge": {"metrics": ["rouge_l"]}}
    result = client.post("/v1/grade", json=body).json()
    assert result["coverage"] is None and result["defects"] is None
    assert result["rouge_l"]["f1"] > 0


def test_batch_keeps_order_and_isolates_a_bad_item(client: TestClient) -> None:
    items = [
        {**ITEM, "id": "a"},
        {**ITEM, "id": "b", "question": ""},
        {**ITEM, "id": "c", "response": "WRONG: Kitty accepted Levin."},
        {k: v for k, v in ITEM.items() if k != "id"},
    ]
    response = client.post("/v1/grade/batch", json={"items": items})
    assert response.status_code == 200
    entries = response.json()["results"]
    assert [e["index"] for e in entries] == [0, 1, 2, 3]
    assert [e["id"] for e in entries] == ["a", "b", "c", "4"]
    assert entries[0]["result"]["coverage"]["covered"] == 1 and entries[0]["error"] is None
    assert entries[1]["result"] is None
    assert entries[1]["error"]["field"] == "question"
    assert entries[1]["error"]["type"] == "invalid_input"
    assert entries[2]["result"]["defects"]["penalized"] is True


@pytest.mark.parametrize("empty", ["", "   "])
def test_an_empty_response_is_graded_zero_not_refused(client: TestClient, empty: str) -> None:
    response = client.post("/v1/grade", json={**ITEM, "response": empty})
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["status"] == "scored" and result["flags"] == ["empty_response"]
    assert result["coverage"]["coverage"] == 0.0 and result["defects"]["penalized"] is False


def test_bonus_points_extraction(client: TestClient) -> None:
    body = {"question": ITEM["question"], "reference": ITEM["reference"]}
    response = client.post("/v1/bonus-points", json=body)
    assert response.status_code == 200
    assert response.json()["status"] == "scored"
    assert response.json()["bonus_points"] == ["Levin feels humiliated", "He wants to go home"]


def test_metrics_rouge_only(client: TestClient) -> None:
    body = {
        "pairs": [
            {"response": "a b c", "reference": "a b c"},
            {"response": "他很难过", "reference": "他很难过和羞愧", "language": "zh"},
        ],
        "metrics": ["rouge_l"],
    }
    response = client.post("/v1/metrics", json=body)
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[0]["rouge_l"]["f1"] == pytest.approx(1.0)
    # Chinese is tokenised (the default rouge-score tokenizer would score it as empty).
    assert 0 < results[1]["rouge_l"]["f1"] < 1
    assert all(r["bertscore"] is None for r in results)


def test_metrics_rejects_an_unknown_encoder(client: TestClient) -> None:
    body = {"pairs": [{"response": "a", "reference": "a"}], "encoder": "/etc/some-model"}
    response = client.post("/v1/metrics", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "encoder"


def test_rubrics_list_and_detail(client: TestClient) -> None:
    listing = client.get("/v1/rubrics").json()
    assert {"chartom", "chartom-paper"} <= set(listing["families"])
    ids = {r["id"] for r in listing["rubrics"]}
    assert "chartom-coverage" in ids
    detail = client.get("/v1/rubrics/chartom-coverage").json()
    assert detail["task"] == "coverage"
    assert "en" in detail["prompts"] and detail["prompts"]["en"]["user"]


def test_health_and_ready(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["ready"] is True
    assert set(body["checks"]) == {"encoder", "store", "cache", "judge"}
    assert body["checks"]["judge"]["detail"] == "fake/judge"


def test_ready_reports_an_unwritable_cache(
    judge_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache is disposable: an unwritable one degrades the service (it grades uncached), it
    # does not take it out of rotation.
    app = judge_app
    monkeypatch.setattr(app.state.grader.caller.cache, "writable", lambda: False)
    with TestClient(app) as client:
        response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["checks"]["cache"]["ok"] is True and body["degraded"] is True
    assert "not writable" in body["checks"]["cache"]["detail"]


def test_prometheus_exposes_engine_and_request_metrics(client: TestClient) -> None:
    client.post("/v1/grade", json=ITEM)
    client.post("/v1/grade", json=ITEM)  # second time served from the cache
    text = client.get("/metrics").text
    assert "bonusjudge_judge_calls_total 2.0" in text
    assert "bonusjudge_cache_hits_total 2.0" in text
    series = 'bonusjudge_http_requests_total{method="POST",route="/v1/grade",status="200"}'
    assert f"{series} 2.0" in text
    assert "bonusjudge_http_request_duration_seconds_bucket" in text
    assert 'bonusjudge_tokens_total{kind="prompt"}' in text


def test_prometheus_counts_the_stores_jobs_at_each_scrape(client: TestClient) -> None:
    def jobs(text: str) -> float:
        lines = [line for line in text.splitlines() if line.startswith("bonusjudge_jobs{")]
        assert len(lines) == 6, lines  # one series per status, paused included
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines)

    assert jobs(client.get("/metrics").text) == 0
    assert client.post("/v1/jobs", json={"items": [ITEM]}).status_code == 202
    assert jobs(client.get("/metrics").text) == 1


def test_prometheus_labels_use_route_templates(client: TestClient) -> None:
    client.get("/v1/jobs/abc")
    client.get("/v1/jobs/def")
    text = client.get("/metrics").text
    assert 'route="/v1/jobs/{job_id}",status="404"} 2.0' in text
    assert "/v1/jobs/abc" not in text


def test_openapi_documents_fields_and_examples(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    for name in ("GradeBody", "BatchBody", "JobStatus", "MetricsBody", "ErrorBody", "ExtractBody"):
        for field, prop in schemas[name]["properties"].items():
            assert prop.get("description"), f"{name}.{field} has no description"
    for path, method in [
        ("/v1/grade", "post"), ("/v1/grade/batch", "post"), ("/v1/bonus-points", "post"),
        ("/v1/metrics", "post"), ("/v1/jobs", "post"),
    ]:
        body = spec["paths"][path][method]["requestBody"]["content"]["application/json"]
        schema = body.get("schema", {})
        ref = schema.get("$ref", "").rsplit("/", 1)[-1]
        assert body.get("example") or schemas.get(ref, {}).get("examples"), path
    assert "application/x-ndjson" in spec["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]
    assert spec["paths"]["/v1/grade"]["post"]["responses"]["422"]["content"][
        "application/json"]["schema"]["$ref"].endswith("/ErrorBody")


def test_bertscore_and_encoder_readiness(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    metrics = ("coverage", "rouge_l", "bertscore")
    app = make_app(make_grader(FakeProvider(handler=handler), metrics=metrics))
    with TestClient(app) as client:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready = client.get("/readyz").json()
            if ready["ready"] or "failed" in ready["checks"]["encoder"]["detail"]:
                break
            assert ready["checks"]["encoder"]["detail"].endswith("not loaded yet")
            time.sleep(0.2)
        assert ready["ready"] is True, ready
        assert ready["checks"]["encoder"]["detail"].endswith("loaded")
        body = {
            "pairs": [{"response": "Levin feels hurt.", "reference": "He feels humiliated."}],
            "metrics": ["bertscore"],
        }
        result = client.post("/v1/metrics", json=body).json()["results"][0]
        assert result["rouge_l"] is None
        assert 0 < result["bertscore"]["f1"] <= 1
        graded = client.post("/v1/grade", json=ITEM).json()
        assert graded["bertscore"]["f1"] > 0


def test_ready_reports_an_encoder_that_cannot_load(
    tmp_path: Path, make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(
        FakeProvider(handler=handler), metrics=("rouge_l", "bertscore"),
        encoder=str(tmp_path / "no-such-model"),
    )
    with TestClient(make_app(grader)) as client:
        deadline = time.monotonic() + 60
        while True:
            response = client.get("/readyz")
            detail = response.json()["checks"]["encoder"]["detail"]
            if "failed" in detail or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert response.status_code == 503
    assert "failed to load" in detail and "no-such-model" in detail


def test_an_item_without_id_is_item_1_in_grade_as_in_batch(client: TestClient) -> None:
    body = {k: v for k, v in ITEM.items() if k != "id"}
    single = client.post("/v1/grade", json=body).json()
    batch = client.post("/v1/grade/batch", json={"items": [body]}).json()
    assert single["id"] == "1" == batch["results"][0]["result"]["id"]
