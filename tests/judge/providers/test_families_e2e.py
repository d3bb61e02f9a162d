"""Each provider family users pick, graded end to end on its own wire (issue 40).

Every model off the direct transport died with ``NameError`` in the preflight, and no test
reached that line: every one used an ``openai/...`` model. Here each family runs the way users
run it, against the strict stand-in speaking that family's API (OpenAI chat completions,
Anthropic Messages, Gemini ``generateContent``), with litellm's own adapters unchanged:

* ``bonusjudge grade`` in a fresh interpreter: every item scored, and the run's bill (requests,
  prompt tokens, cost) equal to what the stand-in counted, the preflight's probe included;
* the cascade (``--judge cascade``): the matcher decides what it is sure of, the family's LLM the
  rest, every request counted;
* ``bonusjudge serve``: the preflight passes (and says what it cost), a graded item, and
  ``/v1/usage`` counting the item's requests and tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from standins.openai_server import OpenAIStandIn
from tests.helpers.engine import levin_request
from tests.helpers.processes import ServiceProcess, run_cli

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"
LEVIN = levin_request().model_dump(mode="json", exclude_none=True)


def _no_temperature(body: dict[str, Any]) -> None:
    # OpenAI's reasoning models refuse a temperature; litellm sends max_completion_tokens.
    assert "temperature" not in body and "max_tokens" not in body, body
    assert body["max_completion_tokens"] >= 1


def _tools(body: dict[str, Any]) -> None:
    assert body["tool_choice"]["type"] in ("function", "tool"), body


def _anthropic_tools(body: dict[str, Any]) -> None:
    # Anthropic's own shape: a forced tool_use of the response model.
    assert body["tool_choice"]["type"] == "tool" and body["tools"][0]["input_schema"], body


def _gemini_schema(body: dict[str, Any]) -> None:
    # Google's API takes either spelling of a field; litellm sends snake_case.
    config = {key.replace("_", "").lower(): value
              for key, value in body["generationConfig"].items()}
    assert config["responsemimetype"] == "application/json", body
    assert "responsejsonschema" in config or "responseschema" in config, body


def _json_schema(body: dict[str, Any]) -> None:
    assert body["response_format"]["type"] == "json_schema", body


@dataclass(frozen=True)
class Family:
    """One provider family as a user names it."""

    name: str
    model: str
    key_variable: str | None
    wire: str  # the stand-in's WireFamily
    base: Callable[[OpenAIStandIn], str]
    check: Callable[[dict[str, Any]], None]  # what a graded request's body must hold
    priced: bool = True
    strict: bool = True
    options: tuple[str, ...] = ()


FAMILIES = [
    Family("openai-direct", "openai/gpt-4o-mini", "OPENAI_API_KEY", "openai",
           lambda srv: srv.base_url, _tools),
    Family("openai-reasoning", "openai/o3", "OPENAI_API_KEY", "openai",
           lambda srv: srv.base_url, _no_temperature),
    Family("anthropic", "anthropic/claude-sonnet-4-5-20250929", "ANTHROPIC_API_KEY",
           "anthropic", lambda srv: srv.anthropic_base_url, _anthropic_tools),
    Family("gemini", "gemini/gemini-2.5-flash", "GEMINI_API_KEY", "gemini",
           lambda srv: srv.gemini_base_url, _gemini_schema),
    # A vLLM / llama.cpp / Ollama-style server: lenient about extra fields, no key, no price.
    Family("local", "hosted_vllm/qwen2.5-7b-instruct", None, "openai",
           lambda srv: srv.base_url, _json_schema, priced=False, strict=False,
           options=("--mode", "json_schema")),
]


def _options(family: Family, srv: OpenAIStandIn, tmp_path: Path) -> list[str]:
    return ["--model", family.model, "--api-base", family.base(srv), *family.options,
            "--metrics", "coverage,defects", "--cache-dir", str(tmp_path / "cache")]


def _env(family: Family) -> dict[str, str]:
    return {family.key_variable: "sk-test"} if family.key_variable else {}


def _probe_tokens(body: dict[str, Any]) -> int:
    """The answer length the preflight's probe asked for, on any of the three wires."""
    if "generationConfig" in body:
        config = body["generationConfig"]
        return int(config.get("maxOutputTokens") or config["max_output_tokens"])
    return int(body.get("max_tokens") or body["max_completion_tokens"])


