"""Security of the service: keys hashed at rest and compared in constant time, no secret in any
response or log line (even when the provider fails), CORS off, jobs isolated per key, and no
unauthenticated service on a public interface.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import JOBS_DB
from api.settings import ServiceSettings
from core.processes import free_port
from judge.engine import Grader
from judge.providers.litellm import LiteLLMProvider
from standins.openai_server import FaultPlan, OpenAIStandIn
from tests.helpers.engine import levin_item
from tests.helpers.faults import RecordingSleep

ROOT = Path(__file__).resolve().parents[2]
PROVIDER_SECRET = "sk-PROVIDER-SECRET-93f1c2"
KEY_A = "client-key-A-SECRET-5d0e"
KEY_B = "client-key-B-SECRET-77aa"
SECRETS = (PROVIDER_SECRET, KEY_A, KEY_B)
ITEM = levin_item()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def wait_done(client: TestClient, job_id: str, key: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=auth(key)).json()
        if status["status"] in ("done", "failed", "cancelled"):
            return status
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


# -- keys at rest and in comparison ---------------------------------------------------------------


def test_keys_are_hashed_at_rest_everywhere_the_service_writes(
    tmp_path: Path, make_app: Callable[..., FastAPI]
) -> None:
    from api.serve import write_settings_file

    settings = ServiceSettings(
        cache_dir=tmp_path / "cache", data_dir=tmp_path / "data", api_keys=[KEY_A, KEY_B]
    )
    digest_a = hashlib.sha256(KEY_A.encode()).hexdigest()
    assert digest_a in settings.api_keys
    assert not any(key in settings.model_dump_json() + repr(settings) for key in (KEY_A, KEY_B))
    path = write_settings_file(settings)
    assert path.stat().st_mode & 0o777 == 0o600
    assert KEY_A not in path.read_text() and digest_a in path.read_text()
    with TestClient(make_app(api_keys=[KEY_A, KEY_B])) as client:
        created = client.post("/v1/jobs", json={"items": [ITEM]}, headers=auth(KEY_A))
        assert created.status_code == 202
        wait_done(client, created.json()["id"], KEY_A)
    # The jobs database knows the owner by digest only.
    db_bytes = b"".join(p.read_bytes() for p in (tmp_path / "data").glob(f"{JOBS_DB}*"))
    assert KEY_A.encode() not in db_bytes
    with sqlite3.connect(tmp_path / "data" / JOBS_DB) as db:
        owners = {row[0] for row in db.execute("SELECT owner FROM jobs")}
    assert owners == {digest_a}


def test_key_comparison_is_constant_time_over_every_digest(
    make_app: Callable[..., FastAPI], monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [KEY_A, KEY_B, "third-key", "fourth-key"]
    seen: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        seen.append((a, b))
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", spy)  # api.auth calls it through the module
    with TestClient(make_app(api_keys=keys)) as client:
        for key, status in ((KEY_A, 200), ("not-a-key", 401), (keys[-1], 200)):
            seen.clear()
            response = client.post("/v1/grade", json=ITEM, headers=auth(key))
            assert response.status_code == status
            # Every configured digest is compared (no early exit), always digest to digest:
            # the raw key never reaches a comparison, so its length and prefix leak nothing.
            assert len(seen) == len(keys)
            assert all(len(a) == len(b) == 64 for a, b in seen)
            assert all(key not in (a, b) for a, b in seen)


# -- no secrets in responses or logs --------------------------------------------------------------


@pytest.fixture
def secret_service(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> Iterator[tuple[TestClient, OpenAIStandIn]]:
    plan = FaultPlan(
        sequence=["server_error", "rate_limit", "reset", "malformed_json", "invalid", "empty"]
    )
    with OpenAIStandIn(faults=plan, record_requests=1_000) as srv:
        grader = make_grader(
            LiteLLMProvider(),
            model="openai/standin",
            api_base=srv.base_url,
            api_key=PROVIDER_SECRET,
            metrics=("coverage", "defects", "rouge_l"),
            retries=1,
            reasks=1,
            # What the service writes is the point, not when: retries do not wait their back-off.
            sleep=RecordingSleep(),
        )
        app = make_app(grader, judge=grader.config, api_keys=[KEY_A, KEY_B], lease_seconds=30.0)
        with TestClient(app) as client:
            yield client, srv


def test_no_secret_in_any_response_or_log_line(
    secret_service: tuple[TestClient, OpenAIStandIn],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    client, srv = secret_service
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []

    def call(method: str, path: str, key: str | None = KEY_A, **kw: Any) -> Any:
        headers = kw.pop("headers", {}) | (auth(key) if key else {})
        response = client.request(method, path, headers=headers, **kw)
        seen.append(f"{response.status_code} {dict(response.headers)} {response.text}")
        return response

    # Judge calls that fail in every way (5xx, 429, reset, bad JSON, invalid, empty) and recover.
    for _ in range(3):
        assert call("POST", "/v1/grade", json=ITEM).status_code == 200
    call("POST", "/v1/grade/batch", json={"items": [ITEM, {"question": 1}]})
    job = call("POST", "/v1/jobs", json={"items": [ITEM, ITEM | {"id": "b"}]}).json()
    wait_done(client, job["id"], KEY_A)
    for path in (f"/v1/jobs/{job['id']}/results", f"/v1/jobs/{job['id']}/summary"):
        call("GET", path)
    call("POST", "/v1/bonus-points", json={"question": "Why?", "reference": "Pride."})
    call("POST", "/v1/metrics", json={"pairs": [{"response": "a", "reference": "b"}],
                                       "metrics": ["rouge_l"]})  # fmt: skip
    for path in ("/v1/rubrics", "/v1/rubrics/chartom-coverage", "/metrics", "/readyz",
                 "/healthz", "/openapi.json", "/docs"):  # fmt: skip
        call("GET", path)
    # Errors: a wrong key, the right key in the wrong scheme, bad input, unknown things.
    call("GET", "/v1/rubrics", key=None, headers={"Authorization": f"Basic {KEY_A}"})
    call("GET", "/v1/rubrics", key=f"{KEY_A}x")
    call("POST", "/v1/grade", json={**ITEM, "judge": {"model": "evil/model"}})
    call("POST", "/v1/grade", content=b"{not json", headers={"content-type": "application/json"})
    call("GET", "/v1/jobs/nope")
    assert srv.stats().requests > 6  # the provider really was called (with the key)

    captured = capfd.readouterr()
    logs = [record.getMessage() for record in caplog.records]
    logs += [str(record.args) for record in caplog.records]
    everything = "\n".join([*seen, *logs, captured.out, captured.err])
    for secret in SECRETS:
        assert secret not in everything, f"{secret[:12]}... leaked"
    assert not any(PROVIDER_SECRET in json.dumps(body) for body in srv.requests)


def test_provider_key_is_not_in_results_or_provenance(
    secret_service: tuple[TestClient, OpenAIStandIn],
) -> None:
    client, _ = secret_service
    result = client.post("/v1/grade", json=ITEM, headers=auth(KEY_A)).json()
    text = json.dumps(result)
    assert PROVIDER_SECRET not in text and "api_key" not in text
    assert result["provenance"]["judge"] == "openai/standin"


# -- CORS and job isolation -----------------------------------------------------------------------


def test_cors_is_off_by_default(make_app: Callable[..., FastAPI]) -> None:
    with TestClient(make_app()) as client:
        preflight = client.options(
            "/v1/grade",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        simple = client.post("/v1/grade", json=ITEM, headers={"Origin": "https://evil.example"})
    for response in (preflight, simple):
        assert not any(h.startswith("access-control-") for h in response.headers)


def test_one_key_cannot_read_or_cancel_another_keys_job(make_app: Callable[..., FastAPI]) -> None:
    with TestClient(make_app(api_keys=[KEY_A, KEY_B])) as client:
        job = client.post("/v1/jobs", json={"items": [ITEM] * 3}, headers=auth(KEY_A)).json()
        job_id = job["id"]
        # Ids are unguessable (not sequential).
        other = client.post("/v1/jobs", json={"items": [ITEM]}, headers=auth(KEY_A)).json()["id"]
        assert len(job_id) >= 32 and job_id != other
        for method, path in (
            ("GET", f"/v1/jobs/{job_id}"),
            ("GET", f"/v1/jobs/{job_id}/results"),
            ("GET", f"/v1/jobs/{job_id}/results?offset=0"),
            ("GET", f"/v1/jobs/{job_id}/summary"),
            ("DELETE", f"/v1/jobs/{job_id}"),
        ):
            response = client.request(method, path, headers=auth(KEY_B))
            assert response.status_code == 404, (method, path)
            # Indistinguishable from a job that does not exist.
            missing = client.request(method, path.replace(job_id, "0" * 32), headers=auth(KEY_B))
            assert response.json()["error"]["type"] == missing.json()["error"]["type"]
        done = wait_done(client, job_id, KEY_A)
        assert done["status"] == "done" and done["done"] == 3  # B's cancel did nothing
        lines = client.get(f"/v1/jobs/{job_id}/results", headers=auth(KEY_A)).text.splitlines()
        assert len(lines) == 3


# -- binding --------------------------------------------------------------------------------------


@pytest.mark.process
def test_serve_refuses_a_public_address_without_a_key(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "BONUSJUDGE_CACHE_DIR": str(tmp_path / "cache"),
        "PROVIDER_KEY_FOR_TEST": PROVIDER_SECRET,
    }
    env.pop("BONUSJUDGE_API_KEYS", None)
    env.pop("BONUSJUDGE_SETTINGS_FILE", None)
    for host in ("0.0.0.0",):  # "::" and host names: see is_loopback's table in test_api_auth
        done = subprocess.run(
            [sys.executable, "-m", "cli", "serve", "--host", host, "--port", str(port),
             "--model", "openai/x", "--api-key-env", "PROVIDER_KEY_FOR_TEST"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr[-2000:]
        assert "refusing to listen" in done.stderr and "[host]" in done.stderr
        assert PROVIDER_SECRET not in done.stdout + done.stderr
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing is listening
    # ServiceSettings written for workers (if any) are private to the user.
    for written in (tmp_path / "cache").rglob("serve-settings.json"):
        assert written.stat().st_mode & 0o077 == 0
