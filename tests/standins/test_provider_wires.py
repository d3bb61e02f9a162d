"""The stand-in's Anthropic and Gemini wires, exercised through the real client stack.

litellm's ``anthropic/`` and ``gemini/`` adapters (and instructor over them) talk to the same
in-process stand-in as the OpenAI tests: round trips in every instructor mode, the strict body
checks, each API's error shapes and the litellm exception each one becomes, faults, and one
ledger for all three wires.
"""

from __future__ import annotations

import os

# litellm fetches Anthropic's beta-header table from GitHub on first use unless told not to.
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import instructor
import litellm
import pydantic
import pytest
from instructor.core import IncompleteOutputException, InstructorRetryException
from litellm.exceptions import (
    APIConnectionError,
    AuthenticationError,
    BadGatewayError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    RateLimitError,
    ServiceUnavailableError,
    Timeout,
)
from pydantic import BaseModel, Field

from standins import FaultKind, FaultPlan, OpenAIStandIn, Reply

litellm.suppress_debug_info = True


@dataclass(frozen=True)
class Target:
    """A litellm model on one of the stand-in's wires."""

    model: str
    family: Literal["anthropic", "gemini"]
    priced: bool  # in litellm's local cost map

    @property
    def name(self) -> str:
        """The model name the server sees (litellm strips the provider prefix)."""
        return self.model.split("/", 1)[1]

    def api_base(self, srv: OpenAIStandIn) -> str:
        return srv.anthropic_base_url if self.family == "anthropic" else srv.gemini_base_url


SONNET = Target("anthropic/claude-sonnet-4-5-20250929", "anthropic", priced=True)
# Not in litellm's cost map: JSON_SCHEMA goes through litellm's json_tool_call tool instead of
# output_format, a different wire path.
SONNET_35 = Target("anthropic/claude-3-5-sonnet-20241022", "anthropic", priced=False)
FLASH = Target("gemini/gemini-2.5-flash", "gemini", priced=True)
# Not in the cost map either: JSON_SCHEMA puts the schema into the prompt (a Python repr).
FLASH_15 = Target("gemini/gemini-1.5-flash", "gemini", priced=False)
TARGETS = [SONNET, SONNET_35, FLASH, FLASH_15]
PRIMARY = [SONNET, FLASH]
MODES = [
    instructor.Mode.TOOLS,
    instructor.Mode.JSON_SCHEMA,
    instructor.Mode.JSON,
    instructor.Mode.MD_JSON,
]


class Point(BaseModel):
    index: Literal["a", "b", "c"]
    covered: bool
    evidence: str | None = None


class Verdict(BaseModel):
    points: list[Point]
    reason: str


MESSAGES = [
    {"role": "system", "content": "You grade answers."},
    {"role": "user", "content": "[Bonus Points]: 1. grief 2. pride 3. fear\n[Response]: ..."},
]


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(record_requests=20, api_key="sk-test") as srv:
        yield srv


@pytest.fixture
def srv(server: OpenAIStandIn) -> OpenAIStandIn:
    server.faults = None
    server.handler = None
    server.plain_reply = None
    server.strict = True
    server.check_model = False
    server.reset_stats()
    server.clear_requests()
    return server


async def structured(
    srv: OpenAIStandIn,
    target: Target,
    mode: instructor.Mode,
    *,
    response_model: type[BaseModel] = Verdict,
    max_retries: int = 0,
) -> Any:
    client: Any = instructor.from_litellm(litellm.acompletion, mode=mode)
    return await client.chat.completions.create_with_completion(
        model=target.model,
        api_base=target.api_base(srv),
        api_key="sk-test",
        messages=MESSAGES,
        response_model=response_model,
        max_retries=max_retries,
        num_retries=0,
    )


async def plain(srv: OpenAIStandIn, target: Target, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"api_key": "sk-test", "num_retries": 0, **kwargs}
    return await litellm.acompletion(
        model=target.model, api_base=target.api_base(srv), messages=MESSAGES, **options
    )


