"""Two service replicas on one Postgres job store: what one ran, the other serves (status,
results, summary, calibration reports and their files), and a job one stored, the other runs.

Each replica has its own data folder, so nothing reaches the second one but the database.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import create_app
from api.auth import hash_key
from api.jobs import JobStore
from api.services.calibration import CALIBRATE, INPUT_FILE, REPORTS
from api.settings import ServiceSettings
from calibration.sets import example_set_path
from judge.engine import Grader
from tests.helpers.engine import levin_item

KEY = "replica-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
FAST: dict[str, Any] = {"metrics": ["rouge_l"], "resamples": 100}
PNG = b"\x89PNG\r\n\x1a\n"


def item(n: int) -> dict[str, Any]:
    return levin_item(n, tom_dimension="emotion")


def example_lines() -> list[dict[str, Any]]:
    text = example_set_path("example").read_text(encoding="utf-8")
    return [json.loads(raw) for raw in text.splitlines() if raw.strip()]


def wait_finished(client: TestClient, path: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = client.get(path, headers=AUTH).json()
        if status["status"] not in ("queued", "running"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def everything_about(client: TestClient, job: str, report: str) -> dict[str, Any]:
    """What a caller can read of a grading job and a calibration report, as raw answers."""
    got: dict[str, Any] = {}
    for path in (f"/v1/jobs/{job}", f"/v1/jobs/{job}/results", f"/v1/jobs/{job}/summary",
                 "/v1/jobs", f"/v1/calibrate/{report}", "/v1/reports",
                 f"/v1/reports/{report}", f"/v1/reports/{report}/report.md"):
        answer = client.get(path, headers=AUTH)
        assert answer.status_code == 200, (path, answer.text)
        got[path] = (answer.headers["content-type"], answer.content)
    files = json.loads(got["/v1/reports"][1])["reports"][0]["files"]
    for name in files:
        answer = client.get(f"/v1/reports/{report}/files/{name}", headers=AUTH)
        assert answer.status_code == 200, (name, answer.text)
        got[name] = (answer.headers["content-type"], answer.content)
    return got


def test_what_one_replica_ran_another_serves(
    tmp_path: Path, postgres_database: str, make_grader: Callable[..., Grader]
) -> None:
    def replica(name: str) -> FastAPI:
        settings = ServiceSettings(cache_dir=tmp_path / "cache", data_dir=tmp_path / name,
                            jobs_url=postgres_database, api_keys=[KEY])
        return create_app(settings, grader=make_grader(cache=False), poll_seconds=0.05,
                          lease_seconds=5.0)

    with TestClient(replica("a")) as a:
        created = a.post("/v1/jobs", json={"items": [item(1), item(2), {"id": "bad"}, item(3)]},
                         headers=AUTH)
        assert created.status_code == 202, created.text
        job = created.json()["id"]
        assert wait_finished(a, f"/v1/jobs/{job}")["status"] == "done"
        calibrated = a.post("/v1/calibrate", json={"set": "example", **FAST}, headers=AUTH)
        report = calibrated.json()["id"]
        assert wait_finished(a, f"/v1/calibrate/{report}")["status"] == "done"
        on_a = everything_about(a, job, report)
        with TestClient(replica("b")) as b:  # both up: the other replica answers alike
            assert everything_about(b, job, report) == on_a
    # Replica a is gone, and kept nothing on disk: the report lives in the database.
    assert not (tmp_path / "a" / REPORTS / report).exists()
    with TestClient(replica("b")) as b:
        on_b = everything_about(b, job, report)
    assert on_b == on_a
    # And what they say is right (not merely the same twice).
    status = json.loads(on_b[f"/v1/jobs/{job}"][1])
    assert (status["status"], status["done"], status["scored"], status["invalid"]) == (
        "done", 3, 3, 1)
    entries = [json.loads(line) for line in on_b[f"/v1/jobs/{job}/results"][1].splitlines()]
    assert sorted(e["index"] for e in entries) == [0, 1, 2, 3]
    assert json.loads(on_b[f"/v1/jobs/{job}/summary"][1])["items"] == 3
    data = json.loads(on_b[f"/v1/reports/{report}"][1])
    assert on_b[f"/v1/reports/{report}"][0] == "application/json"
    assert data["set"]["name"] == "example" and data["metrics"]["rouge_l"]["agreement"]["n"] == 16
    plot = data["plots"]["scatter"]["rouge_l"]
    assert on_b[plot] == ("image/png", on_a[plot][1]) and on_b[plot][1].startswith(PNG)
    mapping = data["metrics"]["rouge_l"]["mapping"]["file"]
    assert isinstance(json.loads(on_b[mapping][1]), dict)
    assert on_b[f"/v1/reports/{report}/report.md"][0].startswith("text/markdown")
    timings = json.loads(on_b[f"/v1/calibrate/{report}"][1])["timings"]
    assert set(timings) == {"metrics"}


def test_a_run_stored_by_one_replica_is_run_by_another(
    tmp_path: Path, postgres_database: str, make_grader: Callable[..., Grader]
) -> None:
    """An uploaded set goes into the store with its job: the replica that claims the run loads
    it from there (its own data folder never saw the upload)."""

    def replica(name: str) -> FastAPI:
        settings = ServiceSettings(cache_dir=tmp_path / "cache", data_dir=tmp_path / name,
                            jobs_url=postgres_database, api_keys=[KEY])
        return create_app(settings, grader=make_grader(cache=False), poll_seconds=0.05,
                          lease_seconds=5.0)

    lines = example_lines()[:10]
    with TestClient(replica("a")) as a:  # a stores an upload and runs it: the upload is kept
        answer = a.post("/v1/calibrate", json={"items": lines, "name": "mine", **FAST},
                        headers=AUTH)
        assert answer.status_code == 202, answer.text
        first = answer.json()["id"]
        assert wait_finished(a, f"/v1/calibrate/{first}")["status"] == "done"
    store = JobStore(postgres_database)
    try:
        upload = store.read_file(first, INPUT_FILE)
        assert upload is not None and [json.loads(line) for line in upload.splitlines()] == lines
        # A run that replica a stored and left before running it (it stopped at once).
        options = {"set": "mine", "source": "upload", "scale": None, "judges": [],
                   "metrics": ["rouge_l"], "limit": None, "seed": 5, "resamples": 100,
                   "retest": False, "problems": 0, "problem_lines": []}
        store.put_files("left", {INPUT_FILE: upload})
        store.create(job_id="left", owner=hash_key(KEY), items=[], overrides=None, config=None,
                     lease_owner=None, lease_seconds=30.0, kind=CALIBRATE, options=options,
                     total=10, model="", config_hash="")
    finally:
        store.close()
    with TestClient(replica("b")) as b:
        status = wait_finished(b, "/v1/calibrate/left")
        assert status["status"] == "done", status
        report = b.get("/v1/reports/left", headers=AUTH).json()
        assert report["set"]["name"] == "mine" and report["set"]["n_items"] == 10
        assert report["options"]["seed"] == 5
        listed = {r["id"]: r for r in b.get("/v1/reports", headers=AUTH).json()["reports"]}
        assert INPUT_FILE in listed["left"]["files"] and "report.json" in listed["left"]["files"]
    assert not (tmp_path / "b" / REPORTS / "left").exists()  # the scratch folder is gone
