"""A job store that cannot be written answers 503 saying why (issue 40, service point 3).

Every failure of the job store was answered ``503 store_unavailable`` "the job store cannot be
written right now (e.g. its disk is full)", for a SQLite file another process keeps locked and
for a Postgres server that is down alike: an operator sent to free disk space found a full disk
nowhere. The code stays ``store_unavailable``; the message names the cause. Here on a real
``bonusjudge serve``: its SQLite store locked by another process (``sqlite_write_lock``), and its
Postgres store (pgserver's PostgreSQL) stopped under it. The causes read from driver errors are
tested in ``tests/api/jobs/test_store_failures.py``.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.jobs import JOBS_DB
from api.jobs.sqlite import BUSY_TIMEOUT_S
from core.processes import free_port
from tests.helpers.postgres_server import LocalPostgres
from tests.helpers.processes import ServiceProcess, sqlite_write_lock

pytestmark = pytest.mark.process

ITEM = {"id": "levin-1", "question": "How does Levin feel?", "reference": "He feels humiliated.",
        "response": "He is ashamed."}


def submit(http: httpx.Client) -> httpx.Response:
    """``POST /v1/jobs`` with one item, as a user submits it."""
    return http.post("/v1/jobs", json={"items": [ITEM]})


def refusal(answer: httpx.Response) -> str:
    """The message of a 503 ``store_unavailable`` answer (asserted to be one)."""
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "10"
    error: dict[str, Any] = answer.json()["error"]
    assert error["type"] == "store_unavailable", error
    return str(error["message"])


def test_a_store_locked_by_another_process_answers_503_saying_it_is_locked(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with ServiceProcess(["--metrics", "rouge_l", "--cache-dir", str(tmp_path / "cache")],
                        tmp_path, ready=False, env={"BONUSJUDGE_DATA_DIR": str(data)}) as svc, \
            httpx.Client(base_url=svc.url, timeout=120) as http:
        assert submit(http).status_code == 202
        # Held well past the writer's wait for the lock (BUSY_TIMEOUT_S, 10 s).
        with sqlite_write_lock(data / JOBS_DB, BUSY_TIMEOUT_S + 8):
            message = refusal(submit(http))
        # It said "the job store cannot be written right now (e.g. its disk is full)".
        assert message.startswith("the sqlite job store is locked: another process"), message
        assert "full" not in message and "disk" not in message, message
        assert str(data) not in message
        assert submit(http).status_code == 202  # the lock released, it is written again


def test_a_postgres_store_that_is_down_answers_503_saying_it_cannot_be_reached(
    tmp_path: Path,
) -> None:
    with tempfile.TemporaryDirectory(prefix="bonusjudge-pg-") as scratch:
        os.chmod(scratch, 0o711)  # the unprivileged server account (under root) reaches its data
        server = LocalPostgres(Path(scratch) / "data", port=free_port(),
                               password=secrets.token_hex(8))
        with server, ServiceProcess(
            ["--metrics", "rouge_l", "--cache-dir", str(tmp_path / "cache"),
             "--jobs-url", server.url], tmp_path, ready=False,
        ) as svc, httpx.Client(base_url=svc.url, timeout=120) as http:
            assert submit(http).status_code == 202
            server.stop()  # the database is down, the service up
            message = refusal(submit(http))
            ready = http.get("/readyz").json()["checks"]["store"]
        url = server.url
    # It said "the job store cannot be written right now (e.g. its disk is full)".
    assert message.startswith("the postgres job store cannot be reached"), message
    assert "full" not in message and "disk" not in message, message
    assert ready["detail"].startswith("store_unavailable: the postgres job store cannot be "
                                      "reached"), ready
    for secret in (url, url.split("@")[-1], url.split(":")[2].split("@")[0]):
        assert secret not in message and secret not in ready["detail"]