def anthropic_post(srv: OpenAIStandIn, body: dict[str, Any], **headers: str) -> httpx.Response:
    sent = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01", **headers}
    return httpx.post(f"{srv.anthropic_base_url}/v1/messages", json=body, headers=sent, timeout=30)


def gemini_post(
    srv: OpenAIStandIn, body: dict[str, Any], model: str = "gemini-2.5-flash", **headers: str
) -> httpx.Response:
    url = f"{srv.gemini_base_url}/models/{model}:generateContent"
    sent = {"x-goog-api-key": "sk-test", **headers}
    return httpx.post(url, json=body, headers=sent, timeout=30)


ANTHROPIC_BODY = {
    "model": "claude-sonnet-4-5-20250929",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "x"}],
}
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "x"}]}]}


# -- round trips through the real client ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
async def test_each_mode_round_trips_a_valid_answer(
    srv: OpenAIStandIn, target: Target, mode: instructor.Mode
) -> None:
    result, completion = await structured(srv, target, mode)
    assert isinstance(result, Verdict)
    assert [point.index for point in result.points] == ["a"]
    stats = srv.stats()
    assert stats.outcomes == {"ok": 1}
    assert stats.families == {target.family: 1}
    assert srv.request_families == [target.family]
    # What litellm sends passes the strict check, and the usage it reports is the ledger's.
    assert srv.rejections == []
    assert completion.usage.prompt_tokens == stats.prompt_tokens > 0
    assert completion.usage.completion_tokens == stats.completion_tokens > 0
    cost = completion._hidden_params["response_cost"]
    if target.priced:
        key = target.name if target.family == "anthropic" else target.model
        assert cost == pytest.approx(stats.cost(key)) and cost > 0
    else:
        assert cost is None


async def test_tools_mode_sends_a_forced_tool_on_each_wire(srv: OpenAIStandIn) -> None:
    await structured(srv, SONNET, instructor.Mode.TOOLS)
    await structured(srv, FLASH, instructor.Mode.TOOLS)
    anthropic, gemini = srv.requests
    assert anthropic["tool_choice"] == {"type": "tool", "name": "Verdict"}
    assert anthropic["max_tokens"] == 64000  # litellm's default: the model's maximum output
    assert anthropic["tools"][0]["input_schema"]["required"] == ["points", "reason"]
    assert gemini["toolConfig"]["functionCallingConfig"] == {
        "mode": "ANY",
        "allowed_function_names": ["Verdict"],
    }
    assert gemini["tools"][0]["function_declarations"][0]["name"] == "Verdict"


async def test_json_schema_mode_takes_each_wires_structured_output(srv: OpenAIStandIn) -> None:
    for target in TARGETS:
        await structured(srv, target, instructor.Mode.JSON_SCHEMA)
    sonnet, sonnet_35, flash, flash_15 = srv.requests
    assert sonnet["output_format"]["type"] == "json_schema"  # with anthropic-beta
    assert sonnet_35["tool_choice"] == {"type": "tool", "name": "json_tool_call"}
    assert sonnet_35["tools"][0]["input_schema"]["properties"]["points"]["items"] == {
        "$ref": "/$defs/Point"  # root-path refs: the stand-in resolves them as Anthropic does
    }
    assert flash["generationConfig"]["response_json_schema"]["title"] == "Verdict"
    assert flash_15["generationConfig"] == {"response_mime_type": "application/json"}
    assert "Use this JSON schema" in flash_15["contents"][-1]["parts"][-1]["text"]


