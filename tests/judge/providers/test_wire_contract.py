"""The wire contract: only fields OpenAI documents leave the process, in every task and mode.

OpenAI answers a chat-completions body carrying any undocumented top-level field with HTTP 400
("Unrecognized request argument supplied: <name>"). instructor 1.17 no longer takes
``validation_context=``: the provider's old keyword fell through instructor and litellm into the
request body, and every coverage call failed against the real API. These tests drive the real
product path (``Grader`` with ``LiteLLMProvider`` over instructor, litellm and HTTP) against the
strict stand-in, for every judge task (bonus-point extraction, coverage, defects, MCQ reading)
in every structured mode and with the faithful text rubric, then check the recorded bodies
against ``openai_chat_params()``. A test of the old call shows the stand-in does catch the bug, so
the contract tests cannot pass vacuously.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import instructor
import litellm
import pytest
from instructor.core import InstructorRetryException
from pydantic import BaseModel, ValidationInfo, field_validator

from bonusjudge_client.wire.grading import GradeRequest
from bonusjudge_client.wire.mcq import McqItem
from judge.cache import JudgeCache
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.mcq.llm import JudgeExtractor
from judge.providers.litellm import LiteLLMProvider
from judge.verdicts import coverage_model
from standins import OpenAIStandIn, find_embedded_schema, openai_chat_params

litellm.suppress_debug_info = True
EXAMPLES = Path(__file__).resolve().parents[3] / "judge" / "data" / "examples_chartom.jsonl"
STRUCTURED_MODES = ["tools", "json_schema", "json", "md_json"]
EXTRACTED = ["She wants revenge on men", "She raised Estella to break hearts", "Pip is her tool"]
PAPER_COVERED = 1  # the faithful-mode reply below marks point 1 only

WITH_POINTS = GradeRequest(
    id="given",
    question="Why does Miss Havisham encourage Pip's love for Estella?",
    reference="She wants revenge on men; she raised Estella to break hearts.",
    bonus_points=["She wants revenge on men", "She raised Estella to break hearts"],
    response="Revenge: Estella was raised to break men's hearts, Pip's included.",
    tom_dimension="intention",
)
WITHOUT_POINTS = WITH_POINTS.model_copy(update={"id": "extracted", "bonus_points": None})
MCQ_ITEM = McqItem(
    id="m1",
    choices=["He is sad", "He is angry", "He is happy", "He is bored"],
    answer="B",
    response="Well, it could be anger, I'd lean towards the angry one.",
)


# -- the stand-in's answers ----------------------------------------------------------------------


def _requested_model(body: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The response model a body asks for (name and JSON schema); (None, {}) for plain text."""
    for tool in body.get("tools") or []:
        function = tool["function"]
        return str(function["name"]), dict(function.get("parameters") or {})
    response_format = body.get("response_format") or {}
    spec = response_format.get("json_schema")
    if isinstance(spec, Mapping):
        return str(spec.get("name")), dict(spec.get("schema") or {})
    for message in body.get("messages") or []:
        content = message.get("content")
        schema = find_embedded_schema(content) if isinstance(content, str) else None
        if schema is not None:  # JSON and MD_JSON modes embed the schema, titled after the model
            return str(schema.get("title")), schema
    return None, {}


def _answer(body: dict[str, Any]) -> Any:
    """A valid answer for each task, with verdicts the tests can count."""
    name, schema = _requested_model(body)
    if name == "BonusPointsExtraction":
        return {"points": EXTRACTED}
    if name == "CoverageJudgement":
        n = int(schema["properties"]["points"]["maxItems"])
        return {
            "points": [
                {"index": i, "covered": i % 2 == 1, "evidence": "", "rationale": "odd"}
                for i in range(1, n + 1)
            ]
        }
    if name == "DefectJudgement":
        return {"defects": [{"description": "Pip is not the target", "kind": "factual"}]}
    if name == "McqReading":
        return {"chosen": ["B"]}
    assert name is None, f"unexpected response model {name!r}"
    text = json.dumps(body["messages"])
    if "[Bonus Points]" in text:
        return "[Included Bonus Points]: 1"
    return "[Defect]: Pip is not the target."


def _expected_covered(n: int, mode: str) -> int:
    return PAPER_COVERED if mode == "chartom-paper" else math.ceil(n / 2)


