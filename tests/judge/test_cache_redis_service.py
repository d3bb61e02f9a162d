"""The service on a shared Redis cache: ``create_app`` builds its cache from ``cache_url``.

Two apps (two graders, as two replicas behind a load balancer would be) share one real Redis
server: what one graded, the other serves from the cache without asking the judge (the shipped
OpenAI stand-in, which counts requests). A Redis that is not there leaves the service ready and
grading, with the cache reported degraded.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import ServiceSettings
from core.processes import free_port
from judge.cache import RedisCache
from judge.config import JudgeConfig
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import cli_env
from tests.helpers.redis_server import RedisServer

ITEM = {
    "id": "levin-1",
    "question": "How does Levin feel right after Kitty refuses him?",
    "reference": "He feels humiliated and wants to go back to his estate.",
    "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
    "response": "He is ashamed and longs to flee to the countryside.",
    "tom_dimension": "emotion",
}


@pytest.fixture
def url(redis_url: str) -> Generator[str, None, None]:
    """The session server, on a database of its own (emptied before the test)."""
    db_url = redis_url.rsplit("/", 1)[0] + "/15"
    client = redis.Redis.from_url(db_url)
    client.flushdb()
    client.close()
    yield db_url


@pytest.fixture(scope="module")
def judge() -> Generator[OpenAIStandIn, None, None]:
    with OpenAIStandIn() as server:
        yield server


def settings(tmp_path: Path, name: str, cache_url: str, judge: OpenAIStandIn) -> ServiceSettings:
    return ServiceSettings(
        cache_dir=tmp_path / name / "cache",
        data_dir=tmp_path / name / "data",
        cache_url=cache_url,
        judge=JudgeConfig(
            model="openai/standin", api_base=judge.base_url, metrics=("coverage", "defects")
        ),
    )


def test_two_replicas_share_one_redis(tmp_path: Path, url: str, judge: OpenAIStandIn) -> None:
    first_app = create_app(settings(tmp_path, "a", url, judge), poll_seconds=0.05)
    second_app = create_app(settings(tmp_path, "b", url, judge), poll_seconds=0.05)
    assert isinstance(first_app.state.grader.caller.cache, RedisCache)
    with TestClient(first_app) as first, TestClient(second_app) as second:
        ready = first.get("/readyz")
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["ready"] and not body["degraded"]
        assert body["checks"]["cache"] == {"ok": True, "detail": "writable"}

        before = judge.stats().requests
        graded = first.post("/v1/grade", json=ITEM)
        assert graded.status_code == 200, graded.text
        assert judge.stats().requests == before + 2  # coverage and defects
        assert not any(call["cached"] for call in graded.json()["provenance"]["calls"])

        served = second.post("/v1/grade", json=ITEM)
        assert served.status_code == 200, served.text
        assert judge.stats().requests == before + 2  # the other replica asked no judge
        assert all(call["cached"] for call in served.json()["provenance"]["calls"])
        assert served.json()["coverage"] == graded.json()["coverage"]
        assert second_app.state.grader.caller.cache.stats.hits == 2
        assert second_app.state.grader.stats.cache_hits == 2
    # The folders were never the cache.
    assert not (tmp_path / "a" / "cache" / "cache.db").exists()
    assert not (tmp_path / "b" / "cache" / "cache.db").exists()


def test_a_redis_that_is_not_there_leaves_the_service_ready_and_degraded(
    tmp_path: Path, judge: OpenAIStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    with caplog.at_level(logging.WARNING, logger="bonusjudge.cache"):
        app = create_app(settings(tmp_path, "a", nowhere, judge), poll_seconds=0.05)
    assert any("cannot reach the Redis cache" in r.getMessage() for r in caplog.records)
    with TestClient(app) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["ready"] and body["degraded"]
        cache_check = body["checks"]["cache"]
        assert cache_check["ok"] and "not writable now" in cache_check["detail"]
        assert "hunter2" not in ready.text and "127.0.0.1" not in ready.text

        before = judge.stats().requests
        graded = client.post("/v1/grade", json=ITEM)
        assert graded.status_code == 200, graded.text
        assert graded.json()["status"] == "scored"
        assert judge.stats().requests == before + 2
        metrics = client.get("/metrics").text
        errors = [line for line in metrics.splitlines()
                  if line.startswith("bonusjudge_cache_errors")]
        assert errors and float(errors[0].split()[-1]) >= 2  # the start and the probe


@pytest.mark.process
def test_bonusjudge_serve_stops_at_a_redis_refusing_the_password(tmp_path: Path) -> None:
    # Before: the service started ready and graded uncached forever, paying for every call.
    with RedisServer(password="s3cret") as server:
        wrong = server.url.replace("s3cret", "wrong")
        started = subprocess.run(
            [sys.executable, "-m", "cli", "serve", "--port", str(free_port()),
             "--cache-url", wrong],
            capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
            env=cli_env({"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}), check=False,
        )
    assert started.returncode == 2, started.stderr[-3000:]
    last = started.stderr.strip().splitlines()[-1]
    assert last.startswith("bonusjudge: error: invalid setting cache_url:"), last
    assert "refused the credentials" in last and "wrong" not in started.stderr