async def test_raw_answers_have_each_apis_shape(srv: OpenAIStandIn) -> None:
    tools = {"name": "grade", "input_schema": {"type": "object", "properties": {}}}
    forced = anthropic_post(
        srv, {**ANTHROPIC_BODY, "tools": [tools], "tool_choice": {"type": "any"}}
    ).json()
    assert forced["type"] == "message" and forced["stop_reason"] == "tool_use"
    assert forced["content"][0]["type"] == "tool_use" and forced["content"][0]["input"] == {}
    assert set(forced["usage"]) >= {"input_tokens", "output_tokens"}
    auto = anthropic_post(
        srv, {**ANTHROPIC_BODY, "tools": [tools], "tool_choice": {"type": "auto"}}
    ).json()
    assert auto["content"] == [{"type": "text", "text": "[Defect]: None"}]
    assert auto["stop_reason"] == "end_turn"
    # Gemini's own schema dialect: upper-case types.
    schema = {
        "type": "OBJECT",
        "properties": {"label": {"type": "STRING", "enum": ["kept", "dropped"]}},
        "required": ["label"],
    }
    config = {"responseMimeType": "application/json", "responseSchema": schema}
    answer = gemini_post(srv, {**GEMINI_BODY, "generationConfig": config}).json()
    candidate = answer["candidates"][0]
    assert candidate["content"]["parts"] == [{"text": '{"label": "kept"}'}]
    assert candidate["finishReason"] == "STOP"
    usage = answer["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert srv.stats().families == {"anthropic": 2, "gemini": 1}


async def test_handler_payloads_are_placed_by_each_wire(srv: OpenAIStandIn) -> None:
    answer = {"points": [{"index": "b", "covered": False}], "reason": "scripted"}
    srv.handler = [answer, answer, answer, Reply.text("plain text")]
    for target in PRIMARY:  # a dict is the tool input in tools mode...
        result, _ = await structured(srv, target, instructor.Mode.TOOLS)
        assert result.reason == "scripted"
    # ... and the text in a JSON mode.
    result, _ = await structured(srv, SONNET, instructor.Mode.JSON_SCHEMA)
    assert result.points[0].index == "b"
    assert (await plain(srv, FLASH)).choices[0].message.content == "plain text"
    seen: list[dict[str, Any]] = []

    def echo(body: dict[str, Any]) -> str:
        seen.append(body)
        return "echo"

    srv.handler = echo
    await plain(srv, SONNET)
    await plain(srv, FLASH)
    # The handler sees each wire's own body.
    assert "max_tokens" in seen[0] and "contents" in seen[1]


# -- strict like the real APIs -------------------------------------------------------------------


def test_anthropic_refuses_undocumented_fields_and_missing_ones(srv: OpenAIStandIn) -> None:
    srv.faults = FaultPlan(sequence=["empty"])
    unknown = anthropic_post(srv, {**ANTHROPIC_BODY, "top_n": 3})
    missing = anthropic_post(srv, {"model": "m", "messages": [{"role": "user", "content": "x"}]})
    output_format = {"type": "json_schema", "schema": {"type": "object"}}
    beta_without_header = anthropic_post(srv, {**ANTHROPIC_BODY, "output_format": output_format})
    assert [r.status_code for r in (unknown, missing, beta_without_header)] == [400] * 3
    message = "top_n: Extra inputs are not permitted"
    assert unknown.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
    }
    assert missing.json()["error"]["message"] == "max_tokens: Field required"
    assert beta_without_header.json()["error"]["message"].startswith("output_format: Extra")
    # The rejected requests drew no fault: the first accepted one gets the scripted "empty".
    assert anthropic_post(srv, ANTHROPIC_BODY).json()["content"] == []
    # Beta fields pass with an anthropic-beta header, as litellm sends output_format.
    beta = anthropic_post(
        srv,
        {**ANTHROPIC_BODY, "output_format": output_format},
        **{"anthropic-beta": "structured-outputs-2025-11-13"},
    )
    assert beta.status_code == 200 and beta.json()["content"][0]["text"] == "{}"
    assert srv.rejections == [
        "top_n: Extra inputs are not permitted",
        "max_tokens: Field required",
        "output_format: Extra inputs are not permitted",
    ]
    assert srv.stats().outcomes == {"bad_request": 3, "empty": 1, "ok": 1}


def test_anthropic_needs_the_version_header() -> None:
    with OpenAIStandIn() as srv:
        reply = httpx.post(f"{srv.url}/v1/messages", json=ANTHROPIC_BODY, timeout=30)
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == "anthropic-version: header is required"


