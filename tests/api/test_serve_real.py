"""The real server: `bonusjudge serve` as a subprocess, a loopback judge, JudgeClient over HTTP.

Also the restart test: the service is SIGKILLed in the middle of a job and started again on the
same data folder; every item ends with exactly one result, and items finished before the kill are
never sent to the judge again. It runs with BERTScore on, so each start is a cold start (issue 13):
the resumed job must wait for the encoder warm-up instead of failing with an ImportError, and a
request sent before ``/readyz`` is 200 gets 200 or 503 with ``Retry-After``, never a 500.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from bonusjudge_client import JudgeClient
from core.jsonl import BadLine
from core.processes import free_port
from judge.io import read_items
from standins.openai_server import OpenAIStandIn

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"


def start_server(
    port: int,
    judge_url: str | None,
    workdir: Path,
    metrics: str | None = "coverage,defects,rouge_l",
) -> subprocess.Popen[bytes]:
    """Start `bonusjudge serve`; no judge URL means the default (embedded) judge, no metrics all."""
    cmd = [
        sys.executable, "-m", "cli", "serve", "--port", str(port),
        "--cache-dir", str(workdir / "cache"),
    ]
    if judge_url is not None:
        cmd += ["--model", "openai/standin", "--api-base", judge_url]
    if metrics is not None:
        cmd += ["--metrics", metrics]
    env = {**os.environ, "BONUSJUDGE_SETTINGS_FILE": ""}
    env.pop("BONUSJUDGE_SETTINGS_FILE")
    log = open(workdir / f"serve-{port}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {Path(log.name).read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("server did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def judge_server():
    with OpenAIStandIn(record_requests=5000) as srv:
        yield srv


def test_grade_example_set_through_real_server(judge_server, tmp_path):
    port = free_port()
    proc = start_server(port, judge_server.base_url, tmp_path)
    try:
        requests = []
        for entry in read_items(EXAMPLES):
            assert not isinstance(entry, BadLine)
            _, req = entry
            requests.append(req)
        with JudgeClient(f"http://127.0.0.1:{port}") as client:
            deadline = time.monotonic() + 60
            while not client.ready().ready:  # /healthz answers while the app still loads
                assert time.monotonic() < deadline
                time.sleep(0.1)
            results = client.grade_many(requests, progress=False, batch_size=4)
        assert [r.id for r in results] == [r.id for r in requests]
        assert all(r.status == "scored" for r in results)
        assert {r.language for r in results} == {"en", "zh"}
        # curl-style raw HTTP gives the same shape.
        body = json.loads(EXAMPLES.read_text().splitlines()[0])
        raw = httpx.post(f"http://127.0.0.1:{port}/v1/grade", json={
            "id": body["id"], "question": body["question"], "reference": body["answer"],
            "bonus_points": body["bonus_points"], "response": body["response"],
        }, timeout=60)
        assert raw.status_code == 200
        assert raw.json()["coverage"]["total"] == len(body["bonus_points"])
        bad = httpx.post(f"http://127.0.0.1:{port}/v1/grade", json={"question": "q"}, timeout=10)
        assert bad.status_code == 422 and bad.json()["error"]["field"]
    finally:
        stop(proc)


def probe_while_cold(base: str) -> None:
    """A grade request sent as soon as the server answers: 200, or 503 with Retry-After."""
    probe = {"id": "probe", "question": "Q?", "reference": "The cold reference.",
             "bonus_points": ["cold point"], "response": "a probe of the cold start"}
    response = httpx.post(f"{base}/v1/grade", json=probe, timeout=120)
    assert response.status_code in (200, 503), response.text
    if response.status_code == 503:
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"]["type"] == "unavailable"


METRICS_WITH_BERTSCORE = "coverage,defects,rouge_l,bertscore"


def test_restart_mid_job_grades_every_item_exactly_once(tmp_path):
    n = 30
    items = [
        {"id": f"r{i}", "question": f"Question {i}?", "reference": f"Reference {i}.",
         "bonus_points": [f"point {i}"], "response": f"unique response number {i}"}
        for i in range(n)
    ]
    with OpenAIStandIn(latency=0.4, record_requests=5000) as judge:
        port = free_port()
        proc = start_server(port, judge.base_url, tmp_path, METRICS_WITH_BERTSCORE)
        base = f"http://127.0.0.1:{port}"
        probe_while_cold(base)
        with JudgeClient(base) as client:
            job = client.submit_job(items)
            deadline = time.monotonic() + 120
            while client.job(job.id).done < 5 and time.monotonic() < deadline:
                time.sleep(0.2)
            finished_before = {e.id for e in client.results(job.id) if e.result is not None}
        assert 5 <= len(finished_before) < n
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc = start_server(port, judge.base_url, tmp_path, METRICS_WITH_BERTSCORE)
        try:
            probe_while_cold(base)
            with JudgeClient(base) as client:
                status = client.wait(job.id, timeout=180)
                entries = list(client.results(job.id))
        finally:
            stop(proc)
        bodies = judge.requests
    assert status.status == "done" and status.done == n, status
    assert status.scored == n, status
    counts = Counter(e.id for e in entries)
    assert sorted(counts) == sorted(i["id"] for i in items)
    assert set(counts.values()) == {1}
    for entry in entries:
        assert entry.result is not None and entry.result.status == "scored", entry
        assert entry.result.bertscore is not None and entry.result.bertscore.f1 is not None
    sent = Counter()
    for body in bodies:
        text = json.dumps(body["messages"], ensure_ascii=False)
        for i in range(n):
            if f"unique response number {i}\\n" in text:
                sent[f"r{i}"] += 1
    for item_id in finished_before:
        assert sent[item_id] == 2, item_id  # coverage + defects, never again after the restart


def test_cold_restart_with_the_default_judge_resumes_the_job(tmp_path):
    # The default configuration: the embedded matcher and every metric, BERTScore included, so
    # the matcher's and BERTScore's batch threads both make first imports in a fresh process.
    n = 40
    items = [
        {"id": f"c{i}", "question": f"Why did Anna leave {i}?", "reference": "She was unhappy.",
         "bonus_points": ["Anna was unhappy in her marriage"],
         "response": f"Anna left because her marriage made her unhappy ({i})."}
        for i in range(n)
    ]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(port, None, tmp_path, metrics=None)
    try:
        probe_while_cold(base)
        with JudgeClient(base) as client:
            job = client.submit_job(items)
    finally:
        # Stopped at once, cleanly: the lease is released, so the next process resumes the job
        # as soon as it starts, while its warm-up is still loading.
        stop(proc)
    proc = start_server(port, None, tmp_path, metrics=None)
    try:
        probe_while_cold(base)
        with JudgeClient(base) as client:
            status = client.wait(job.id, timeout=240)
            entries = list(client.results(job.id))
    finally:
        stop(proc)
    assert status.status == "done" and status.done == n and status.scored == n, status
    assert sorted(e.id for e in entries) == sorted(i["id"] for i in items)
    for entry in entries:
        assert entry.result is not None and entry.result.status == "scored", entry
        assert entry.result.coverage is not None and entry.result.coverage.status == "scored"
        assert entry.result.rouge_l is not None
        assert entry.result.bertscore is not None and entry.result.bertscore.f1 is not None