def _undocumented(bodies: list[dict[str, Any]]) -> list[list[str]]:
    """The undocumented top-level fields of each body that has any."""
    extras = (sorted(set(body) - openai_chat_params()) for body in bodies)
    return [names for names in extras if names]


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(handler=_answer, record_requests=1_000) as srv:
        assert srv.strict  # the real API's behaviour is the default
        yield srv


def _config(server: OpenAIStandIn, mode: str) -> JudgeConfig:
    if mode == "chartom-paper":
        # The faithful family: coverage and defects in plain text; extraction (shared with the
        # chartom family) and MCQ reading stay structured, in the default mode.
        options: dict[str, Any] = {"rubric": "chartom-paper"}
    else:
        options = {"mode": mode}
    return JudgeConfig(
        model="openai/standin",
        api_base=server.base_url,
        metrics=("coverage", "defects"),
        retries=0,  # a rejected request must show as unscored, not be hidden by a retry
        **options,
    )


# -- every task, every mode ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [*STRUCTURED_MODES, "chartom-paper"])
async def test_every_task_sends_only_documented_fields(server: OpenAIStandIn, mode: str) -> None:
    server.clear_requests()
    config = _config(server, mode)
    grader = Grader(config, provider=LiteLLMProvider(), cache=JudgeCache(None))
    try:
        given = await grader.grade(WITH_POINTS)
        extracted = await grader.grade(WITHOUT_POINTS)
        reading = await JudgeExtractor(grader).extract(MCQ_ITEM, MCQ_ITEM.response)
    finally:
        await grader.aclose()
    bodies = server.requests

    assert server.rejections == []
    assert _undocumented(bodies) == []
    # Every task really went over the wire: given points (coverage, defects), extracted points
    # (extraction, coverage, defects), one MCQ reading.
    names = sorted(str(_requested_model(body)[0]) for body in bodies)
    if mode == "chartom-paper":
        assert names == ["BonusPointsExtraction", "McqReading", *["None"] * 4]
    else:
        assert names == sorted(
            ["BonusPointsExtraction", "McqReading", *["CoverageJudgement", "DefectJudgement"] * 2]
        )
    for result, n, source in ((given, 2, "request"), (extracted, 3, "extracted")):
        assert result.status == "scored", result.unscored_reasons
        assert result.unscored_reasons == []
        coverage = result.coverage
        assert coverage is not None and coverage.status == "scored"
        assert coverage.points_source == source
        assert coverage.total == n and len(coverage.verdicts) == n
        assert [v.index for v in coverage.verdicts] == list(range(1, n + 1))
        assert coverage.covered == _expected_covered(n, mode)
        assert coverage.covered == sum(bool(v.covered) for v in coverage.verdicts)
        assert result.defects is not None and result.defects.penalized is True
    assert [v.text for v in extracted.coverage.verdicts] == EXTRACTED  # type: ignore[union-attr]
    assert reading == {"B"}


@pytest.mark.parametrize("mode", STRUCTURED_MODES)
async def test_requests_have_the_shape_of_their_mode(server: OpenAIStandIn, mode: str) -> None:
    """Guards the parametrisation above: each mode really sends its own request shape."""
    server.clear_requests()
    grader = Grader(_config(server, mode), provider=LiteLLMProvider(), cache=JudgeCache(None))
    result = await grader.grade(WITH_POINTS)
    assert result.status == "scored", result.unscored_reasons
    for body in server.requests:
        kind = (body.get("response_format") or {}).get("type")
        assert ("tools" in body) == (mode == "tools")
        assert kind == {"json_schema": "json_schema", "json": "json_object"}.get(mode)


async def test_llama_cpp_mode_keeps_to_documented_top_level_fields(server: OpenAIStandIn) -> None:
    """``json_object_schema`` adds llama.cpp's nested ``response_format.schema``.

    That nested field is not OpenAI's (the mode is for lenient local servers), but the strict
    check, like OpenAI's "Unrecognized request argument", is about top-level fields, and those
    stay documented ones.
    """
    server.clear_requests()
    config = _config(server, "tools").model_copy(update={"mode": "json_object_schema"})
    grader = Grader(config, provider=LiteLLMProvider(), cache=JudgeCache(None))
    result = await grader.grade(WITHOUT_POINTS)
    assert result.status == "scored", result.unscored_reasons
    assert server.rejections == [] and _undocumented(server.requests) == []
    for body in server.requests:
        assert body["response_format"]["type"] == "json_object"
        assert body["response_format"]["schema"]["type"] == "object"