def test_gemini_refuses_unknown_fields_at_top_level_and_in_generation_config(
    srv: OpenAIStandIn,
) -> None:
    config = {"response_mime_type": "text/plain", "maxOutputTokens": 5, "top_n": 2}
    reply = gemini_post(srv, {**GEMINI_BODY, "labels": {"a": "b"}, "generationConfig": config})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    # Vertex AI's labels are not the Gemini API's.
    assert error["message"] == (
        'Invalid JSON payload received. Unknown name "labels": Cannot find field.\n'
        "Invalid JSON payload received. Unknown name \"top_n\" at 'generation_config': "
        "Cannot find field."
    )
    assert (
        gemini_post(srv, {"contents": []})
        .json()["error"]["message"]
        .startswith("* GenerateContentRequest.contents: contents is not specified")
    )
    # Both spellings of every field are Google's (proto and JSON names).
    mixed = {
        **GEMINI_BODY,
        "system_instruction": {"parts": [{"text": "s"}]},
        "safetySettings": [],
        "generation_config": {"responseMimeType": "text/plain", "max_output_tokens": 5},
    }
    assert gemini_post(srv, mixed).status_code == 200
    assert srv.stats().outcomes == {"bad_request": 2, "ok": 1}


@pytest.mark.parametrize("family", ["anthropic", "gemini"])
def test_lenient_accepts_unknown_fields(family: str) -> None:
    with OpenAIStandIn(strict=False) as srv:
        if family == "anthropic":
            reply = anthropic_post(srv, {**ANTHROPIC_BODY, "top_n": 3})
        else:
            reply = gemini_post(srv, {**GEMINI_BODY, "labels": {}})
        assert reply.status_code == 200
        assert srv.rejections == []


async def test_litellm_extra_body_is_refused_on_both_wires(srv: OpenAIStandIn) -> None:
    # litellm merges extra_body into Gemini's body, but sends Anthropic a literal
    # ``extra_body`` field: both are undocumented, both are 400s.
    with pytest.raises(BadRequestError, match="extra_body: Extra inputs are not permitted"):
        await plain(srv, SONNET, extra_body={"top_n": 3})
    with pytest.raises(BadRequestError, match='Unknown name \\\\"top_n\\\\"'):
        await plain(srv, FLASH, extra_body={"top_n": 3})
    assert [sorted(body) for body in srv.requests] == [
        ["extra_body", "max_tokens", "messages", "model", "system"],
        ["contents", "system_instruction", "top_n"],
    ]
    assert srv.stats().outcomes == {"bad_request": 2}


# -- errors as litellm raises them ---------------------------------------------------------------


@pytest.mark.parametrize("target", PRIMARY, ids=lambda t: t.family)
async def test_rate_limits_carry_retry_after(srv: OpenAIStandIn, target: Target) -> None:
    srv.faults = FaultPlan(sequence=["rate_limit", "rate_limit_no_header"], retry_after=7)
    with pytest.raises(RateLimitError) as limited:
        await plain(srv, target)
    assert limited.value.status_code == 429
    assert limited.value.litellm_response_headers["retry-after"] == "7"  # type: ignore[attr-defined]
    if target.family == "gemini":  # Google's own place for it: RetryInfo in the body
        assert '"retryDelay": "7s"' in str(limited.value)
    else:
        assert "rate_limit_error" in str(limited.value)
    with pytest.raises(RateLimitError) as bare:
        await plain(srv, target)
    headers = getattr(bare.value, "litellm_response_headers", None) or {}
    assert "retry-after" not in headers


ANTHROPIC_5XX: list[tuple[int, type[Exception], int, str]] = [
    (500, InternalServerError, 500, "api_error"),
    (502, BadGatewayError, 502, "api_error"),
    (503, ServiceUnavailableError, 503, "api_error"),
    # litellm reads "overloaded_error" before the status: a 529 is a 500 InternalServerError.
    (529, InternalServerError, 500, "overloaded_error"),
]
GEMINI_5XX: list[tuple[int, type[Exception], int, str]] = [
    (500, InternalServerError, 500, "INTERNAL"),
    (502, APIConnectionError, 500, "UNAVAILABLE"),
    # Google's 503 text ("The model is overloaded.") makes litellm raise InternalServerError.
    (503, InternalServerError, 500, "UNAVAILABLE"),
]


