"""A real ``bonusjudge serve`` with two API keys (issue 31.2 and 31.3's third bullet).

* Key A's items make the provider answer 5xx (poison content); key B's are fine. B must see no
  503 while A keeps sending, A's poison costs at most ``ITEM_FAILURES`` requests per judge task.
* A true outage (the stand-in down for everyone) still pauses both keys (503), and both resume.
* Every request the stand-in received is in ``/metrics`` (with its tokens), and the sum of the
  results' provenance and of both keys' ``/v1/usage`` equal it, under 5xx, malformed answers
  that get re-asked, and refusals.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.processes import free_port
from standins.openai_server import FaultPlan, OpenAIStandIn
from standins.openai_server.replies import default_reply
from standins.openai_server.wire import analyse
from tests.helpers.processes import ServiceProcess

pytestmark = pytest.mark.process

KEYS = {"a": "tenant-key-a", "b": "tenant-key-b"}
OPERATOR = "tenant-operator-key"


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS.get(who, OPERATOR)}"}


def digest(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def item(tag: str, n: int) -> dict[str, Any]:
    return {"question": f"Question {n}?", "reference": f"Reference {n}.",
            "bonus_points": [f"point {n}"], "response": f"response {tag} {n}"}


def metric(service: ServiceProcess, name: str, label: str = "") -> float:
    text = httpx.get(f"{service.url}/metrics", headers=auth("operator"), timeout=10).text
    for line in text.splitlines():
        if line.startswith(f"{name}{label} ") or line.startswith(f"{name}_total{label} "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{label} not in /metrics")


@pytest.fixture
def judge() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(port=free_port(), record_requests=0) as server:
        yield server


def serve(tmp_path: Path, base_url: str) -> ServiceProcess:
    args = ["--model", "openai/standin", "--api-base", base_url, "--metrics", "coverage,defects",
            "--cache-dir", str(tmp_path / "cache"), "--no-preflight"]
    env = {"BONUSJUDGE_DATA_DIR": str(tmp_path / "data"),
           "BONUSJUDGE_API_KEYS": json.dumps([digest(k) for k in KEYS.values()]),
           "BONUSJUDGE_OPERATOR_KEYS": json.dumps([digest(OPERATOR)])}
    return ServiceProcess(args, tmp_path, env=env)


def test_one_keys_poison_items_do_not_pause_the_other(
    tmp_path: Path, judge: OpenAIStandIn
) -> None:
    def handler(body: dict[str, Any]) -> Any:
        if "POISON" in json.dumps(body["messages"]):
            raise RuntimeError("the provider fails on this content")
        return default_reply(body, analyse(body), None)

    judge.handler = handler
    with serve(tmp_path, judge.base_url) as service:
        stop = threading.Event()
        a_answers: list[int] = []

        def attack() -> None:
            with httpx.Client(base_url=service.url, headers=auth("a"), timeout=120) as client:
                n = 0
                while not stop.is_set():
                    batch = [item("POISON", n + i) for i in range(16)]
                    n += 16
                    a_answers.append(client.post("/v1/grade/batch",
                                                 json={"items": batch}).status_code)

        attacker = threading.Thread(target=attack)
        attacker.start()
        time.sleep(2)  # A alone first: its failures may open the breaker before B arrives
        b_answers = []
        try:
            with httpx.Client(base_url=service.url, headers=auth("b"), timeout=120) as client:
                for n in range(25):
                    b_answers.append(client.post("/v1/grade", json=item("b", n)))
                    time.sleep(0.2)
        finally:
            stop.set()
            attacker.join(120)
        assert [r.status_code for r in b_answers] == [200] * 25, [
            r.text for r in b_answers if r.status_code != 200][:2]
        assert all(r.json()["status"] == "scored" for r in b_answers)
        assert len(a_answers) >= 2  # A kept attacking throughout
        requests = judge.stats().outcomes.get("handler_error", 0)
        a_items = sum(16 for _ in a_answers)
        # A poison item costs at most 2 requests per task (coverage, defects): 4, not 10.
        assert requests <= 4 * a_items, (requests, a_items)


def test_a_true_outage_pauses_both_keys_and_both_resume(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with serve(tmp_path, base) as service:  # nothing listens on the judge's port yet
        answers = {who: httpx.post(f"{service.url}/v1/grade/batch", headers=auth(who),
                                   json={"items": [item(who, n) for n in range(12)]},
                                   timeout=120).status_code for who in ("a", "b")}
        assert answers == {"a": 503, "b": 503}
        with OpenAIStandIn(port=port):
            deadline = time.monotonic() + 120
            done = set()
            while done != {"a", "b"}:
                assert time.monotonic() < deadline, done
                for who in {"a", "b"} - done:
                    answer = httpx.post(f"{service.url}/v1/grade", headers=auth(who),
                                        json=item(who, 99), timeout=120)
                    if answer.status_code == 200:
                        done.add(who)
                time.sleep(0.5)


def test_every_request_the_provider_received_is_counted(
    tmp_path: Path, judge: OpenAIStandIn
) -> None:
    judge.faults = FaultPlan(
        probabilities={"server_error": 0.1, "malformed_json": 0.2, "refusal": 0.1}, seed=7)
    with serve(tmp_path, judge.base_url) as service:
        judge.reset_stats()
        calls: list[dict[str, Any]] = []
        for who in ("a", "b"):
            batch = httpx.post(f"{service.url}/v1/grade/batch", headers=auth(who), timeout=300,
                               json={"items": [item(who, n) for n in range(20)]})
            assert batch.status_code == 200, batch.text
            calls += [call for entry in batch.json()["results"]
                      for call in entry["result"]["provenance"]["calls"]]
        seen = judge.stats()
        assert seen.outcomes.get("malformed_json") and seen.outcomes.get("refusal")
        assert seen.outcomes.get("server_error")
        assert metric(service, "bonusjudge_judge_calls") == seen.requests
        assert metric(service, "bonusjudge_tokens", '{kind="prompt"}') == seen.prompt_tokens
        assert metric(service, "bonusjudge_tokens", '{kind="completion"}') == \
            seen.completion_tokens
        assert sum(c["attempts"] for c in calls) == seen.requests
        assert sum(c["prompt_tokens"] or 0 for c in calls) == seen.prompt_tokens
        usage = [httpx.get(f"{service.url}/v1/usage", headers=auth(who), timeout=10).json()
                 for who in ("a", "b")]
        assert sum(u["provider_requests"] for u in usage) == seen.requests
        assert sum(u["prompt_tokens"] for u in usage) == seen.prompt_tokens
        assert [u["items"] for u in usage] == [20, 20]