@pytest.mark.parametrize("mode", STRUCTURED_MODES)
async def test_validation_context_reaches_the_validators(server: OpenAIStandIn, mode: str) -> None:
    seen: list[Any] = []

    class Probe(BaseModel):
        points: list[Any]

        @field_validator("points")
        @classmethod
        def _record(cls, value: list[Any], info: ValidationInfo) -> list[Any]:
            seen.append(info.context)
            return value

    original = server.handler
    server.handler = lambda body: {"points": [{"index": 1, "covered": True}]}
    server.clear_requests()
    try:
        config = JudgeConfig(model="openai/standin", api_base=server.base_url, mode=mode)
        await LiteLLMProvider().complete(
            [{"role": "user", "content": "Judge."}],
            Probe,
            config,
            validation_context={"n_points": 1},
        )
    finally:
        server.handler = original
    assert seen == [{"n_points": 1}]
    assert server.rejections == [] and _undocumented(server.requests) == []


# -- the strict stand-in catches the bug -----------------------------------------------------------


def test_strict_standin_answers_400_naming_the_field(server: OpenAIStandIn) -> None:
    server.clear_requests()
    body = {
        "model": "standin",
        "messages": [{"role": "user", "content": "hi"}],
        "validation_context": {"n_points": 2},
    }
    reply = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=30)
    assert reply.status_code == 400
    assert reply.json() == {
        "error": {
            "message": "Unrecognized request argument supplied: validation_context",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert server.requests == [body]  # rejected bodies are recorded too


async def test_the_old_call_is_rejected_by_the_strict_standin(server: OpenAIStandIn) -> None:
    """The provider's former call, ``validation_context=`` through instructor, fails with 400."""
    server.clear_requests()
    client = instructor.from_litellm(litellm.acompletion, mode=instructor.Mode.TOOLS)
    with pytest.raises(InstructorRetryException) as caught:
        await client.chat.completions.create_with_completion(
            model="openai/standin",
            api_base=server.base_url,
            api_key="sk-test",
            messages=[{"role": "user", "content": "Judge."}],
            response_model=coverage_model(2),
            max_retries=0,
            num_retries=0,
            validation_context={"n_points": 2},
        )
    cause = caught.value.__cause__
    assert isinstance(cause, litellm.BadRequestError) and cause.status_code == 400
    assert "Unrecognized request argument supplied: validation_context" in str(cause)
    assert server.rejections == ["Unrecognized request argument supplied: validation_context"]
    assert server.requests[-1]["validation_context"] == {"n_points": 2}


async def test_litellm_forwards_unknown_keywords_into_the_body(server: OpenAIStandIn) -> None:
    """Why nothing private may reach ``litellm.acompletion``: it sends unknown keywords on."""
    server.clear_requests()
    with pytest.raises(litellm.BadRequestError, match="validation_context"):
        await litellm.acompletion(
            model="openai/standin",
            api_base=server.base_url,
            api_key="sk-test",
            messages=[{"role": "user", "content": "hi"}],
            num_retries=0,
            validation_context={"n_points": 2},
        )
    assert set(server.requests[-1]) == {"model", "messages", "validation_context"}


# -- the command line, as users run it ------------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("mode", STRUCTURED_MODES)
def test_cli_grades_the_examples_against_the_strict_standin(tmp_path: Path, mode: str) -> None:
    with OpenAIStandIn(record_requests=1_000) as srv:
        out = tmp_path / "out.jsonl"
        command = [
            sys.executable, "-m", "cli", "grade", str(EXAMPLES),
            "--out", str(out),
            "--model", "openai/standin",
            "--api-base", srv.base_url,
            "--mode", mode,
            "--metrics", "coverage,defects",
            "--cache-dir", str(tmp_path / "cache"),
            "--quiet",
        ]  # fmt: skip
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=300,
        )
        rejections, bodies = srv.rejections, srv.requests
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 10
    assert [r["id"] for r in rows if r["status"] != "scored"] == []
    assert rejections == [] and _undocumented(bodies) == []
    # The preflight's one-token request, then coverage and defects for each of the 10 items.
    assert len(bodies) == 21
    assert bodies[0]["max_tokens"] == 1 and "response_format" not in bodies[0]
