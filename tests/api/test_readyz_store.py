"""``/readyz`` reports the job store as it is now (issue 31 part 5).

An attack run found ``/readyz`` ready while the job store was down (Postgres killed) or full
(SQLite) and every job route answered 503. Here a real PostgreSQL is stopped under the service
and started again, and a real ``bonusjudge serve`` fills its SQLite store (``test_rel_full_store``
shows how).
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.services.health import STORE_CHECK_TTL
from core.processes import free_port
from tests.helpers.postgres_server import LocalPostgres

ITEM = {"question": "Q?", "reference": "A reference.", "response": "An answer."}


def ready_store(client: TestClient) -> tuple[int, dict[str, Any]]:
    """``/readyz``'s status and its store check, a check's lifetime after the last one."""
    time.sleep(STORE_CHECK_TTL + 0.1)
    answer = client.get("/readyz")
    return answer.status_code, answer.json()["checks"]["store"]


@pytest.mark.process
def test_a_killed_postgres_makes_readyz_say_so_and_a_restart_makes_it_ready(
    make_app: Callable[..., FastAPI],
) -> None:
    with tempfile.TemporaryDirectory(prefix="bonusjudge-pg-") as scratch:
        os.chmod(scratch, 0o711)  # the unprivileged server account (under root) reaches its data
        server = LocalPostgres(Path(scratch) / "data", port=free_port(),
                               password=secrets.token_hex(8))
        killed_then_restarted(server, make_app)


def killed_then_restarted(server: LocalPostgres, make_app: Callable[..., FastAPI]) -> None:
    """The service on ``server``'s store: ready, then not once it is killed, then ready again."""
    with server:
        app = make_app(jobs_url=server.url, warm_up=False)
        with TestClient(app) as client:
            status, store = ready_store(client)
            assert status == 200 and store == {"ok": True, "detail": "postgres: writable"}
            assert server.process is not None
            server.process.kill()  # SIGKILL: connections drop, nothing is shut down cleanly
            server.process.wait(10)
            started = time.monotonic()
            status, store = ready_store(client)
            # today: 200, "ready": true, while POST /v1/jobs answers 503
            assert status == 503 and not store["ok"], store
            assert store["detail"].startswith("store_unavailable: the postgres job store")
            assert server.url.split("@")[-1] not in store["detail"]
            assert time.monotonic() - started < 5  # within the check's timeout (2 s), not hung
            assert client.post("/v1/jobs", json={"items": [ITEM]}).status_code == 503
            server.process = None
            server.start()  # the same folder and port
            deadline = time.monotonic() + 30
            while (status := ready_store(client)[0]) != 200:
                assert time.monotonic() < deadline, "never ready again after the restart"
            assert client.post("/v1/jobs", json={"items": [ITEM]}).status_code == 202


def test_a_probe_flood_costs_the_store_one_check_a_second(
    make_app: Callable[..., FastAPI], monkeypatch: pytest.MonkeyPatch
) -> None:
    import api.services.health as health

    probes: list[float] = []
    real = health._probe_store

    def counted(store: Any) -> Any:
        probes.append(time.monotonic())
        return real(store)

    monkeypatch.setattr(health, "_probe_store", counted)
    with TestClient(make_app(warm_up=False)) as client:
        started = time.monotonic()
        answers = [client.get("/readyz") for _ in range(200)]
        took = time.monotonic() - started
    assert {a.status_code for a in answers} == {200}
    assert answers[0].json()["checks"]["store"] == {"ok": True, "detail": "sqlite: writable"}
    assert len(probes) <= took / STORE_CHECK_TTL + 1, (len(probes), took)
