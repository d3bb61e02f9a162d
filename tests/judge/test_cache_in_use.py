"""A cache in use never takes the process down (issue 31 part 4), run as users run it.

An attack run truncated the live ``cache.db`` under ``bonusjudge serve`` and ``bonusjudge grade``:
both died of SIGBUS (exit 135, no log line), since SQLite read the database through a memory map
and a mapped page past the new end of the file is a bus error. Another process holding the
database's write lock froze the service: cache calls ran on its event loop, so a 75 s lock made
``/healthz`` take 73 s. Here the real CLI and ``bonusjudge serve`` grade through the OpenAI
stand-in judge while the test damages or locks their cache folder; the first test shows the
rule in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from judge.cache import JudgeCache
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess, filled_disk_cache, run_cli, sqlite_write_lock

SIZES = {"zero": lambda size: 0, "half": lambda size: size // 2}
"""How far ``cache.db`` is truncated: to nothing, or to half its size."""


def lines(count: int, tag: str) -> list[dict[str, Any]]:
    """CharToM lines (the CLI's input) with one bonus point each."""
    return [
        {"id": f"{tag}{n}", "question": f"How does Levin feel ({n})?",
         "answer": f"He feels humiliated ({n}).", "bonus_points": [f"Levin feels humiliated {n}"],
         "response": f"He is ashamed ({tag}{n}).", "tom_dimension": "emotion"}
        for n in range(count)
    ]


def requests(count: int, tag: str) -> list[dict[str, Any]]:
    """Grading requests for the service: the same items, the reference under its own name."""
    return [{"reference": line.pop("answer"), **line} for line in lines(count, tag)]


def serve_args(judge: OpenAIStandIn, folder: Path) -> list[str]:
    return ["--model", "openai/standin", "--api-base", judge.base_url,
            "--metrics", "coverage,defects", "--cache-dir", str(folder)]


def batch(service: ServiceProcess, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Grade ``items`` through ``/v1/grade/batch``; the service dying on the way fails the test."""
    try:
        answer = httpx.post(f"{service.url}/v1/grade/batch", json={"items": items}, timeout=120)
    except httpx.TransportError as exc:
        assert service.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            service.proc.wait(5)  # a process killed by a signal: its exit status says which
        pytest.fail(f"bonusjudge serve went away ({type(exc).__name__}, exit "
                    f"{service.proc.returncode}): {service.log()[-2000:]}")
    assert answer.status_code == 200, answer.text
    results = [entry["result"] for entry in answer.json()["results"]]
    assert [r["status"] for r in results] == ["scored"] * len(items), answer.text
    return results


def cached(results: list[dict[str, Any]]) -> list[bool]:
    """Whether every judge call of each result was served from the cache."""
    return [all(call["cached"] for call in r["provenance"]["calls"]) for r in results]


def wait_for(what: str, check: Any, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


async def test_a_lock_costs_one_timeout_off_the_loop_then_calls_skip_until_it_goes(
    tmp_path: Path,
) -> None:
    cache = JudgeCache(tmp_path / "cache", timeout=0.3, cooldown=0.5)
    await cache.aset("k", {"v": 1})
    assert await cache.aget("k") == {"v": 1}
    stalls: list[float] = []

    async def tick() -> None:  # how long the loop goes without running anything else
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            stalls.append(time.monotonic() - before - 0.01)

    ticker = asyncio.create_task(tick())
    other = sqlite3.connect(tmp_path / "cache" / "cache.db", isolation_level=None, timeout=30)
    other.execute("BEGIN EXCLUSIVE")  # another connection holds the write lock
    started = time.monotonic()
    await cache.aset("a", {"v": 2})  # waits at most its timeout, then is dropped
    took = time.monotonic() - started
    assert await cache.aget("k") is None  # skipped: the circuit is open
    await cache.aset("b", {"v": 3})  # skipped at once
    assert time.monotonic() - started < took + 0.1
    assert 0.25 < took < 1.0 and max(stalls) < 0.1, (took, max(stalls))
    assert cache.errors == 1 and cache.skipped == 2 and cache.stats.writes == 1
    other.rollback()  # the lock goes: after the cool-down the folder is used again
    await asyncio.sleep(0.6)
    await cache.aset("c", {"v": 4})
    assert await cache.aget("c") == {"v": 4}, cache.errors
    # ("a" may be there: its thread kept waiting for the lock after the loop gave up on it)
    ticker.cancel()
    other.close()
    await cache.aclose()


@pytest.mark.process
@pytest.mark.parametrize("size", sorted(SIZES))
def test_truncating_cache_db_under_a_cli_grade_leaves_it_grading(tmp_path: Path, size: str) -> None:
    folder = tmp_path / "cache"
    database = filled_disk_cache(folder)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines(40, "it-")))
    out = tmp_path / "out.jsonl"
    truncated = threading.Event()
    # Judge answers take 0.3 s, so 40 items at 16 at once take three rounds: the file is cut
    # when the first items are written (their cache entries wait in the write-ahead log, which
    # then says the database is larger than the file), and the later rounds look the cache up.
    with OpenAIStandIn(latency=0.3) as judge:

        def truncate_after_the_first_results() -> None:
            deadline = time.monotonic() + 120
            while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
                time.sleep(0.005)
            os.truncate(database, SIZES[size](database.stat().st_size))
            truncated.set()

        cutter = threading.Thread(target=truncate_after_the_first_results, daemon=True)
        cutter.start()
        done = run_cli(["grade", str(source), "--out", str(out),
                        "--metrics", "coverage,defects", "--cache-dir", str(folder),
                        "--model", "openai/standin", "--api-base", judge.base_url,
                        "--no-preflight", "--quiet"])
        cutter.join(5)
    assert truncated.is_set()
    # today: -7 (SIGBUS; a shell says 135), nothing in stderr
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    graded = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(o["id"] for o in graded) == sorted(f"it-{n}" for n in range(40))
    assert all(o["status"] == "scored" for o in graded)
    assert "was damaged while in use" in done.stderr, done.stderr[-2000:]


@pytest.mark.process
@pytest.mark.parametrize("size", sorted(SIZES))
def test_truncating_cache_db_under_serve_leaves_it_serving(tmp_path: Path, size: str) -> None:
    folder = tmp_path / "cache"
    database = filled_disk_cache(folder)
    env = {"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}
    with OpenAIStandIn() as judge, \
            ServiceProcess(serve_args(judge, folder), tmp_path, env=env) as service:
        batch(service, requests(5, "a"))  # the cache is open and in use
        os.truncate(database, SIZES[size](database.stat().st_size))
        batch(service, requests(30, "b"))  # today: the service dies of SIGBUS here
        assert service.proc is not None and service.proc.poll() is None
        wait_for("the damage logged", lambda: "was damaged while in use" in service.log())
        # An empty database took its place: what is graded now is cached again.
        batch(service, requests(5, "c"))
        before = judge.stats().requests
        again = batch(service, requests(5, "c"))
        assert cached(again) == [True] * 5 and judge.stats().requests == before
        assert httpx.get(f"{service.url}/healthz", timeout=10).status_code == 200


def truncate_journals(folder: Path) -> list[str]:
    """Truncate every SQLite file beside ``cache.db`` to nothing; the names of those there were."""
    cut = sorted(path.name for path in folder.glob("cache.db-*"))
    for name in cut:
        os.truncate(folder / name, 0)
    return cut


def test_a_cache_in_use_keeps_no_shared_memory_file(tmp_path: Path) -> None:
    # WAL mode maps cache.db-shm into memory whatever sqlite_mmap_size says, so truncating it
    # under a live process was a SIGBUS (see the process tests below). A folder made in WAL mode
    # (diskcache's default, as earlier versions left it) is converted when opened.
    folder = tmp_path / "cache"
    filled_disk_cache(folder, entries=10)
    cache = JudgeCache(folder)
    for n in range(50):
        cache.set(f"k{n}", {"v": n})
    assert cache.get("k7") == {"v": 7}
    # today: ['cache.db-shm', 'cache.db-wal']
    assert sorted(p.name for p in folder.glob("cache.db-*")) == []
    assert truncate_journals(folder) == []
    cache.close()


@pytest.mark.process
def test_truncating_cache_db_journals_under_serve_leaves_it_serving(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    filled_disk_cache(folder)
    env = {"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}
    with OpenAIStandIn() as judge, \
            ServiceProcess(serve_args(judge, folder), tmp_path, env=env) as service:
        batch(service, requests(5, "a"))  # the cache is open and in use
        cut = truncate_journals(folder)  # today: cache.db-shm and -wal; a SIGBUS follows
        print(f"truncated: {cut}")
        first = batch(service, requests(30, "b"))
        again = batch(service, requests(30, "b"))
        assert service.proc is not None and service.proc.poll() is None
        assert not any(cached(first)) and cached(again) == [True] * 30
        assert httpx.get(f"{service.url}/healthz", timeout=10).status_code == 200


@pytest.mark.process
def test_truncating_cache_db_journals_under_a_cli_grade_leaves_it_grading(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "cache"
    filled_disk_cache(folder)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines(40, "j-")))
    out = tmp_path / "out.jsonl"
    cut: list[str] = []
    with OpenAIStandIn(latency=0.3) as judge:

        def truncate_after_the_first_results() -> None:
            deadline = time.monotonic() + 120
            while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
                time.sleep(0.005)
            cut.extend(truncate_journals(folder))

        cutter = threading.Thread(target=truncate_after_the_first_results, daemon=True)
        cutter.start()
        done = run_cli(["grade", str(source), "--out", str(out),
                        "--metrics", "coverage,defects", "--cache-dir", str(folder),
                        "--model", "openai/standin", "--api-base", judge.base_url,
                        "--no-preflight", "--quiet"])
        cutter.join(5)
    print(f"truncated: {cut}")
    # today: -7 (SIGBUS; a shell says 135), nothing in stderr
    assert done.returncode == 0, (done.returncode, cut, done.stderr[-2000:])
    graded = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(o["id"] for o in graded) == sorted(f"j-{n}" for n in range(40))
    assert all(o["status"] == "scored" for o in graded)


LOCKED = 8.0
"""Seconds the lock is held: past the cache's timeout (DISK_TIMEOUT, 5 s), short of diskcache's
own (60 s)."""


@pytest.mark.process
def test_a_locked_cache_db_neither_freezes_serve_nor_stops_grading(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    env = {"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}
    with OpenAIStandIn() as judge, \
            ServiceProcess(serve_args(judge, folder), tmp_path, env=env) as service:
        batch(service, requests(2, "warm"))
        graded: list[list[dict[str, Any]]] = []
        took: list[float] = []

        def grade_three_batches() -> None:
            for n in range(3):
                sent = time.monotonic()
                graded.append(batch(service, requests(10, f"l{n}-")))
                took.append(time.monotonic() - sent)

        with sqlite_write_lock(folder / "cache.db", LOCKED):
            locked = time.monotonic()
            grader = threading.Thread(target=grade_three_batches, daemon=True)
            grader.start()
            latencies = []
            while time.monotonic() - locked < LOCKED - 1 or grader.is_alive():
                assert time.monotonic() - locked < 120, "grading under the lock never ended"
                sent = time.monotonic()
                assert httpx.get(f"{service.url}/healthz", timeout=60).status_code == 200
                latencies.append(time.monotonic() - sent)
                time.sleep(0.1)
            grader.join()
        print(f"/healthz under the lock: {len(latencies)} requests, max {max(latencies):.3f} s, "
              f"median {sorted(latencies)[len(latencies) // 2]:.3f} s; batches of 10 took "
              + ", ".join(f"{t:.2f}" for t in took) + " s")
        # today: about LOCKED s (a write waited for the lock on the event loop)
        assert max(latencies) < 1.0, latencies
        assert len(graded) == 3 and all(not any(cached(results)) for results in graded)
        assert "going on uncached" in service.log()
        # Released: within a cool-down the cache stores and serves again.
        rounds = iter(range(1000))

        def cache_is_back() -> bool:
            items = requests(2, f"r{next(rounds)}-")
            batch(service, items)
            return cached(batch(service, items)) == [True, True]

        wait_for("the cache working again after the lock", cache_is_back)
        print(f"the cache served again {time.monotonic() - locked - LOCKED:.1f} s after the lock "
              "ended")


async def test_a_cache_dropped_without_close_ends_its_threads(tmp_path: Path) -> None:
    """Each disk cache in use has two threads; one nobody closed must not keep them forever.

    A pytest process building a grader per test (and closing few) had 161 idle cache threads,
    each keeping its cache alive through the last call it ran.
    """
    def cache_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("bonusjudge-cache")}

    # Only this test's threads are counted: caches other tests dropped may end theirs meanwhile
    # (whenever the collector runs), so a count of all of them can go down on its own.
    before = cache_threads()
    for n in range(5):
        cache = JudgeCache(tmp_path / f"c{n}")
        await cache.aset("key", {"value": n})
        assert await cache.aget("key") == {"value": n}
    ours = cache_threads() - before
    assert len(ours) >= 2
    del cache
    import gc

    gc.collect()
    deadline = time.monotonic() + 10
    while left := [t for t in ours if t.is_alive()]:
        assert time.monotonic() < deadline, f"{len(left)} cache threads left"
        await asyncio.sleep(0.05)
