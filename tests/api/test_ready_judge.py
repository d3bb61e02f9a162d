"""``/readyz`` reports the judge's real state (issue 28): its breaker open (an outage) or its
credentials refused make the service not ready, and it is ready again once the provider answers,
also when no request comes to find out (a load balancer sends none to a service not ready)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from core.errors import ProviderError
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeProvider, covering, defects
from judge.retry import CircuitBreaker
from judge.verdicts import DefectJudgement
from tests.helpers.engine import levin_item

ITEM = levin_item(id="it-1")

DOWN = ProviderError("503 from the provider", reason="provider_error", retryable=True,
                     status=503)
REFUSED = ProviderError("401: Incorrect API key provided: sk-ab***yz", status=401)


class Switch:
    """A judge that fails with ``failure`` while it is set, and answers well otherwise."""

    def __init__(self, failure: ProviderError) -> None:
        self.failure = failure
        self.failing = threading.Event()
        self.probes = 0

    def __call__(self, call: FakeCall) -> Any:
        if call.response_model is None:
            self.probes += 1  # the preflight's one-token request
        if self.failing.is_set():
            return self.failure
        if call.response_model is DefectJudgement:
            return defects()
        return "OK" if call.response_model is None else covering(1, n=2)


def build(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader], judge: Switch,
    breaker: CircuitBreaker,
) -> FastAPI:
    grader = make_grader(FakeProvider(handler=judge), metrics=("coverage", "defects"),
                         retries=0, breaker=breaker)
    return make_app(grader)


def judge_check(client: TestClient) -> tuple[int, dict[str, Any]]:
    answer = client.get("/readyz")
    return answer.status_code, answer.json()["checks"]["judge"]


def wait_ready(client: TestClient, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status, check = judge_check(client)
        if status == 200:
            return check
        assert time.monotonic() < deadline, check
        time.sleep(0.05)


def test_an_open_breaker_is_not_ready_and_a_probe_ends_it_without_traffic(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    judge = Switch(DOWN)
    breaker = CircuitBreaker(threshold=2, cooldown=0.3, max_cooldown=0.3)
    with TestClient(build(make_app, make_grader, judge, breaker)) as client:
        assert judge_check(client) == (200, {"ok": True, "detail": "fake/judge"})
        judge.failing.set()
        assert client.post("/v1/grade", json=ITEM).status_code in (200, 503)  # opens it
        status, check = judge_check(client)
        assert status == 503 and check["ok"] is False
        assert re.fullmatch(
            r"circuit_open: fake/judge is in an outage \(\d+ failed requests in a row, for \d+ "
            r"s\); (next try in [01] s|a probe request is under way)", check["detail"]
        ), check
        # No request comes: once the cool-down is over, a probe of /readyz sends the probe
        # request (and does not wait for it).
        deadline = time.monotonic() + 10
        while judge.probes < 1:
            assert judge_check(client)[0] == 503
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # The provider is still down: the probe failed, the breaker stays open.
        assert judge_check(client)[0] == 503
        judge.failing.clear()
        assert wait_ready(client) == {"ok": True, "detail": "fake/judge"}
        assert client.post("/v1/grade", json=ITEM).json()["status"] == "scored"
        probes = judge.probes
        for _ in range(5):
            assert judge_check(client)[0] == 200
        assert judge.probes == probes  # a ready judge is never probed: /readyz stays free


def test_a_refused_key_is_not_ready_until_a_call_is_answered(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    judge = Switch(REFUSED)
    with TestClient(build(make_app, make_grader, judge, CircuitBreaker())) as client:
        judge.failing.set()  # the key was revoked
        graded = client.post("/v1/grade", json=ITEM)
        assert graded.status_code == 200 and graded.json()["status"] == "unscored"
        answer = client.get("/readyz")
        assert answer.status_code == 503 and answer.json()["ready"] is False
        check = answer.json()["checks"]["judge"]
        assert check["ok"] is False, check
        assert check["detail"].startswith("credentials_refused: the provider of fake/judge "
                                          "answered 401"), check
        assert "sk-" not in answer.text  # /readyz needs no key: nothing of the provider's text
        judge.failing.clear()  # a new key, or the provider accepts it again
        assert client.post("/v1/grade", json={**ITEM, "id": "it-2", "response": "Hurt."}).json()[
            "status"] == "scored"
        assert judge_check(client) == (200, {"ok": True, "detail": "fake/judge"})


def test_a_refused_key_is_rechecked_in_the_background(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    judge = Switch(REFUSED)
    breaker = CircuitBreaker(recheck=0.2)
    with TestClient(build(make_app, make_grader, judge, breaker)) as client:
        judge.failing.set()
        client.post("/v1/grade", json=ITEM)
        assert judge_check(client)[0] == 503  # (a recheck now is refused too)
        judge.failing.clear()
        check = wait_ready(client)  # no grading call: a recheck found the key accepted
        assert check == {"ok": True, "detail": "fake/judge"} and judge.probes >= 1


def test_readyz_never_waits_for_its_probe_and_sends_one_at_a_time(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    release = threading.Event()
    probes: list[float] = []

    class Stuck:
        """A provider in an outage whose probe request hangs until released."""

        async def complete(self, messages: Any, response_model: Any, config: Any,
                           **kw: Any) -> Any:
            if response_model is not None:
                raise DOWN
            probes.append(time.monotonic())
            while not release.is_set():
                await asyncio.sleep(0.01)
            raise DOWN

    breaker = CircuitBreaker(threshold=1, cooldown=0.2, max_cooldown=0.2)
    grader = make_grader(Stuck(), metrics=("coverage",), retries=0, breaker=breaker)
    with TestClient(make_app(grader)) as client:
        assert client.post("/v1/grade", json=ITEM).status_code == 503  # opens it
        time.sleep(0.25)  # its cool-down: a probe is due
        try:
            for _ in range(20):
                status, check = judge_check(client)  # answers while the probe hangs
                assert status == 503 and check["detail"].startswith("circuit_open"), check
            assert len(probes) == 1
        finally:
            release.set()
