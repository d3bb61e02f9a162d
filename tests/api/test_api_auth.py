"""API keys: 401 without one, digests at rest, jobs owned by the key that made them."""

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.deps import get_settings
from api.serve import check_bind, is_loopback
from api.settings import ServiceSettings
from core.errors import ConfigError
from tests.helpers.engine import levin_item

ITEM = levin_item(bonus_points=["Levin feels humiliated"])
KEY_A = "key-a-0123456789"
KEY_B = "key-b-9876543210"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def client(make_app: Callable[..., FastAPI]) -> Iterator[TestClient]:
    # One key given in plain text (hashed on load), one as its digest.
    keys = [KEY_A, "sha256:" + hashlib.sha256(KEY_B.encode()).hexdigest()]
    with TestClient(make_app(api_keys=keys)) as test_client:
        yield test_client


def test_keys_are_kept_as_digests(client: TestClient) -> None:
    app = client.app
    assert isinstance(app, FastAPI)
    settings = app.state.settings
    assert KEY_A not in settings.model_dump_json()
    assert hashlib.sha256(KEY_A.encode()).hexdigest() in settings.api_keys


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/v1/grade"), ("post", "/v1/grade/batch"), ("post", "/v1/jobs"),
        ("get", "/v1/jobs/x"), ("get", "/v1/jobs/x/results"), ("delete", "/v1/jobs/x"),
        ("post", "/v1/metrics"), ("post", "/v1/bonus-points"), ("get", "/v1/rubrics"),
        ("get", "/v1/rubrics/chartom-coverage"), ("get", "/metrics"),
    ],
)
def test_every_route_but_health_needs_a_key(client: TestClient, method: str, path: str) -> None:
    body = ITEM if method == "post" else None
    for headers in ({}, auth("wrong-key"), {"Authorization": f"Basic {KEY_A}"}):
        response = client.request(method.upper(), path, headers=headers, json=body)
        assert response.status_code == 401, (path, headers)
        assert response.json()["error"]["type"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
        assert "wrong-key" not in response.text


def test_health_needs_no_key(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200


def test_valid_keys_work(client: TestClient) -> None:
    for key in (KEY_A, KEY_B):
        response = client.post("/v1/grade", json=ITEM, headers=auth(key))
        assert response.status_code == 200


OPERATOR = "operator-key-555555"


def test_metrics_is_the_operators_not_a_tenants(make_app: Callable[..., FastAPI]) -> None:
    # /metrics counts every key's jobs, tokens, cost and cache hits: a tenant must not read it.
    app = make_app(api_keys=[KEY_A, KEY_B], operator_keys=[OPERATOR])
    with TestClient(app) as client:
        assert client.post("/v1/grade", json=ITEM, headers=auth(KEY_B)).status_code == 200
        for key in (KEY_A, KEY_B):
            refused = client.get("/metrics", headers=auth(key))
            assert refused.status_code == 403, refused.text  # today: 200, every key's counters
            error = refused.json()["error"]
            assert error["type"] == "forbidden" and "operator key" in error["message"]
            assert "bonusjudge_" not in refused.text
        scraped = client.get("/metrics", headers=auth(OPERATOR))
        assert scraped.status_code == 200 and "bonusjudge_http_requests" in scraped.text
        # An operator key is no tenant: it grades nothing.
        assert client.post("/v1/grade", json=ITEM, headers=auth(OPERATOR)).status_code == 401
        assert OPERATOR not in app.state.settings.model_dump_json()
        for headers in ({}, auth("wrong-key")):
            assert client.get("/metrics", headers=headers).status_code == 401


def test_metrics_without_an_operator_key_is_closed_to_tenants(
    make_app: Callable[..., FastAPI],
) -> None:
    with TestClient(make_app(api_keys=[KEY_A])) as client:
        assert client.get("/metrics", headers=auth(KEY_A)).status_code == 403


def test_metrics_with_no_key_of_either_kind_stays_open(make_app: Callable[..., FastAPI]) -> None:
    with TestClient(make_app()) as client:  # loopback development: today's behaviour
        assert client.get("/metrics").status_code == 200
    with TestClient(make_app(operator_keys=[OPERATOR])) as client:
        assert client.post("/v1/grade", json=ITEM).status_code == 200
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=auth(OPERATOR)).status_code == 200


def test_jobs_of_one_key_are_invisible_to_another(client: TestClient) -> None:
    created = client.post("/v1/jobs", json={"items": [ITEM]}, headers=auth(KEY_A))
    assert created.status_code == 202
    job_id = created.json()["id"]
    assert client.get(f"/v1/jobs/{job_id}", headers=auth(KEY_A)).status_code == 200
    for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/results", f"/v1/jobs/{job_id}/summary"):
        response = client.get(path, headers=auth(KEY_B))
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "not_found"
    assert client.delete(f"/v1/jobs/{job_id}", headers=auth(KEY_B)).status_code == 404
    assert client.get(f"/v1/jobs/{job_id}", headers=auth(KEY_A)).json()["status"] != "cancelled"


def test_settings_dependency_can_be_overridden(
    tmp_path: Path, make_app: Callable[..., FastAPI]
) -> None:
    app = make_app()
    with TestClient(app) as client:
        assert client.post("/v1/grade", json=ITEM).status_code == 200
        locked = ServiceSettings(cache_dir=tmp_path / "cache", data_dir=tmp_path / "data",
                          api_keys=[KEY_A])
        app.dependency_overrides[get_settings] = lambda: locked
        assert client.post("/v1/grade", json=ITEM).status_code == 401
        assert client.post("/v1/grade", json=ITEM, headers=auth(KEY_A)).status_code == 200


def test_an_override_holds_for_its_own_app_only(
    tmp_path: Path, make_app: Callable[..., FastAPI]
) -> None:
    # The apps of a process share their route objects (api.app builds them once): an override
    # set on one app must not reach another one serving beside it.
    first, second = make_app(), make_app()
    locked = ServiceSettings(
        cache_dir=tmp_path / "cache", data_dir=tmp_path / "data", api_keys=[KEY_A]
    )
    first.dependency_overrides[get_settings] = lambda: locked
    with TestClient(first) as one, TestClient(second) as other:
        assert one.post("/v1/grade", json=ITEM).status_code == 401
        assert other.post("/v1/grade", json=ITEM).status_code == 200
        assert one.post("/v1/grade", json=ITEM, headers=auth(KEY_A)).status_code == 200


def test_cors_is_off_by_default_and_configurable(make_app: Callable[..., FastAPI]) -> None:
    preflight = {"Origin": "https://ui.example", "Access-Control-Request-Method": "POST"}
    with TestClient(make_app()) as client:
        response = client.options("/v1/grade", headers=preflight)
        assert "access-control-allow-origin" not in response.headers
    with TestClient(make_app(cors_origins=["https://ui.example"])) as client:
        response = client.options("/v1/grade", headers=preflight)
        assert response.headers["access-control-allow-origin"] == "https://ui.example"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.0.0.2", True),
     ("0.0.0.0", False), ("192.168.1.4", False), ("example.com", False), ("::", False)],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_public_bind_needs_a_key(tmp_path: Path) -> None:
    open_settings = ServiceSettings(cache_dir=tmp_path, data_dir=tmp_path)
    with pytest.raises(ConfigError) as caught:
        check_bind(open_settings, "0.0.0.0")
    assert caught.value.field == "host"
    check_bind(open_settings, "127.0.0.1")
    check_bind(ServiceSettings(cache_dir=tmp_path, data_dir=tmp_path, api_keys=[KEY_A]), "0.0.0.0")