def _graded_bodies(srv: OpenAIStandIn) -> list[dict[str, Any]]:
    """The recorded bodies past the preflight's probe (the first request)."""
    return srv.requests[1:]


def _check_the_wire(family: Family, srv: OpenAIStandIn, requests: int) -> None:
    stats = srv.stats()
    assert srv.rejections == []  # litellm's body passes the family's strict check
    assert stats.requests == requests and stats.families == {family.wire: requests}
    assert set(srv.request_families) == {family.wire}
    for body in _graded_bodies(srv):
        family.check(body)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_grade_through_each_family(family: Family, tmp_path: Path) -> None:
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    with OpenAIStandIn(strict=family.strict, record_requests=100) as srv:
        done = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--summary", str(summary),
                        *_options(family, srv, tmp_path)], env=_env(family))
        assert done.returncode == 0, done.stderr[-3000:]
        assert "NameError" not in done.stderr
        results = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(results) == 10 and {r["status"] for r in results} == {"scored"}
        # 10 items x (coverage, defects), and the preflight's one-token probe first.
        _check_the_wire(family, srv, 21)
        assert _probe_tokens(srv.requests[0]) == 1
        stats = srv.stats()
    bill = json.loads(summary.read_text())
    assert bill["judge_calls"] == stats.requests
    assert (bill["prompt_tokens"], bill["completion_tokens"]) == (
        stats.prompt_tokens, stats.completion_tokens)
    if family.priced:
        assert bill["cost_usd"] > 0
    else:
        assert bill["cost_usd"] is None
    assert f"{stats.requests} judge call(s)" in done.stdout


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_the_cascade_through_each_family(family: Family, tmp_path: Path) -> None:
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    with OpenAIStandIn(strict=family.strict, record_requests=100) as srv:
        done = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--summary", str(summary),
                        "--judge", "cascade", *_options(family, srv, tmp_path)],
                       env=_env(family))
        assert done.returncode == 0, done.stderr[-3000:]
        results = [json.loads(line) for line in out.read_text().splitlines()]
        routes = [r["decided_by"] for r in results]
        sent = routes.count("llm")
        assert len(results) == 10 and {r["status"] for r in results} == {"scored"}
        assert sent >= 1 and set(routes) <= {"llm", "embedded-matcher"}
        # Only the items the matcher was unsure of were sent: coverage and defects each.
        _check_the_wire(family, srv, 1 + 2 * sent)
        stats = srv.stats()
    bill = json.loads(summary.read_text())
    assert bill["judge_calls"] == stats.requests
    assert bill["prompt_tokens"] == stats.prompt_tokens


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_serve_through_each_family(family: Family, tmp_path: Path) -> None:
    with (
        OpenAIStandIn(strict=family.strict, record_requests=100) as srv,
        ServiceProcess(_options(family, srv, tmp_path), tmp_path, env=_env(family)) as served,
    ):
        # The preflight ran on the family's wire before the service listened, and said so.
        assert srv.stats().requests == 1
        assert "preflight: 1 request sent" in served.log()
        graded = httpx.post(f"{served.url}/v1/grade", json=LEVIN, timeout=60)
        assert graded.status_code == 200, graded.text
        result = graded.json()
        assert result["status"] == "scored", result
        assert result["defects"]["status"] == "scored", result
        usage = httpx.get(f"{served.url}/v1/usage", timeout=10).json()
        _check_the_wire(family, srv, 3)
        stats = srv.stats()
    assert usage["provider_requests"] == 2
    assert 0 < usage["prompt_tokens"] < stats.prompt_tokens  # the probe's are not the caller's
    assert (usage["cost_usd"] > 0) is family.priced
