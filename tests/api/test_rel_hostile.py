"""Hostile requests (issue 15, items 1 and 7): invented methods and unknown paths cannot grow the
metrics, a NUL byte in a report file name is a 404, context windows outside CharToM's are refused,
the service's files are private to its user whatever the umask, and uvicorn's connection limits
are set.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import stat
import string
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from uvicorn.importer import import_from_string
from uvicorn.protocols.http.h11_impl import H11Protocol

from api.app import JOBS_DB
from api.jobs import JobStore
from api.observability import HTTP_METHODS
from api.serve import KEEP_ALIVE_SECONDS, MAX_HEADER_BYTES, uvicorn_options, write_settings_file
from api.settings import ServiceSettings
from judge.cache import JudgeCache
from judge.config import JudgeConfig
from judge.engine import Grader
from tests.helpers.processes import ServiceProcess

KEY = "hostile-test-key-1"
AUTH = {"Authorization": f"Bearer {KEY}"}
OPERATOR = "hostile-test-operator-1"
"""The operator key that reads ``/metrics`` (a tenant's key gets 403 there)."""
SCRAPE = {"Authorization": f"Bearer {OPERATOR}"}
CHARTOM = {
    "id": "ct-1", "question": "What does Elizabeth believe?",
    "answer": "She realises Wickham lied to her.",
    "bonus_points": ["Elizabeth realises Wickham deceived her"],
    "context_0": "", "context_1000": "a plot", "context_2000": "a longer plot",
    "response": "She sees Wickham lied.",
}


@pytest.fixture
def build(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> Callable[[], FastAPI]:
    """The service over the fake judge, with one key configured by its digest."""

    def app() -> FastAPI:
        grader = make_grader()
        digest = "sha256:" + hashlib.sha256(KEY.encode()).hexdigest()
        return make_app(grader, judge=grader.config, api_keys=[digest], operator_keys=[OPERATOR],
                        lease_seconds=30.0)

    return app


@pytest.fixture
def http(build: Callable[..., FastAPI]) -> Iterator[TestClient]:
    with TestClient(build(), raise_server_exceptions=False) as client:
        yield client


def invented_method(rng: random.Random) -> str:
    return "X" + "".join(rng.choices(string.ascii_uppercase, k=7))


def unknown_path(rng: random.Random) -> str:
    word = "".join(rng.choices(string.ascii_lowercase + string.digits, k=10))
    return rng.choice([f"/{word}", f"/v1/{word}/x", f"/v1/jobs/{word}", f"/static/{word}"])


def request_series(body: str) -> list[dict[str, str]]:
    """The label sets of ``bonusjudge_http_requests_total`` in a Prometheus text exposition."""
    for family in text_string_to_metric_families(body):
        if family.name == "bonusjudge_http_requests":
            return [s.labels for s in family.samples if s.name.endswith("_total")]
    raise AssertionError("no bonusjudge_http_requests in /metrics")


def route_templates(client: httpx.Client) -> set[str]:
    """The app's route templates, as its OpenAPI document and the docs pages name them."""
    paths = client.get("/openapi.json").json()["paths"]
    return {str(path) for path in paths} | {"/docs", "/redoc", "/static/docs", "/openapi.json"}


def assert_bounded(body: str, templates: set[str], sent: list[str]) -> None:
    series = request_series(body)
    methods = {labels["method"] for labels in series}
    routes = {labels["route"] for labels in series}
    assert methods <= HTTP_METHODS | {"OTHER"}, methods
    assert "OTHER" in methods
    assert routes <= templates | {"unmatched"}, routes - templates
    assert "unmatched" in routes
    # Nothing the client made up reaches the exposition, in any metric.
    assert not [word for word in sent if word in body]


# -- item 1: metric labels ----------------------------------------------------------------------


def test_invented_methods_and_unknown_paths_add_no_series(http: TestClient) -> None:
    rng = random.Random(15)
    templates = route_templates(http)
    before = len(request_series(http.get("/metrics", headers=SCRAPE).text))
    sent: list[str] = []
    # 200 requests of made-up methods and paths: a label taken from either would add ~100
    # series, five times the bound below (each request costs ~4 ms of CPU through the app).
    for n in range(100):
        method, path = invented_method(rng), unknown_path(rng)
        sent += [method, path.rsplit("/", 1)[-1] if "jobs" in path else path]
        # Without a key: the middleware records before the key check.
        answer = http.request(method, path if n % 3 else "/healthz")
        assert answer.status_code in (401, 404, 405), answer.status_code
        http.get(path)  # a real method on an unknown path
    body = http.get("/metrics", headers=SCRAPE).text
    assert_bounded(body, templates, sent)
    # A handful of series (route x method x status), not one per request.
    assert len(request_series(body)) - before < 20


@pytest.mark.process
def test_a_real_server_keeps_its_metrics_bounded_and_its_files_private(tmp_path: Path) -> None:
    digest = "sha256:" + hashlib.sha256(KEY.encode()).hexdigest()
    env = {"BONUSJUDGE_API_KEYS": json.dumps([digest]),
           "BONUSJUDGE_OPERATOR_KEYS": json.dumps([OPERATOR])}
    args = ["--metrics", "rouge_l", "--cache-dir", str(tmp_path / "svc")]
    rng = random.Random(7)
    with ServiceProcess(args, tmp_path, env=env, ready=False) as svc, httpx.Client(
        base_url=svc.url, timeout=10
    ) as client:
        templates = route_templates(client)
        sent: list[str] = []
        for n in range(200):
            method, path = invented_method(rng), unknown_path(rng)
            sent += [method, path.rsplit("/", 1)[-1]]
            client.request(method, path if n % 2 else "/healthz")
        # Raw bytes too: a method no client library would build.
        with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as raw:
            raw.sendall(b"QQQQZZZ /nowhere-zz9 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.1 ")
        sent += ["QQQQZZZ", "nowhere-zz9"]
        refused = client.get("/metrics", headers=AUTH)  # a tenant's key
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "forbidden"
        metrics = client.get("/metrics", headers=SCRAPE)
        assert metrics.status_code == 200
        assert_bounded(metrics.text, templates, sent)
        assert len(metrics.content) < 64_000, len(metrics.content)

        # A request the HTTP parser refuses never reaches the app; its 400 has the error shape
        # all the same (today: text/plain "Invalid HTTP request received.").
        for bad in (b"-1", b"12abc"):
            with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as raw:
                raw.sendall(b"POST /v1/grade HTTP/1.1\r\nHost: x\r\nContent-Type: "
                            b"application/json\r\nContent-Length: " + bad + b"\r\n\r\n{}")
                head, _, body = read_all(raw).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 "), head
            assert b"content-type: application/json" in head.lower(), head
            assert json.loads(body)["error"]["type"] == "bad_request", body

        # uvicorn's limits: an incomplete header block beyond MAX_HEADER_BYTES is refused (h11
        # checks what it buffers between reads), and idle connections are closed.
        with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as raw:
            raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
                        + b"a" * (MAX_HEADER_BYTES + 1024))
            assert raw.recv(100).split(b" ")[1] in (b"400", b"431")
        idle = KEEP_ALIVE_SECONDS + 10
        with socket.create_connection(("127.0.0.1", svc.port), timeout=idle) as raw:
            raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            started = time.monotonic()
            assert raw.recv(4096).startswith(b"HTTP/1.1 200")
            while raw.recv(4096):
                pass  # the rest of the response, then the server's close
            assert time.monotonic() - started < KEEP_ALIVE_SECONDS + 5

    # The real default data folder under the cache folder: this user only.
    cache, data = tmp_path / "svc", tmp_path / "svc" / "service"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / JOBS_DB).stat().st_mode) == 0o600
    assert stat.S_IMODE((cache / "cache.db").stat().st_mode) == 0o600


