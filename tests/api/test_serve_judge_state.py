"""`bonusjudge serve` with an LLM judge that cannot work (issue 28), run as users run it.

At start-up it runs `grade`'s preflight: a judge that cannot work ends the command with one line
and exit 2 before it listens. Afterwards `/readyz` follows the judge: an outage (its breaker
open) or refused credentials make the service not ready, until the provider answers again.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.processes import free_port
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess, run_cli

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process


def assert_one_line_error(done: Any, *needles: str) -> str:
    """Exit 2, one stderr line `bonusjudge: error: ...` holding every needle, nothing served."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("bonusjudge: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Uvicorn running" not in done.stdout + done.stderr
    return lines[0]


def serve_once(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> Any:
    """`bonusjudge serve OPTIONS` on a free port; it must end on its own (a minute at most)."""
    port = free_port()
    done = run_cli(["serve", "--port", str(port), "--cache-dir", str(tmp_path / "cache"),
                    *options], env={"BONUSJUDGE_DATA_DIR": str(tmp_path / "data"),
                                    **(env or {})}, timeout=60)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # it never listened
    return done


def test_a_judge_nobody_answers_stops_serve_with_one_line(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    done = serve_once(tmp_path, "--model", "openai/gpt-4o", "--api-base", base)
    assert_one_line_error(done, "unreachable", "openai/gpt-4o", base, "[api_base]")


def test_a_refused_key_stops_serve_and_no_preflight_still_checks_the_model(
    tmp_path: Path,
) -> None:
    with OpenAIStandIn(api_key="sk-right") as judge:
        done = serve_once(tmp_path, "--model", "openai/standin", "--api-base", judge.base_url,
                          "--api-key-env", "JUDGE_KEY", env={"JUDGE_KEY": "sk-wrong"})
        assert_one_line_error(done, "refused", "credentials", "openai/standin", judge.base_url)
        assert judge.stats().requests == 1  # the one-token preflight call
        assert "sk-wrong" not in done.stderr
    # --no-preflight skips the call, not the checks that need none.
    done = serve_once(tmp_path, "--model", "typo", "--no-preflight")
    assert_one_line_error(done, "unknown model", "typo")


def readyz(service: ServiceProcess) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(f"{service.url}/readyz", timeout=10)
    return answer.status_code, answer.json()["checks"]["judge"]


def grade(service: ServiceProcess, item: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{service.url}/v1/grade", json=item, timeout=120)


def items(count: int, tag: str) -> list[dict[str, Any]]:
    return [
        {"id": f"{tag}{i}", "question": f"Question {i}?", "reference": f"Reference {i}.",
         "bonus_points": [f"point {i}"], "response": f"response {tag}{i}"}
        for i in range(count)
    ]


def test_without_preflight_readyz_reports_the_outage_then_the_recovery(tmp_path: Path) -> None:
    judge_port = free_port()  # the judge is down: nothing listens there yet
    base = f"http://127.0.0.1:{judge_port}/v1"
    args = ["--model", "openai/standin", "--api-base", base, "--metrics", "coverage,defects",
            "--cache-dir", str(tmp_path / "cache"), "--no-preflight"]
    with ServiceProcess(args, tmp_path, env={"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}) \
            as service:
        # Nothing is known of the judge yet: ready (started with --no-preflight).
        assert readyz(service)[0] == 200
        batch = httpx.post(f"{service.url}/v1/grade/batch", json={"items": items(10, "a")},
                           timeout=120)
        assert batch.status_code == 503, batch.text  # refused connections open the breaker
        assert batch.json()["error"]["type"] == "provider_outage"
        status, check = readyz(service)
        assert status == 503 and check["ok"] is False, check
        assert check["detail"].startswith("circuit_open: openai/standin is in an outage"), check
        with OpenAIStandIn(port=judge_port) as judge:
            # No request comes (a load balancer sends none to a service that is not ready):
            # /readyz itself finds a probe due after the breaker's cool-down and sends it.
            deadline = time.monotonic() + 120
            while (answer := readyz(service))[0] != 200:
                assert time.monotonic() < deadline, (answer, service.log()[-2000:])
                time.sleep(0.5)
            assert answer[1] == {"ok": True, "detail": "openai/standin"}
            assert judge.stats().requests >= 1 and all(
                body["max_tokens"] == 1 for body in judge.requests
            )  # the probe's one-token request, no grading call
            result = grade(service, items(1, "b")[0])
            assert result.status_code == 200 and result.json()["status"] == "scored"


def test_a_provider_refusing_the_key_makes_readyz_say_so(tmp_path: Path) -> None:
    with OpenAIStandIn(api_key="sk-right") as judge:
        args = ["--model", "openai/standin", "--api-base", judge.base_url, "--api-key-env",
                "JUDGE_KEY", "--metrics", "coverage,defects", "--cache-dir",
                str(tmp_path / "cache")]
        env = {"JUDGE_KEY": "sk-right", "BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}
        with ServiceProcess(args, tmp_path, env=env) as service:  # the preflight passed
            assert readyz(service) == (200, {"ok": True, "detail": "openai/standin"})
            judge.api_key = "sk-rotated"  # the provider no longer accepts the service's key
            first = grade(service, items(1, "a")[0])
            assert first.status_code == 200 and first.json()["status"] == "unscored"
            answer = httpx.get(f"{service.url}/readyz", timeout=10)
            assert answer.status_code == 503, answer.text
            check = answer.json()["checks"]["judge"]
            assert check["ok"] is False
            assert check["detail"].startswith(
                "credentials_refused: the provider of openai/standin answered 401"), check
            assert "sk-right" not in answer.text and "Incorrect API key" not in answer.text
            judge.api_key = "sk-right"  # accepted again
            second = grade(service, items(1, "b")[0])
            assert second.status_code == 200 and second.json()["status"] == "scored"
            assert readyz(service) == (200, {"ok": True, "detail": "openai/standin"})
