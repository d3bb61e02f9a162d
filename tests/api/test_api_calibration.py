"""Calibration over HTTP: runs as jobs, stored reports, validation, privacy, restarts.

Runs use the bundled `example` set with ROUGE-L only (no encoder, no judge): a second or two each.
"""

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import JOBS_DB
from api.auth import hash_key
from api.jobs import JobStore
from api.services.calibration import CALIBRATE, REPORTS
from calibration.sets import example_set_path
from judge.engine import Grader
from judge.providers.fake import FakeProvider

KEY = "calibration-key"
OTHER_KEY = "calibration-other-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
OTHER = {"Authorization": f"Bearer {OTHER_KEY}"}
FAST: dict[str, Any] = {"metrics": ["rouge_l"], "resamples": 100}
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def build(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> Callable[..., FastAPI]:
    """The service with two keys and one allow-listed judge; a judge call would fail the test."""

    def app(**settings: Any) -> FastAPI:
        grader = make_grader(FakeProvider(outputs=[]), cache=False)
        return make_app(grader, judge=grader.config, api_keys=[KEY, OTHER_KEY],
                        allowed_models=["other/judge"], lease_seconds=30.0, **settings)

    return app


@pytest.fixture
def http(build: Callable[..., FastAPI]) -> Iterator[TestClient]:
    with TestClient(build(), raise_server_exceptions=False) as client:
        yield client


def wait_done(http: TestClient, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = http.get(f"/v1/calibrate/{job_id}", headers=AUTH).json()
        if status["status"] not in ("queued", "running"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def example_lines() -> list[dict[str, Any]]:
    text = example_set_path("example").read_text(encoding="utf-8")
    return [json.loads(raw) for raw in text.splitlines() if raw.strip()]


def test_example_run_writes_and_serves_its_report(http: TestClient, tmp_path: Path) -> None:
    answer = http.post("/v1/calibrate", json={"set": "example", **FAST}, headers=AUTH)
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert answer.headers["Location"] == f"/v1/calibrate/{job['id']}"
    assert job["set"] == "example" and job["source"] == "example" and job["items"] == 16
    assert job["report"] is None and job["metrics"] == ["rouge_l"] and job["judges"] == []

    status = wait_done(http, job["id"])
    assert status["status"] == "done", status
    assert status["report"] == f"/v1/reports/{job['id']}"
    assert set(status["timings"]) == {"metrics"}

    report = http.get(status["report"], headers=AUTH)
    assert report.status_code == 200 and report.headers["content-type"] == "application/json"
    data = report.json()
    for section in ("set", "options", "configs", "metrics", "human_ceiling", "plots"):
        assert section in data, section
    assert data["set"]["name"] == "example" and data["set"]["n_items"] == 16
    assert data["options"]["n_resamples"] == 100 and data["options"]["seed"] == 0
    assert list(data["metrics"]) == ["rouge_l"]
    assert data["metrics"]["rouge_l"]["agreement"]["n"] == 16
    # The report lives in the job store (any replica serves it); the scratch folder is gone.
    store = http.app.state.jobs.store  # type: ignore[attr-defined]
    assert "report.json" in store.file_names(job["id"])
    assert not (tmp_path / "data" / REPORTS / job["id"]).exists()

    markdown = http.get(f"/v1/reports/{job['id']}/report.md", headers=AUTH)
    assert markdown.status_code == 200
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert "rouge_l" in markdown.text

    scatter = data["plots"]["scatter"]["rouge_l"]
    plot = http.get(f"/v1/reports/{job['id']}/files/{scatter}", headers=AUTH)
    assert plot.status_code == 200 and plot.headers["content-type"] == "image/png"
    assert plot.content.startswith(PNG)
    mapping_file = data["metrics"]["rouge_l"]["mapping"]["file"]
    mapping = http.get(f"/v1/reports/{job['id']}/files/{mapping_file}", headers=AUTH)
    assert mapping.status_code == 200 and isinstance(mapping.json(), dict)

    listing = http.get("/v1/reports", headers=AUTH).json()["reports"]
    assert [r["id"] for r in listing] == [job["id"]]
    assert listing[0]["metrics"] == ["rouge_l"] and listing[0]["set"] == "example"
    assert scatter in listing[0]["files"] and mapping_file in listing[0]["files"]
    assert ".lock" not in listing[0]["files"]


def test_unknown_ids_and_escaping_names_are_404(http: TestClient) -> None:
    first = http.post("/v1/calibrate", json={"set": "example", **FAST, "limit": 6},
                      headers=AUTH).json()
    second = http.post("/v1/calibrate", json={"set": "example", **FAST, "limit": 5},
                       headers=AUTH).json()
    wait_done(http, first["id"])
    wait_done(http, second["id"])
    base = f"/v1/reports/{first['id']}"
    assert http.get(f"{base}/files/report.json", headers=AUTH).status_code == 200
    for name in (
        "..%2F..%2F" + JOBS_DB,  # the jobs database, two levels up
        f"..%2F{second['id']}%2Freport.json",  # another report's file
        "%2Fetc%2Fpasswd",
        ".lock",
        "missing.png",
        "mappings",  # a folder
    ):
        answer = http.get(f"{base}/files/{name}", headers=AUTH)
        assert answer.status_code == 404, name
        assert answer.json()["error"]["type"] == "not_found"
    for path in ("/v1/calibrate/nope", "/v1/reports/nope", "/v1/reports/nope/report.md",
                 "/v1/reports/nope/files/report.json"):
        assert http.get(path, headers=AUTH).status_code == 404, path


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"set": "no_such_set"}, "set"),
        ({"set": "/etc/passwd"}, "set"),
        ({"set": "../calibration/data/example"}, "set"),
        ({"set": "example", "metrics": ["bleu"]}, "metrics.0"),
        ({"set": "example", "metrics": []}, "metrics"),
        ({"set": "example", "resamples": 5000}, "resamples"),
        ({"set": "example", "limit": 0}, "limit"),
        ({}, "set"),
        ({"set": "example", "items": [{"id": 1}]}, "set"),
        ({"set": "example", "judges": ["secret/model"], "metrics": ["coverage"]}, "judges.0"),
        ({"set": "example", "judges": ["fake/judge"], "metrics": ["rouge_l"]}, "judges"),
        ({"set": "example", "scale": "1-5"}, "scale"),
        ({"items": [{"id": "x"}]}, "items"),
        ({"items": example_lines()[:3], "scale": "not a scale"}, "scale"),
        ({"set": "example", "path": "/tmp"}, "path"),
    ],
)
def test_invalid_requests_are_422_naming_the_field(
    http: TestClient, tmp_path: Path, body: dict[str, Any], field: str
) -> None:
    answer = http.post("/v1/calibrate", json=body, headers=AUTH)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
    # A refused request leaves no report folder behind.
    reports = tmp_path / "data" / REPORTS
    assert not reports.exists() or not any(reports.iterdir())