def read_all(raw: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := raw.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def test_uvicorn_runs_with_explicit_connection_limits() -> None:
    options = uvicorn_options()
    # h11 (the parser h11_max_incomplete_event_size applies to), answering in the error shape
    assert options["http"] == "api.http_protocol:ErrorShapeH11Protocol"
    assert issubclass(import_from_string(options["http"]), H11Protocol)
    assert options["timeout_keep_alive"] == KEEP_ALIVE_SECONDS <= 10
    assert options["h11_max_incomplete_event_size"] == MAX_HEADER_BYTES <= 64 * 1024


# -- item 7: report file names --------------------------------------------------------------------


def test_a_nul_byte_or_an_overlong_report_file_name_is_a_404(http: TestClient) -> None:
    answer = http.post("/v1/calibrate", json={"set": "example", "metrics": ["rouge_l"],
                                              "resamples": 100}, headers=AUTH)
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]
    deadline = time.monotonic() + 120
    while http.get(f"/v1/calibrate/{job_id}", headers=AUTH).json()["status"] in ("queued",
                                                                               "running"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    files = f"/v1/reports/{job_id}/files"
    assert http.get(f"{files}/report.json", headers=AUTH).status_code == 200
    for name in ("report.json%00.png", "%00", "mappings/%00rouge_l.json", "a" * 5000 + ".png",
                 "x/" * 3000 + "report.json"):
        answer = http.get(f"{files}/{name}", headers=AUTH)
        assert answer.status_code == 404, (name[:40], answer.status_code, answer.text[:200])
        assert answer.json()["error"]["type"] == "not_found"


# -- item 7: context windows ----------------------------------------------------------------------


@pytest.mark.parametrize("window", [5, -5, 999, 2001])
def test_a_context_window_outside_chartoms_is_refused_naming_the_field(
    http: TestClient, window: int
) -> None:
    body = (json.dumps(CHARTOM) + "\n").encode()
    answer = http.post(f"/v1/jobs?context_window={window}", content=body,
                       headers={**AUTH, "content-type": "application/x-ndjson"})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "context_window" and "0, 1000, 2000" in error["message"]
    # In the JSON body's judge selection too.
    answer = http.post("/v1/jobs", json={"items": [CHARTOM], "judge": {"context_window": window}},
                       headers=AUTH)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "judge.context_window"
    assert http.get("/v1/jobs", headers=AUTH).json()["jobs"] == []  # nothing was queued


def test_chartom_context_windows_are_still_accepted(http: TestClient) -> None:
    body = (json.dumps(CHARTOM) + "\n").encode()
    for window in (0, 1000, 2000):
        answer = http.post(f"/v1/jobs?context_window={window}&metrics=rouge_l", content=body,
                           headers={**AUTH, "content-type": "application/x-ndjson"})
        assert answer.status_code == 202, answer.text
        assert answer.json()["invalid"] == 0
    with pytest.raises(ValueError, match="context_window"):
        JudgeConfig(context_window=-5)


# -- item 7: private files ------------------------------------------------------------------------


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: without explicit modes every file would be world-readable (and writable)."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_job_store_is_private_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    store = JobStore(tmp_path / "data" / JOBS_DB)
    try:
        assert store.status_counts() is not None  # a read after the schema write
    finally:
        store.close()
    assert mode(tmp_path / "data") == 0o700
    written = [p for p in (tmp_path / "data").iterdir()]
    assert {p.name for p in written} >= {JOBS_DB}
    for path in written:  # the database and SQLite's -wal and -shm
        assert mode(path) == 0o600, (path.name, oct(mode(path)))

    # A store left world-readable by an older version is made private when opened.
    old = tmp_path / "old"
    old.mkdir(mode=0o755)
    (old / JOBS_DB).touch(mode=0o644)
    os.chmod(old, 0o755)
    os.chmod(old / JOBS_DB, 0o644)
    JobStore(old / JOBS_DB).close()
    assert mode(old) == 0o700 and mode(old / JOBS_DB) == 0o600


def test_the_cache_is_private_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    cache = JudgeCache(tmp_path / "cache")
    try:
        cache.set("small", {"x": 1})
        cache.set("large", {"x": "y" * 100_000})  # diskcache keeps this one in a file of its own
        assert cache.get("large") == {"x": "y" * 100_000}
    finally:
        cache.close()
    assert mode(tmp_path / "cache") == 0o700  # what diskcache makes inside is out of reach
    databases = list((tmp_path / "cache").glob("cache.db*"))
    assert databases
    for path in databases:
        assert mode(path) == 0o600, (path.name, oct(mode(path)))
    # Reopened, an existing cache stays usable.
    again = JudgeCache(tmp_path / "cache")
    try:
        assert again.get("small") == {"x": 1}
    finally:
        again.close()


def test_the_service_data_folder_is_private_whatever_the_umask(
    tmp_path: Path, open_umask: None, build: Callable[..., FastAPI]
) -> None:
    with TestClient(build()) as client:
        assert client.get("/healthz").status_code == 200
    assert mode(tmp_path / "data") == 0o700
    assert mode(tmp_path / "data" / JOBS_DB) == 0o600
    assert mode(tmp_path / "cache") == 0o700
    settings_file = write_settings_file(ServiceSettings(cache_dir=tmp_path / "c2"))
    assert mode(settings_file.parent) == 0o700 and mode(settings_file) == 0o600
