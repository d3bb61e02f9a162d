"""Restarts and concurrency: SIGKILL the CLI mid-run and resume; two processes on one cache.

The CLI test runs ``python -m cli grade`` against the loopback stand-in, kills it with
SIGKILL once some results are written, tears the file's tail the way a crash mid-write would,
and runs it again: every item must end in the results exactly once, and no item already written
may be sent to the judge again (requests are counted per item at the stand-in).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from bonusjudge_client.wire.grading import GradeResult
from judge.cache import JudgeCache
from standins.openai_server import OpenAIStandIn
from tests.helpers.faults import item_of_text, tag_response

ROOT = Path(__file__).resolve().parents[2]
N_ITEMS = 80
CONCURRENCY = 4


def write_input(path: Path) -> None:
    lines = []
    for n in range(N_ITEMS):
        lines.append(
            json.dumps(
                {
                    "id": f"k{n}",
                    "book_name": "Great Expectations",
                    "tom_dimension": ("belief", "intention", "emotion", "desire")[n % 4],
                    "question": "Why does Miss Havisham encourage Pip's love for Estella?",
                    "answer": "She wants revenge on men; she raised Estella to break hearts.",
                    "bonus_points": ["She wants revenge on men", "She raised Estella to break"],
                    "context_1000": "Pip visits Satis House.",
                    "response": tag_response("Revenge on men, through Estella.", n),
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")


def requests_per_item(srv: OpenAIStandIn) -> Counter[str]:
    counts: Counter[str] = Counter()
    for body in srv.requests:
        text = "\n".join(m.get("content") or "" for m in body["messages"])
        item = item_of_text(text)
        if item is not None:  # the run's preflight request is about no item
            counts[f"k{item}"] += 1
    return counts


@pytest.mark.process
def test_sigkill_mid_run_then_resume_grades_every_item_exactly_once(tmp_path: Path) -> None:
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source)
    # Latency makes the run last long enough to be killed in the middle.
    with OpenAIStandIn(latency=0.08, record_requests=10_000) as srv:
        cmd = [
            sys.executable, "-m", "cli", "grade", str(source), "--out", str(out),
            "--model", "openai/standin", "--api-base", srv.base_url,
            "--metrics", "coverage,rouge_l", "--concurrency", str(CONCURRENCY),
            "--no-cache", "--quiet",
        ]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and len(out.read_bytes().splitlines()) >= 20:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        first = requests_per_item(srv)

        # Whatever was written is intact: whole JSON lines, each a valid result.
        raw = out.read_bytes()
        lines = raw.splitlines(keepends=True)
        complete = [line for line in lines if line.endswith(b"\n")]
        written = {GradeResult.model_validate_json(line).id for line in complete}
        assert 20 <= len(written) < N_ITEMS
        assert len(lines) - len(complete) <= 1  # at most a torn tail, never a torn middle
        # Tear the tail as a crash mid-write would: half of a result for an ungraded item.
        victim = next(f"k{n}" for n in range(N_ITEMS) if f"k{n}" not in written)
        if len(lines) > len(complete):
            out.write_bytes(b"".join(complete))
        template = json.loads(complete[0])
        template["id"] = victim
        torn = json.dumps(template).encode()
        with open(out, "ab") as handle:
            handle.write(torn[: len(torn) // 2])

        srv.clear_requests()
        env_done = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
        )
        assert env_done.returncode == 0, env_done.stderr[-2000:]
        second = requests_per_item(srv)

    assert "dropped a torn last line" in env_done.stderr
    assert f"resuming: {len(written)} item(s) already graded" in env_done.stderr
    final = [GradeResult.model_validate_json(line) for line in out.read_bytes().splitlines()]
    ids = Counter(r.id for r in final)
    assert set(ids) == {f"k{n}" for n in range(N_ITEMS)}
    assert max(ids.values()) == 1, [i for i, c in ids.items() if c > 1]
    assert all(r.status == "scored" for r in final)
    assert ids[victim] == 1 and second[victim] == 1  # the torn line was graded again, once
    # Written before the kill: never sent to the judge again.
    assert not set(second) & written
    # Every other item: graded in the second run, and sent twice at most if it was in flight
    # when the first process died (its answer arrived but was never written).
    assert set(second) == {f"k{n}" for n in range(N_ITEMS)} - written
    twice = [i for i in second if first[i]]
    assert len(twice) <= 2 * CONCURRENCY
    assert all(first[i] + second[i] <= 2 for i in second)


_WRITER = r"""
import json, os, random, sys, asyncio
from judge.cache import JudgeCache
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.providers.fake import FakeProvider, covering, defects
from bonusjudge_client.wire.grading import GradeRequest

