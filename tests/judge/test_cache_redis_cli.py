"""`bonusjudge grade --cache-url` as users run it: a fresh interpreter per run, a real Redis.

The judge is the shipped OpenAI stand-in, which counts the requests it gets: a run served from
the shared cache sends it none, whatever folder ``--cache-dir`` names.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import redis

from core.processes import free_port
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import run_cli
from tests.helpers.redis_server import RedisServer

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

ITEMS = [
    {
        "id": f"it-{n}",
        "question": "How does Levin feel after Kitty refuses him?",
        "answer": "He feels humiliated and wants to return to his estate.",
        "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
        "tom_dimension": "emotion",
        "response": f"He is humiliated and goes home to his estate ({n}).",
    }
    for n in range(1, 5)
]


@pytest.fixture
def url(redis_url: str) -> Generator[str, None, None]:
    """The session server, on a database of its own (emptied before the test)."""
    db_url = redis_url.rsplit("/", 1)[0] + "/14"
    client = redis.Redis.from_url(db_url)
    client.flushdb()
    client.close()
    yield db_url


def grade(source: Path, out: Path, cache_dir: Path, *extra: str) -> Any:
    # --no-preflight: the stand-in then counts judge calls alone (a preflight is one more).
    return run_cli(["grade", str(source), "--out", str(out), "--metrics", "coverage,defects",
                    "--cache-dir", str(cache_dir), "--no-preflight", "--quiet", *extra])


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_second_run_on_the_same_redis_calls_no_judge_whatever_the_folder(
    tmp_path: Path, url: str
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    with OpenAIStandIn() as judge:
        judge_args = ("--model", "openai/standin", "--api-base", judge.base_url,
                      "--cache-url", url)
        first = grade(source, tmp_path / "1.jsonl", tmp_path / "cache-a", *judge_args)
        assert first.returncode == 0, first.stderr[-3000:]
        paid = judge.stats().requests
        assert paid == 2 * len(ITEMS)  # coverage and defects per item

        again = grade(source, tmp_path / "2.jsonl", tmp_path / "cache-a", *judge_args)
        assert again.returncode == 0, again.stderr[-3000:]
        assert judge.stats().requests == paid  # every judge call came from Redis

        elsewhere = grade(source, tmp_path / "3.jsonl", tmp_path / "cache-b", *judge_args)
        assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]
        assert judge.stats().requests == paid  # another folder, the same cache

        # Without the URL, the (empty) folder is the cache again: the judge is asked.
        local = grade(source, tmp_path / "4.jsonl", tmp_path / "cache-b",
                      "--model", "openai/standin", "--api-base", judge.base_url)
        assert local.returncode == 0, local.stderr[-3000:]
        assert judge.stats().requests == 2 * paid

    first_results = {r["id"]: r for r in results(tmp_path / "1.jsonl")}
    for run in ("2", "3"):
        for result in results(tmp_path / f"{run}.jsonl"):
            assert all(call["cached"] for call in result["provenance"]["calls"]), run
            assert result["coverage"] == first_results[result["id"]]["coverage"], run
    assert not (tmp_path / "cache-a" / "cache.db").exists()  # Redis held every entry
    client = redis.Redis.from_url(url)
    assert len(list(client.scan_iter(match="bonusjudge:*"))) == 2 * len(ITEMS)
    client.close()


def test_an_unreachable_redis_leaves_the_run_uncached(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in ITEMS[:2]))
    nowhere = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    with OpenAIStandIn() as judge:
        done = grade(source, tmp_path / "out.jsonl", tmp_path / "cache", "--model",
                     "openai/standin", "--api-base", judge.base_url, "--cache-url", nowhere)
        assert done.returncode == 0, done.stderr[-3000:]
        assert judge.stats().requests == 4
    assert all(r["status"] == "scored" for r in results(tmp_path / "out.jsonl"))
    assert "cannot reach the Redis cache" in done.stderr
    assert "hunter2" not in done.stderr


def test_an_unreadable_cache_url_stops_the_run_with_the_setting_named(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(ITEMS[0]) + "\n")
    done = grade(source, tmp_path / "out.jsonl", tmp_path / "cache",
                 "--cache-url", "redis://localhost:notaport/0")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "cache_url" in done.stderr and "Traceback" not in done.stderr


def test_a_redis_refusing_the_password_stops_the_run_before_any_judge_call(
    tmp_path: Path,
) -> None:
    # An unreachable Redis mends; a wrong password does not, and grading on uncached would pay
    # for every judge call again: the run stops at once, naming the setting, the password hidden.
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(ITEMS[0]) + "\n")
    with RedisServer(password="s3cret") as server, OpenAIStandIn() as judge:
        for url in (server.url.replace("s3cret", "wrong"), server.url.replace(":s3cret@", "")):
            done = grade(source, tmp_path / "out.jsonl", tmp_path / "cache", "--model",
                         "openai/standin", "--api-base", judge.base_url, "--cache-url", url)
            assert done.returncode == 2, done.stderr[-3000:]
            last = done.stderr.strip().splitlines()[-1]
            assert "cache_url" in last and "refused the credentials" in last, last
            assert "wrong" not in done.stderr and "Traceback" not in done.stderr
        assert judge.stats().requests == 0
        right = grade(source, tmp_path / "out.jsonl", tmp_path / "cache", "--model",
                      "openai/standin", "--api-base", judge.base_url, "--cache-url", server.url)
        assert right.returncode == 0, right.stderr[-3000:]
        assert "Redis" not in right.stderr
