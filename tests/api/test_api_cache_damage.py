"""The service with a damaged cache (issue 15 item 2): it grades, says so on /readyz, leaks no path.

A full disk is simulated under diskcache (its ``Cache.set`` raises the OSError the OS would, with
the file name in it, as the OS's does); a corrupt ``cache.db`` is written for real before start.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import time
from pathlib import Path
from typing import Any

import diskcache
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import create_app
from judge.cache import JudgeCache
from judge.config import JudgeConfig, Settings
from judge.engine import Grader
from judge.fake import FakeCall, FakeOutput, FakeProvider, covering, defects

ITEM = {
    "id": "item-1",
    "question": "How does Levin feel after Kitty refuses him?",
    "reference": "He feels humiliated and hurt, and wants to go back to his estate.",
    "bonus_points": ["Levin feels humiliated and hurt", "He wants to return to his estate"],
    "response": "Levin is humiliated and longs for his estate.",
    "tom_dimension": "emotion",
}


def handler(call: FakeCall) -> FakeOutput:
    if "[Bonus Points]" in call.user:
        return covering(1, n=2)
    return defects()


def make_app(tmp_path: Path, grader: Grader | None = None) -> FastAPI:
    settings = Settings(cache_dir=tmp_path / "cache", data_dir=tmp_path / "data")
    return create_app(settings, grader=grader, poll_seconds=0.05, lease_seconds=5.0)


def fake_grader(tmp_path: Path) -> Grader:
    return Grader(
        JudgeConfig(model="fake/judge", metrics=("coverage", "defects")),
        provider=FakeProvider(handler=handler),
        cache=JudgeCache(tmp_path / "cache"),
    )


def wait_done(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if status["status"] in ("done", "cancelled", "failed"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.02)


def test_a_full_disk_costs_the_cache_not_the_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cache"

    def disk_full(self: diskcache.Cache, *args: Any, **kwargs: Any) -> bool:
        raise OSError(28, "No space left on device", str(folder / "cache.db"))

    app = make_app(tmp_path, fake_grader(tmp_path))
    bodies: list[str] = []
    with TestClient(app) as client:
        monkeypatch.setattr(diskcache.Cache, "set", disk_full)
        graded = client.post("/v1/grade", json=ITEM)  # today: 503 cache_unavailable + the path
        bodies.append(graded.text)
        assert graded.status_code == 200, graded.text
        assert graded.json()["status"] == "scored"

        created = client.post("/v1/jobs", json={"items": [ITEM, {**ITEM, "id": "item-2"}]})
        bodies.append(created.text)
        status = wait_done(client, created.json()["id"])
        bodies.append(str(status))
        assert (status["status"], status["scored"]) == ("done", 2)

        ready = client.get("/readyz")
        bodies.append(ready.text)
        assert ready.status_code == 200
        body = ready.json()
        assert body["ready"] is True and body["degraded"] is True
        assert body["checks"]["cache"]["ok"] is True
        errors = app.state.grader.cache.errors
        assert errors >= 6  # 3 items x 2 judge calls, and the readiness probe
        assert body["checks"]["cache"]["detail"].startswith(f"degraded: {errors} cache error(s)")

        metrics = client.get("/metrics").text
        assert f"bonusjudge_cache_errors_total {float(errors)}" in metrics
    for text in bodies:
        assert str(tmp_path) not in text


def test_a_corrupt_database_at_start_is_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "cache.db").write_bytes(b"not a database\n" * 500)
    app = make_app(tmp_path, fake_grader(tmp_path))  # today: CacheError before the app exists
    with TestClient(app) as client:
        assert client.post("/v1/grade", json=ITEM).status_code == 200
        body = client.get("/readyz").json()
        assert body["ready"] is True and body["degraded"] is True
        assert "cache writable now" in body["checks"]["cache"]["detail"]
        assert str(tmp_path) not in str(body)
    assert list(folder.glob("cache.db.corrupt-*"))


def test_a_healthy_cache_is_not_degraded(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path, fake_grader(tmp_path))) as client:
        body = client.get("/readyz").json()
    assert body["degraded"] is False
    assert body["checks"]["cache"] == {"ok": True, "detail": "writable"}
