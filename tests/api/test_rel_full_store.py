"""A full disk under `bonusjudge serve` (a real process whose files may not grow past 3 MB, the
portable stand-in for a small full volume): submissions get 503 with Retry-After, never 500,
the service stays up, and jobs stored before the disk filled still finish."""

from __future__ import annotations

import random
import resource
import signal
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.processes import free_port
from tests.helpers.processes import cli_env

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process


def _small_files() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, not kills
    resource.setrlimit(resource.RLIMIT_FSIZE, (3_000_000, 3_000_000))


def test_a_full_store_answers_503_and_the_service_stays_up(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 - the child writes to it
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--port", str(port), "--metrics", "rouge_l",
         "--cache-dir", str(tmp_path / "cache")],
        env=cli_env(), preexec_fn=_small_files, stdout=log, stderr=subprocess.STDOUT,
    )
    rng = random.Random(0)

    def item(n: int) -> dict[str, Any]:
        words = " ".join(
            "".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(3000)
        )
        return {"id": f"i{n}", "question": "Q?", "reference": "A reference.",
                "response": "An answer " + words[:2000], "context": words}

    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.2)
        # Warm up first: the service answers before its engine is imported, and the first job
        # waits for that import. Without this, the disk fills before any job could finish, and
        # the test would check nothing about jobs stored before it filled.
        warm = httpx.post(url + "/v1/jobs", timeout=60, json={"items": [item(-1)]}).json()["id"]
        while httpx.get(f"{url}/v1/jobs/{warm}", timeout=10).json()["status"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        statuses = []
        for job in range(40):
            answer = httpx.post(url + "/v1/jobs", timeout=60,
                                json={"items": [item(job * 10 + k) for k in range(10)]})
            statuses.append(answer.status_code)
            if answer.status_code != 202:
                break
        assert statuses[-1] == 503, statuses
        assert set(statuses[:-1]) == {202}
        assert int(answer.headers["retry-after"]) >= 1
        assert answer.json()["error"]["type"] == "store_unavailable"
        # The message names the disk (SQLite reports a write past the file-size limit as an
        # I/O error, a full volume as full); the same 503 says "locked" or "cannot be reached"
        # for the other causes (tests/api/test_store_causes.py).
        message = answer.json()["error"]["message"]
        assert message.startswith("the sqlite job store could not write its file (disk I/O "
                                  "error): its disk is full, at this process's file-size limit"), \
            message
        assert str(tmp_path) not in answer.text
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200
        # /readyz says so (issue 31.5; it said ready before), naming the store, not its path.
        ready = httpx.get(url + "/readyz", timeout=10)
        assert ready.status_code == 503, ready.text
        store = ready.json()["checks"]["store"]
        assert not store["ok"] and store["detail"].startswith("store_full:"), store
        assert str(tmp_path) not in ready.text
        listed = httpx.get(url + "/v1/jobs", timeout=10).json()["jobs"]
        assert any(j["status"] == "done" for j in listed if j["id"] != warm)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
