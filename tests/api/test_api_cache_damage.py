"""The service with a damaged cache (issue 15 item 2): it grades, says so on /readyz, leaks no path.

A full disk is simulated under diskcache (its ``Cache.set`` raises the OSError the OS would, with
the file name in it, as the OS's does); a corrupt ``cache.db`` is written for real before start.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import diskcache
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from judge.engine import Grader

ITEM = {
    "id": "item-1",
    "question": "How does Levin feel after Kitty refuses him?",
    "reference": "He feels humiliated and hurt, and wants to go back to his estate.",
    "bonus_points": ["Levin feels humiliated and hurt", "He wants to return to his estate"],
    "response": "Levin is humiliated and longs for his estate.",
    "tom_dimension": "emotion",
}


@pytest.fixture
def app(make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]) -> FastAPI:
    """The service over the fake judge, grading coverage and defects."""
    return make_app(make_grader(metrics=("coverage", "defects")))


def wait_done(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if status["status"] in ("done", "cancelled", "failed"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.02)


def test_a_full_disk_costs_the_cache_not_the_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app: FastAPI
) -> None:
    folder = tmp_path / "cache"

    def disk_full(self: diskcache.Cache, *args: Any, **kwargs: Any) -> bool:
        raise OSError(28, "No space left on device", str(folder / "cache.db"))

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
        errors = app.state.grader.caller.cache.errors
        assert errors >= 6  # 3 items x 2 judge calls, and the readiness probe
        assert body["checks"]["cache"]["detail"].startswith(f"degraded: {errors} cache error(s)")

        metrics = client.get("/metrics").text
        assert f"bonusjudge_cache_errors_total {float(errors)}" in metrics
    for text in bodies:
        assert str(tmp_path) not in text


def test_a_corrupt_database_at_start_is_replaced(
    tmp_path: Path, make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "cache.db").write_bytes(b"not a database\n" * 500)
    # today: CacheError before the app exists
    app = make_app(make_grader(metrics=("coverage", "defects")))
    with TestClient(app) as client:
        assert client.post("/v1/grade", json=ITEM).status_code == 200
        body = client.get("/readyz").json()
        # Replaced and writable again: not degraded (it said so until restart), the error kept.
        assert body["ready"] is True and body["degraded"] is False
        assert body["checks"]["cache"]["detail"] == "writable (1 cache error(s) since start)"
        assert str(tmp_path) not in str(body)
    assert list(folder.glob("cache.db.corrupt-*"))


def test_a_healthy_cache_is_not_degraded(app: FastAPI) -> None:
    with TestClient(app) as client:
        body = client.get("/readyz").json()
    assert body["degraded"] is False
    assert body["checks"]["cache"] == {"ok": True, "detail": "writable"}


def test_one_transient_cache_error_is_degraded_then_ok(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(self: diskcache.Cache, *args: Any, **kwargs: Any) -> bool:
        raise OSError(28, "No space left on device")

    with TestClient(app) as client:
        assert client.get("/readyz").json()["degraded"] is False
        monkeypatch.setattr(diskcache.Cache, "set", disk_full)
        assert client.post("/v1/grade", json=ITEM).status_code == 200  # its writes fail
        assert client.get("/readyz").json()["degraded"] is True
        monkeypatch.undo()  # the disk has room again
        body = client.get("/readyz").json()
        # What is true now: writable again (it said degraded until restart, before ac1a443).
        assert body["ready"] is True and body["degraded"] is False, body
        assert "cache error(s) since start" in body["checks"]["cache"]["detail"]