@pytest.mark.parametrize(
    ("target", "cases"), [(SONNET, ANTHROPIC_5XX), (FLASH, GEMINI_5XX)], ids=["anthropic", "gemini"]
)
async def test_server_errors_raise_the_documented_classes(
    srv: OpenAIStandIn, target: Target, cases: list[tuple[int, type[Exception], int, str]]
) -> None:
    statuses = tuple(status for status, *_ in cases)
    srv.faults = FaultPlan(sequence=["server_error"] * len(cases), server_error_statuses=statuses)
    for _, error, status_code, kind in cases:
        with pytest.raises(error) as excinfo:
            await plain(srv, target)
        assert type(excinfo.value) is error
        assert excinfo.value.status_code == status_code  # type: ignore[attr-defined]
        assert kind in str(excinfo.value)
    assert srv.stats().outcomes == {"server_error": len(cases)}


@pytest.mark.parametrize("target", PRIMARY, ids=lambda t: t.family)
async def test_a_wrong_key_is_an_authentication_error(srv: OpenAIStandIn, target: Target) -> None:
    with pytest.raises(AuthenticationError) as excinfo:
        await plain(srv, target, api_key="sk-wrong")
    if target.family == "anthropic":
        assert "authentication_error" in str(excinfo.value)
    else:  # Google answers a wrong key with 400 INVALID_ARGUMENT; litellm reads the message.
        assert "API key not valid" in str(excinfo.value)
    assert excinfo.value.status_code == 401
    assert srv.stats().outcomes == {"unauthorized": 1}


def test_gemini_without_a_key_is_permission_denied(srv: OpenAIStandIn) -> None:
    url = f"{srv.gemini_base_url}/models/gemini-2.5-flash:generateContent"
    reply = httpx.post(url, json=GEMINI_BODY, timeout=30)
    assert reply.status_code == 403
    assert reply.json()["error"]["status"] == "PERMISSION_DENIED"
    # The key may also travel as ?key=.
    assert httpx.post(f"{url}?key=sk-test", json=GEMINI_BODY, timeout=30).status_code == 200


@pytest.mark.parametrize("target", PRIMARY, ids=lambda t: t.family)
async def test_an_unknown_model_is_not_found(srv: OpenAIStandIn, target: Target) -> None:
    srv.check_model = True
    with pytest.raises(NotFoundError) as excinfo:
        await plain(srv, target)
    assert target.name in str(excinfo.value)
    assert srv.stats().outcomes == {"model_not_found": 1}


async def test_a_wrong_api_base_is_a_404_naming_the_right_one(srv: OpenAIStandIn) -> None:
    # The OpenAI habit (…/v1) on the Anthropic adapter: litellm posts to /v1/v1/messages.
    with pytest.raises(NotFoundError, match="Anthropic: api_base http://127"):
        await litellm.acompletion(
            model=SONNET.model, api_base=srv.base_url, api_key="sk-test", messages=MESSAGES,
            num_retries=0,
        )  # fmt: skip
    assert srv.stats().requests == 0  # not a generation request


@pytest.mark.parametrize("target", PRIMARY, ids=lambda t: t.family)
async def test_timeouts_and_resets(target: Target) -> None:
    # Its own server: the held request is released only when the server stops.
    plan = FaultPlan(sequence=["timeout", "reset", "ok", "reset", "reset"], timeout_hold=600)
    with OpenAIStandIn(faults=plan) as srv:
        with pytest.raises(Timeout) as timed_out:
            await plain(srv, target, timeout=0.3)
        assert timed_out.value.status_code == 408
        # litellm's own HTTP handler (these adapters use it; openai/ goes through the OpenAI
        # SDK) sends a request once more on a new connection after a connection error, whatever
        # num_retries says: a single reset costs a second request and raises nothing.
        answer = await plain(srv, target)
        assert answer.choices[0].message.content == "[Included Bonus Points]: 1"
        assert srv.stats().outcomes == {"timeout": 1, "reset": 1, "ok": 1}
        # Two in a row surface.
        error = InternalServerError if target.family == "anthropic" else APIConnectionError
        with pytest.raises(error, match="Connection reset by peer") as reset:
            await plain(srv, target)
        assert type(reset.value) is error
        assert srv.stats().outcomes["reset"] == 3