def test_allowed_judges_reach_the_runner(
    http: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run gets the validated judges and the service's judge as its default judge."""
    import calibration.runner

    seen: dict[str, Any] = {}

    async def grading(subset: Any, passes: Any, **kwargs: Any) -> Any:
        seen.update(kwargs, passes=passes, n_items=len(subset.items))
        run = calibration.runner.CalibrationRun(files=None, timings={"x": 1.0},  # type: ignore[arg-type]
                                                graded={"x": 1})
        return calibration.runner.GradedSet(subset=subset, run=run)

    def report(graded: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return graded.run

    monkeypatch.setattr(calibration.runner, "grade_passes", grading)
    monkeypatch.setattr(calibration.runner, "write_calibration", report)
    body = {"set": "example", "judges": ["other/judge", "fake/judge"], "metrics": ["coverage"],
            "limit": 2, "seed": 7, "resamples": 150, "retest": True}
    answer = http.post("/v1/calibrate", json=body, headers=AUTH)
    assert answer.status_code == 202, answer.text
    assert answer.json()["judges"] == ["other/judge", "fake/judge"]
    assert wait_done(http, answer.json()["id"])["status"] == "done"
    assert [p.label for p in seen["passes"]] == ["other/judge", "fake/judge"]
    assert [p.config.model for p in seen["passes"]] == ["other/judge", "fake/judge"]
    assert all(p.names == ["coverage"] for p in seen["passes"])
    # Only the metric asked for: no defects calls (the example set rates answers, not points).
    assert all(p.config.metrics == ("coverage",) for p in seen["passes"])
    assert (seen["seed"], seen["n_resamples"], seen["retest"]) == (7, 150, True)
    assert seen["n_items"] == 2  # the limit
    # Without judges, coverage calibrates the service's own judge.
    default = http.post("/v1/calibrate", json={"set": "example", "metrics": ["coverage"]},
                        headers=AUTH)
    assert default.json()["judges"] == ["fake/judge"]
    wait_done(http, default.json()["id"])


def test_an_uploaded_set_with_bad_lines(http: TestClient) -> None:
    lines = example_lines()
    upload = [*lines[:8], {"id": "broken", "human_score": "high"}, lines[0], *lines[8:]]
    answer = http.post("/v1/calibrate", json={"items": upload, "name": "mine", **FAST},
                       headers=AUTH)
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert job["source"] == "upload" and job["set"] == "mine"
    assert job["items"] == 16 and job["problems"] == 2
    assert [p["line"] for p in job["problem_lines"]] == [9, 10]
    assert "duplicate" in job["problem_lines"][1]["reason"]
    status = wait_done(http, job["id"])
    assert status["status"] == "done", status
    report = http.get(f"/v1/reports/{job['id']}", headers=AUTH).json()
    assert report["set"]["name"] == "mine" and report["set"]["n_problems"] == 2


def test_reports_are_private(http: TestClient) -> None:
    job = http.post("/v1/calibrate", json={"set": "example", **FAST, "limit": 5},
                    headers=AUTH).json()
    wait_done(http, job["id"])
    for path in (f"/v1/calibrate/{job['id']}", f"/v1/reports/{job['id']}",
                 f"/v1/reports/{job['id']}/report.md",
                 f"/v1/reports/{job['id']}/files/report.json"):
        assert http.get(path, headers=OTHER).status_code == 404, path
        assert http.get(path).status_code == 401, path
    assert http.get("/v1/reports", headers=OTHER).json() == {"reports": []}
    assert http.post("/v1/calibrate", json={"set": "example"}).status_code == 401
    # Not a grading job either.
    assert http.get(f"/v1/jobs/{job['id']}", headers=AUTH).status_code == 404


def test_a_failed_run_reports_why(http: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    import calibration.runner

    def broken(*args: Any, **kwargs: Any) -> None:
        raise ValueError("not enough rated items to fit a mapping")

    monkeypatch.setattr(calibration.runner, "write_calibration", broken)
    job = http.post("/v1/calibrate", json={"set": "example", **FAST}, headers=AUTH).json()
    status = wait_done(http, job["id"])
    assert status["status"] == "failed"
    assert status["detail"] == "calibration failed: not enough rated items to fit a mapping"
    assert http.get(f"/v1/reports/{job['id']}", headers=AUTH).status_code == 404
    assert http.get("/v1/reports", headers=AUTH).json() == {"reports": []}


def test_a_missing_shared_folder_is_the_services_fault(
    tmp_path: Path, build: Callable[..., FastAPI]
) -> None:
    app = build(calibration_dir=tmp_path / "nowhere")
    with TestClient(app, raise_server_exceptions=False) as http:
        answer = http.post("/v1/calibrate", json={"set": "evouna_tq", **FAST}, headers=AUTH)
        assert answer.status_code == 503
        assert answer.json()["error"]["type"] == "service_misconfigured"


def test_an_interrupted_run_is_resumed_after_a_restart(
    tmp_path: Path, build: Callable[..., FastAPI]
) -> None:
    """A run left queued by a service that stopped is completed by the next one."""
    store = JobStore(tmp_path / "data" / JOBS_DB)
    options = {"set": "example", "source": "example", "scale": None, "judges": [],
               "metrics": ["rouge_l"], "limit": 4, "seed": 3, "resamples": 100,
               "retest": False, "problems": 0, "problem_lines": []}
    store.create(job_id="left", owner=hash_key(KEY), items=[], overrides=None, config=None,
                 lease_owner=None, lease_seconds=30.0, kind=CALIBRATE, options=options, total=4,
                 model="", config_hash="")
    store.close()
    with TestClient(build(), raise_server_exceptions=False) as http:
        status = wait_done(http, "left")
        assert status["status"] == "done", status
        report = http.get("/v1/reports/left", headers=AUTH).json()
        assert report["set"]["n_items"] == 4 and report["options"]["seed"] == 3
