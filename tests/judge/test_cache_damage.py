"""A damaged cache never stops grading (issue 15 item 2): moved aside, or grading runs uncached.

Damage is made for real (garbage or a truncated ``cache.db``) or simulated where it cannot be
(a full disk: diskcache's ``Cache.set`` raises what SQLite or the OS would). The judge is the
shipped ``FakeProvider`` in-process and the ``OpenAIStandIn`` for the CLI.
"""

from __future__ import annotations

import json
import logging
import random
import sqlite3
from pathlib import Path
from typing import Any

import diskcache
import pytest

from bonusjudge_client.wire.grading import GradeRequest
from judge.cache import JudgeCache
from judge.engine import Grader
from judge.providers.fake import FakeProvider
from standins.openai_server import OpenAIStandIn
from tests.helpers.engine import ENGINE_CONFIG as CFG
from tests.helpers.engine import no_sleep, plain_answer
from tests.helpers.processes import run_cli

ITEM = {
    "question": "How does Levin feel after Kitty refuses him?",
    "reference": "He feels humiliated and wants to return to his estate.",
    "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
    "tom_dimension": "emotion",
}


def grader(cache: JudgeCache) -> tuple[Grader, FakeProvider]:
    provider = FakeProvider(handler=plain_answer)
    engine = Grader(CFG, provider=provider, cache=cache, sleep=no_sleep, rng=random.Random(0))
    return engine, provider


def requests(n: int) -> list[GradeRequest]:
    return [GradeRequest(id=f"q{i}", response=f"He is ashamed ({i}).", **ITEM) for i in range(n)]


def write_garbage(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cache.db").write_bytes(b"this is not a SQLite database\n" * 200)


def write_truncated(folder: Path) -> None:
    filled = diskcache.Cache(str(folder))
    for n in range(200):
        filled.set(f"key-{n}", "x" * 200)
    filled.close()
    database = folder / "cache.db"
    database.write_bytes(database.read_bytes()[:3000])


DAMAGE = {"garbage": write_garbage, "truncated": write_truncated}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_a_damaged_database_is_moved_aside_and_grading_works(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "cache"
    DAMAGE[damage](folder)
    cache = JudgeCache(folder)  # today: CacheError("cannot open cache folder ...")
    assert cache.enabled and cache.errors == 1
    assert cache.moved_aside is not None and cache.moved_aside.exists()
    assert cache.moved_aside.name.startswith("cache.db.corrupt-")
    assert "moved aside" in caplog.text

    engine, provider = grader(cache)
    results = [r async for r in engine.grade_many(requests(3))]
    assert [r.status for r in results] == ["scored"] * 3
    assert all(r.coverage is not None and r.coverage.covered == 1 for r in results)
    calls = len(provider.calls)
    again = [r async for r in engine.grade_many(requests(3))]
    assert [r.status for r in again] == ["scored"] * 3
    assert len(provider.calls) == calls  # the new database caches again
    cache.close()


def test_a_folder_that_cannot_be_repaired_runs_uncached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "cache"
    write_garbage(folder)

    def refuse(self: Path, target: Any) -> Path:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "rename", refuse)
    cache = JudgeCache(folder)  # never raises
    assert not cache.enabled and cache.degraded and cache.errors == 2
    assert cache.get("k") is None and len(cache) == 0 and cache.volume() == 0
    cache.set("k", {"v": 1})  # dropped
    assert "grading goes on uncached" in caplog.text

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a file where the cache folder should be")
    other = JudgeCache(not_a_folder)
    assert not other.enabled and other.errors == 1


@pytest.mark.parametrize(
    "error",
    [OSError(28, "No space left on device"), sqlite3.OperationalError("database or disk is full")],
    ids=["ENOSPC", "sqlite-full"],
)
async def test_writes_failing_mid_run_are_counted_and_grading_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    error: Exception,
) -> None:
    cache = JudgeCache(tmp_path / "cache")
    real_set = diskcache.Cache.set
    writes = {"n": 0}

    def fill_up(self: diskcache.Cache, key: Any, value: Any, *args: Any, **kwargs: Any) -> bool:
        writes["n"] += 1
        if writes["n"] > 2:  # the disk fills up after two entries
            raise error
        return bool(real_set(self, key, value, *args, **kwargs))

    monkeypatch.setattr(diskcache.Cache, "set", fill_up)
    engine, _ = grader(cache)
    with caplog.at_level(logging.WARNING, logger="bonusjudge.cache"):
        results = [r async for r in engine.grade_many(requests(6))]
    # today: CacheError ends grade_many at the third write
    assert sorted(r.id for r in results) == [f"q{i}" for i in range(6)]
    assert all(r.status == "scored" and r.coverage is not None for r in results)
    assert cache.stats.writes == 2
    assert cache.errors == 10 and cache.degraded  # 6 items x 2 judge calls, 2 stored
    warnings = [r for r in caplog.records if r.name == "bonusjudge.cache"]
    assert len(warnings) == 1 and "going on uncached" in warnings[0].getMessage()
    cache.close()


def test_reads_failing_are_misses_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = JudgeCache(tmp_path / "cache")
    cache.set("k", {"v": 1})
    assert cache.get("k") == {"v": 1} and cache.errors == 0

    def broken(self: diskcache.Cache, *args: Any, **kwargs: Any) -> Any:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(diskcache.Cache, "get", broken)
    assert cache.get("k") is None
    assert cache.errors == 1 and cache.stats.misses == 1
    assert not cache.writable() and cache.errors == 2  # the readiness probe reads too
    cache.close()


@pytest.mark.process
def test_cli_with_a_corrupt_cache_folder_grades_everything(tmp_path: Path) -> None:
    items = [{"id": f"it-{n}", "answer": ITEM["reference"], "response": f"He is ashamed ({n}).",
              **{k: v for k, v in ITEM.items() if k != "reference"}} for n in range(1, 6)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in items))
    write_garbage(tmp_path / "cache")
    with OpenAIStandIn() as srv:
        done = run_cli(["grade", str(source), "--out", str(tmp_path / "out.jsonl"),
                        "--metrics", "coverage", "--cache-dir", str(tmp_path / "cache"),
                        "--model", "openai/standin", "--api-base", srv.base_url, "--quiet"])
    # today: exit 1, "bonusjudge: error: cannot open cache folder ...: file is not a database"
    assert done.returncode == 0, done.stderr[-2000:]
    graded = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(o["id"] for o in graded) == [f"it-{n}" for n in range(1, 6)]
    assert all(o["status"] == "scored" for o in graded)
    assert list((tmp_path / "cache").glob("cache.db.corrupt-*"))
    assert "moved aside" in done.stderr