# -- output faults -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA], ids=str)
@pytest.mark.parametrize("target", PRIMARY, ids=lambda t: t.family)
async def test_truncation_is_incomplete_output(
    srv: OpenAIStandIn, target: Target, mode: instructor.Mode
) -> None:
    srv.faults = FaultPlan(sequence=["truncated"])
    with pytest.raises(IncompleteOutputException) as excinfo:
        await structured(srv, target, mode, max_retries=2)
    # stop_reason max_tokens / finishReason MAX_TOKENS: raised at once, never re-asked.
    completion: Any = excinfo.value.last_completion
    assert completion.choices[0].finish_reason == "length"
    assert srv.stats().outcomes == {"truncated": 1}


@pytest.mark.parametrize(
    ("kind", "cause", "finish"),
    [
        ("malformed_json", "ResponseParsingError", "stop"),  # no tool_use: prose instead
        ("invalid", "ValidationError", "tool_calls"),
        ("empty", "ResponseParsingError", "stop"),
        ("refusal", "ResponseParsingError", "content_filter"),
    ],
)
@pytest.mark.parametrize("target", PRIMARY, ids=lambda t: t.family)
async def test_output_faults_in_tools_mode_are_reasked(
    srv: OpenAIStandIn, target: Target, kind: FaultKind, cause: str, finish: str
) -> None:
    srv.faults = FaultPlan(sequence=[kind] * 2, invalid_variant="out_of_range")
    with pytest.raises(InstructorRetryException) as excinfo:
        await structured(srv, target, instructor.Mode.TOOLS, max_retries=1)
    assert excinfo.value.n_attempts == 2 and srv.stats().requests == 2
    assert type(excinfo.value.__cause__).__name__ == cause
    if kind == "invalid":
        assert isinstance(excinfo.value.__cause__, pydantic.ValidationError)
        assert excinfo.value.__cause__.errors()[0]["type"] == "literal_error"
    completion: Any = excinfo.value.last_completion
    assert completion.choices[0].finish_reason == finish
    content = completion.choices[0].message.content
    if kind == "refusal":
        # Anthropic: stop_reason "refusal" with the text; Gemini: a SAFETY stop, no content.
        assert ("sorry" in content) if target.family == "anthropic" else content is None
    elif kind == "empty":
        assert content is None