folder, tag, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
cache = JudgeCache(folder)
rng = random.Random(tag)
shared = list(range(rounds))
rng.shuffle(shared)  # both writers hit the same keys in different orders
for i in shared:
    cache.set(f"shared-{i}", {"i": i, "blob": "x" * (i % 300)})
    cache.set(f"{tag}-{i}", {"i": i, "tag": tag})
    value = cache.get(f"shared-{rng.randrange(rounds)}")
    assert value is None or set(value) == {"i", "blob"}, value

def handler(call):
    if call.response_model.__name__ == "CoverageJudgement":
        return covering(1, n=call.validation_context["n_points"])
    return defects()

async def grade():
    cfg = JudgeConfig(model="fake/judge", metrics=("coverage", "defects"), concurrency=16)
    grader = Grader(cfg, provider=FakeProvider(handler=handler), cache=cache)
    requests = [
        (str(n), GradeRequest(id=str(n), question="Why?", reference="Because of pride.",
                              bonus_points=["pride", "fear"], response=f"pride {n}"))
        for n in range(150)
    ]
    async for _ in grader.grade_many(requests):
        pass
asyncio.run(grade())
cache.close()
print("ok", tag)
"""


def _spawn(folder: Path, tag: str, rounds: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(folder), tag, str(rounds)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.process
def test_two_processes_share_one_cache_folder_without_corruption(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    rounds = 1500
    writers = [_spawn(folder, tag, rounds) for tag in ("a", "b")]
    # A third writer is killed mid-write: SQLite's journal must keep the folder consistent.
    doomed = _spawn(folder, "c", 100_000)
    time.sleep(1.5)
    doomed.kill()
    doomed.wait(timeout=30)
    for proc in writers:
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr[-2000:]
        assert stdout.startswith("ok")

    with sqlite3.connect(folder / "cache.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    cache = JudgeCache(folder)
    try:
        for i in range(rounds):
            assert cache.get(f"shared-{i}") == {"i": i, "blob": "x" * (i % 300)}
            assert cache.get(f"a-{i}") == {"i": i, "tag": "a"}
            assert cache.get(f"b-{i}") == {"i": i, "tag": "b"}
        # The killed writer's finished entries are whole; nothing half-written is readable.
        killed = [cache.get(f"c-{i}") for i in range(200)]
        assert all(v is None or v == {"i": i, "tag": "c"} for i, v in enumerate(killed))
    finally:
        cache.close()


@pytest.mark.parametrize("junk", [b"\x00\x00garbage", b'{"id": "k1", "status": '])
def test_results_file_with_a_torn_tail_is_repaired_on_open(tmp_path: Path, junk: bytes) -> None:
    from judge.io import ResultWriter

    out = tmp_path / "out.jsonl"
    good = b'{"id": "k0", "status": "scored"}\n'
    out.write_bytes(good + junk)
    writer = ResultWriter(out).open()
    try:
        assert writer.recovered_tail and set(writer.done) == {"k0"}
        writer.write({"id": "k1", "status": "scored"})
    finally:
        writer.close()
    assert out.read_bytes() == good + b'{"id": "k1", "status": "scored"}\n'