async def test_refusal_is_on_the_wire_in_each_apis_terms(srv: OpenAIStandIn) -> None:
    srv.faults = FaultPlan(sequence=["refusal", "refusal", "truncated", "truncated"])
    tools = {"name": "grade", "input_schema": {"type": "object", "properties": {}}}
    forced = {**ANTHROPIC_BODY, "tools": [tools], "tool_choice": {"type": "tool", "name": "grade"}}
    refused = anthropic_post(srv, forced).json()
    assert refused["stop_reason"] == "refusal" and refused["content"][0]["type"] == "text"
    calling = {
        "tools": [{"functionDeclarations": [{"name": "grade", "parameters": {"type": "OBJECT"}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
    }
    blocked = gemini_post(srv, {**GEMINI_BODY, **calling}).json()["candidates"][0]
    assert blocked["finishReason"] == "SAFETY" and "content" not in blocked
    assert anthropic_post(srv, ANTHROPIC_BODY).json()["stop_reason"] == "max_tokens"
    cut = gemini_post(srv, GEMINI_BODY).json()["candidates"][0]
    assert cut["finishReason"] == "MAX_TOKENS"
    assert cut["content"]["parts"] == [{"text": "[Defect]: None"[:7]}]


# -- what litellm's schema rewriting costs a judge -----------------------------------------------


class Scored(BaseModel):
    index: Literal[1, 2, 3]
    covered: bool


class Three(BaseModel):
    points: list[Point] = Field(min_length=3, max_length=3)


async def test_gemini_function_declarations_lose_integer_enums(srv: OpenAIStandIn) -> None:
    # Gemini's Schema allows enums on strings only; litellm drops ``enum: [1, 2, 3]`` from the
    # function declaration, so nothing but the prompt keeps the index in range (the stand-in
    # answers the schema it was sent: 0).
    with pytest.raises(InstructorRetryException) as excinfo:
        await structured(srv, FLASH, instructor.Mode.TOOLS, response_model=Scored)
    parameters = srv.requests[-1]["tools"][0]["function_declarations"][0]["parameters"]
    assert parameters["properties"]["index"] == {"title": "Index", "type": "integer"}
    assert excinfo.value.__cause__.errors()[0]["type"] == "literal_error"  # type: ignore[union-attr]
    # JSON_SCHEMA mode sends responseJsonSchema, which keeps the enum.
    result, _ = await structured(srv, FLASH, instructor.Mode.JSON_SCHEMA, response_model=Scored)
    assert result.index == 1


async def test_anthropic_output_format_loses_item_counts(srv: OpenAIStandIn) -> None:
    # Anthropic's structured outputs take no minItems above 1: litellm moves the counts into a
    # description, so a list of exactly three is only asked for in prose.
    with pytest.raises(InstructorRetryException) as excinfo:
        await structured(srv, SONNET, instructor.Mode.JSON_SCHEMA, response_model=Three)
    points = srv.requests[-1]["output_format"]["schema"]["properties"]["points"]
    assert "minItems" not in points
    assert points["description"] == "Note: minimum number of items: 3, maximum number of items: 3."
    assert excinfo.value.__cause__.errors()[0]["type"] == "too_short"  # type: ignore[union-attr]
    # TOOLS mode keeps the counts in the tool's input_schema.
    result, _ = await structured(srv, SONNET, instructor.Mode.TOOLS, response_model=Three)
    assert [point.index for point in result.points] == ["a", "b", "c"]


# -- one ledger for every wire -------------------------------------------------------------------


async def test_every_wire_shares_the_fault_plan_and_the_books(srv: OpenAIStandIn) -> None:
    srv.faults = FaultPlan(sequence=["empty", "ok", "empty"])
    openai = await litellm.acompletion(
        model="openai/standin", api_base=srv.base_url, api_key="sk-test", messages=MESSAGES,
        num_retries=0,
    )  # fmt: skip
    anthropic = await plain(srv, SONNET)
    gemini = await plain(srv, FLASH)
    # One sequence, consumed across the wires in arrival order.
    assert openai.choices[0].message.content == ""
    assert anthropic.choices[0].message.content == "[Included Bonus Points]: 1"
    assert gemini.choices[0].message.content is None
    stats = srv.stats()
    assert stats.requests == 3
    assert stats.families == {"openai": 1, "anthropic": 1, "gemini": 1}
    assert stats.outcomes == {"empty": 2, "ok": 1}
    assert srv.request_families == ["openai", "anthropic", "gemini"]
    assert "messages" in srv.requests[0] and "contents" in srv.requests[2]
    reported = [r.usage for r in (openai, anthropic, gemini)]
    assert sum(u.prompt_tokens for u in reported) == stats.prompt_tokens
    assert sum(u.completion_tokens for u in reported) == stats.completion_tokens


# -- CLI -----------------------------------------------------------------------------------------


@pytest.mark.process
def test_cli_serves_every_wire() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = subprocess.Popen(
        [sys.executable, "-m", "standins.openai_server", "--port", "0", "--fault", "empty=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        base_url = process.stdout.readline().strip()
        root = base_url.removesuffix("/v1")
        assert f"anthropic api_base {root} " in process.stderr.readline()
        headers = {"anthropic-version": "2023-06-01"}
        anthropic = httpx.post(f"{root}/v1/messages", json=ANTHROPIC_BODY, headers=headers)
        assert anthropic.json()["content"] == []  # the empty fault, on this wire too
        gemini = httpx.post(f"{root}/v1beta/models/m:generateContent", json=GEMINI_BODY)
        assert gemini.json()["candidates"][0]["content"]["parts"] == [{"text": ""}]
        strict = httpx.post(f"{root}/v1/messages", json={**ANTHROPIC_BODY, "x": 1}, headers=headers)
        assert strict.status_code == 400
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
