"""The OpenAI stand-in server, exercised through the real client stack (instructor + litellm)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import instructor
import jsonschema
import litellm
import pydantic
import pytest
from instructor.core import IncompleteOutputException, InstructorRetryException
from litellm.exceptions import (
    BadGatewayError,
    InternalServerError,
    RateLimitError,
    ServiceUnavailableError,
    Timeout,
)
from pydantic import BaseModel, Field

from core.errors import ConfigError
from standins import (
    FAULT_KINDS,
    FaultKind,
    FaultPlan,
    OpenAIStandIn,
    Reply,
    SchemaError,
    find_embedded_schema,
    invalid_instance,
    openai_chat_params,
    schema_instance,
)

litellm.suppress_debug_info = True
REPO = Path(__file__).resolve().parents[2]
MODES = [
    instructor.Mode.TOOLS,
    instructor.Mode.JSON_SCHEMA,
    instructor.Mode.JSON,
    instructor.Mode.MD_JSON,
]


class Point(BaseModel):
    index: Literal[1, 2, 3]
    included: bool
    evidence: str | None = None


class Coverage(BaseModel):
    points: list[Point] = Field(min_length=3, max_length=3)
    reason: str


COVERAGE_MESSAGES = [
    {"role": "system", "content": "You grade answers."},
    {"role": "user", "content": "[Bonus Points]: 1. grief 2. pride 3. fear\n[Response]: ..."},
]


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(record_requests=20) as srv:
        yield srv


@pytest.fixture
def srv(server: OpenAIStandIn) -> OpenAIStandIn:
    server.faults = None
    server.handler = None
    server.plain_reply = None
    server.reset_stats()
    server.clear_requests()
    return server


async def structured(
    srv: OpenAIStandIn,
    mode: instructor.Mode,
    *,
    max_retries: int = 0,
    response_model: type[BaseModel] = Coverage,
    **kwargs: Any,
) -> Any:
    # Typed as the sync client by instructor's stubs; with an async callable it is async.
    client: Any = instructor.from_litellm(litellm.acompletion, mode=mode)
    return await client.chat.completions.create_with_completion(
        model="openai/standin",
        api_base=srv.base_url,
        api_key="sk-test",
        messages=COVERAGE_MESSAGES,
        response_model=response_model,
        max_retries=max_retries,
        num_retries=0,
        **kwargs,
    )


async def plain(
    srv: OpenAIStandIn, messages: list[dict[str, str]] | None = None, **kwargs: Any
) -> Any:
    return await litellm.acompletion(
        model="openai/standin",
        api_base=srv.base_url,
        api_key="sk-test",
        messages=messages or COVERAGE_MESSAGES,
        num_retries=0,
        **kwargs,
    )


# -- schema instances ----------------------------------------------------------------------------


class Label(BaseModel):
    name: Literal["kept"] = "kept"
    tags: list[str] = Field(min_length=2, json_schema_extra={"uniqueItems": True})


class Tree(BaseModel):
    value: int = Field(ge=10, le=12)
    ratio: float = Field(gt=0, lt=1)
    code: str = Field(min_length=6, max_length=8)
    when: str = Field(json_schema_extra={"format": "date-time"})
    kind: int | str | None
    child: Tree | None = None
    labels: list[Label]
    choice: Literal["a", "b"] | None
    mapping: dict[str, int]


@pytest.mark.parametrize("model", [Coverage, Tree, Label, Point])
def test_schema_instance_validates_against_pydantic_and_jsonschema(model: type[BaseModel]) -> None:
    schema = model.model_json_schema()
    instance = schema_instance(schema)
    jsonschema.validate(instance, schema)
    model.model_validate(instance)
    assert schema_instance(schema) == instance  # deterministic


def test_schema_instance_gives_unique_enum_values_across_array_items() -> None:
    instance = schema_instance(Coverage.model_json_schema())
    assert [point["index"] for point in instance["points"]] == [1, 2, 3]


def test_schema_instance_handles_refs_type_lists_and_bounds() -> None:
    schema = {
        "$defs": {"Id": {"type": ["null", "integer"], "minimum": 5, "maximum": 5}},
        "type": "object",
        "properties": {
            "id": {"$ref": "#/$defs/Id"},
            "level": {"oneOf": [{"type": "null"}, {"const": "high"}]},
            "nums": {
                "type": "array",
                "items": {"type": "number", "exclusiveMinimum": 2},
                "minItems": 2,
            },
            "flags": {
                "type": "array",
                "items": {"type": "boolean"},
                "uniqueItems": True,
                "minItems": 2,
            },
            "short": {"type": "string", "maxLength": 2},
        },
        "required": ["id", "level"],
    }
    instance = schema_instance(schema)
    jsonschema.validate(instance, schema)
    assert instance["id"] == 5
    assert instance["level"] == "high"
    assert sorted(instance["flags"]) == [False, True]
    assert all(n > 2 for n in instance["nums"])


def test_schema_instance_rejects_a_dangling_ref() -> None:
    with pytest.raises(SchemaError, match="points nowhere"):
        schema_instance({"properties": {"x": {"$ref": "#/$defs/Missing"}}})


@pytest.mark.parametrize("variant", ["out_of_range", "missing"])
def test_invalid_instance_fails_the_schema(variant: Literal["out_of_range", "missing"]) -> None:
    schema = Coverage.model_json_schema()
    valid = schema_instance(schema)
    broken, used = invalid_instance(valid, schema, variant)
    assert used == variant
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    assert valid == schema_instance(schema)  # the input is not modified


def test_invalid_instance_duplicates_an_index() -> None:
    schema = Coverage.model_json_schema()
    broken, used = invalid_instance(schema_instance(schema), schema, "duplicate")
    assert used == "duplicate"
    indices = [point["index"] for point in broken["points"]]
    assert len(set(indices)) < len(indices)


def test_invalid_instance_falls_back_to_a_wrong_type() -> None:
    broken, used = invalid_instance({}, {"type": "object"}, "duplicate")
    assert (broken, used) == ([], "wrong_type")


def test_find_embedded_schema_reads_the_object_after_the_marker() -> None:
    text = 'Intro {"not": 1} match the following json_schema:\n\n{"type": "object"}\n\nThanks'
    assert find_embedded_schema(text) == {"type": "object"}
    assert find_embedded_schema("no schema here {}") is None


# -- configuration -------------------------------------------------------------------------------


def test_fault_plan_validation_names_the_field() -> None:
    with pytest.raises(ConfigError) as excinfo:
        FaultPlan({"rate_limit": 0.7, "reset": 0.4})
    assert excinfo.value.field == "probabilities"
    with pytest.raises(ConfigError) as excinfo:
        FaultPlan(sequence=["ok", "explode"])  # type: ignore[list-item]
    assert excinfo.value.field == "sequence[1]"
    with pytest.raises(ConfigError, match="kind=probability"):
        FaultPlan.from_specs(["malformed_json"])
    plan = FaultPlan.from_specs(["malformed_json=0.25", "reset=0.5"], seed=3)
    assert dict(plan.probabilities) == {"malformed_json": 0.25, "reset": 0.5}


def test_refuses_a_non_loopback_host() -> None:
    with pytest.raises(ConfigError) as excinfo:
        OpenAIStandIn(host="0.0.0.0")
    assert excinfo.value.field == "host"


def test_fault_probabilities_are_seeded_and_counted() -> None:
    plan = FaultPlan({"empty": 0.5}, seed=11)
    outcomes = []
    for _ in range(2):
        with OpenAIStandIn(faults=plan) as srv, httpx.Client(base_url=srv.base_url) as client:
            for _ in range(20):
                client.post(
                    "/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
                )
            outcomes.append(srv.stats().outcomes)
    assert outcomes[0] == outcomes[1]
    assert 0 < outcomes[0]["empty"] < 20
    assert outcomes[0]["empty"] + outcomes[0]["ok"] == 20


# -- strict like OpenAI's API ---------------------------------------------------------------------

# OpenAI's documented chat-completions request fields (its API reference); the SDK may add more.
DOCUMENTED = {
    "model", "messages", "audio", "frequency_penalty", "function_call", "functions",
    "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities",
    "n", "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop",
    "store", "stream", "stream_options", "temperature", "tool_choice", "tools", "top_logprobs",
    "top_p", "user", "verbosity", "web_search_options",
}  # fmt: skip
MESSAGES = [{"role": "user", "content": "x"}]


def unrecognized(message: str) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


def test_documented_params_come_from_the_sdk() -> None:
    assert openai_chat_params() >= DOCUMENTED
    # Options litellm or instructor consume must never count as request fields.
    private = {"validation_context", "context", "max_retries", "hooks", "strict", "api_base"}
    private |= {"api_key", "base_url", "timeout", "num_retries", "extra_body", "drop_params"}
    assert not private & openai_chat_params()


def test_unknown_fields_get_openais_400_and_are_recorded(srv: OpenAIStandIn) -> None:
    assert srv.strict
    srv.faults = FaultPlan(sequence=["empty"])
    with httpx.Client(base_url=srv.base_url, timeout=30) as client:
        one = client.post(
            "/chat/completions", json={"model": "standin", "messages": MESSAGES, "top_k": 5}
        )
        two = client.post(
            "/chat/completions",
            json={"messages": MESSAGES, "validation_context": {}, "num_retries": 0},
        )
        # Unknown fields are reported even when the rest of the body is broken too.
        broken = client.post("/chat/completions", json={"messages": [], "api_base": "x"})
        # Every documented field at once (null values: the stand-in only checks the names;
        # the ones that change the answer's shape are left out).
        shaping = {"messages", "stream", "stream_options", "tools", "tool_choice"}
        shaping |= {"response_format", "functions", "function_call"}
        nulls = dict.fromkeys(DOCUMENTED - shaping)
        every = client.post("/chat/completions", json={"messages": MESSAGES, **nulls})
    assert one.status_code == two.status_code == broken.status_code == 400
    assert one.json() == unrecognized("Unrecognized request argument supplied: top_k")
    assert two.json() == unrecognized(
        "Unrecognized request arguments supplied: validation_context, num_retries"
    )
    assert broken.json() == unrecognized("Unrecognized request argument supplied: api_base")
    # Documented fields pass, and the rejected requests drew no fault: this one gets "empty".
    assert every.status_code == 200
    assert every.json()["choices"][0]["message"]["content"] == ""
    assert [sorted(body) for body in srv.requests[:3]] == [
        ["messages", "model", "top_k"],
        ["messages", "num_retries", "validation_context"],
        ["api_base", "messages"],
    ]
    assert len(srv.requests) == 4
    assert srv.rejections == [r.json()["error"]["message"] for r in (one, two, broken)]
    assert srv.stats().outcomes == {"bad_request": 3, "empty": 1}


def test_lenient_accepts_unknown_fields() -> None:
    with OpenAIStandIn(strict=False) as srv:
        reply = httpx.post(
            f"{srv.base_url}/chat/completions",
            json={"messages": MESSAGES, "validation_context": {"n_points": 2}, "top_k": 5},
            timeout=30,
        )
        assert reply.status_code == 200
        assert srv.rejections == []
        assert srv.requests[-1]["top_k"] == 5


async def test_the_real_client_sees_a_bad_request(srv: OpenAIStandIn) -> None:
    with pytest.raises(litellm.BadRequestError, match="Unrecognized request argument"):
        await plain(srv, validation_context={"n_points": 2})


# -- round trips through the real client ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
async def test_each_mode_round_trips_a_valid_answer(
    srv: OpenAIStandIn, mode: instructor.Mode
) -> None:
    result, completion = await structured(srv, mode)
    assert [point.index for point in result.points] == [1, 2, 3]
    stats = srv.stats()
    assert stats.outcomes == {"ok": 1}
    assert completion.usage.prompt_tokens == stats.prompt_tokens > 0
    assert completion.usage.completion_tokens == stats.completion_tokens > 0
    sent = srv.requests[-1]
    assert sent["model"] == "standin"
    if mode is instructor.Mode.TOOLS:
        assert sent["tool_choice"]["function"]["name"] == "Coverage"


async def test_plain_requests_get_the_chartom_shaped_default(srv: OpenAIStandIn) -> None:
    coverage = await plain(srv)
    assert coverage.choices[0].message.content == "[Included Bonus Points]: 1"
    defects = await plain(srv, [{"role": "user", "content": "[Story Plot]: ... [Response]: ..."}])
    assert defects.choices[0].message.content == "[Defect]: None"
    srv.plain_reply = "custom"
    assert (await plain(srv)).choices[0].message.content == "custom"
    assert (
        defects.usage.total_tokens == defects.usage.prompt_tokens + defects.usage.completion_tokens
    )


async def test_streaming_answers_sse_with_usage(srv: OpenAIStandIn) -> None:
    stream = await plain(srv, stream=True, stream_options={"include_usage": True})
    parts, usage = [], None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        usage = getattr(chunk, "usage", None) or usage
    assert "".join(parts) == "[Included Bonus Points]: 1"
    assert usage is not None and usage.completion_tokens > 0


async def test_scripted_replies_are_consumed_in_order_then_fail(srv: OpenAIStandIn) -> None:
    answer = {"points": [{"index": i, "included": i == 2} for i in (1, 2, 3)], "reason": "scripted"}
    srv.handler = [answer, json.dumps(answer), Reply.text("plain text")]
    tools, _ = await structured(srv, instructor.Mode.TOOLS)
    md, _ = await structured(srv, instructor.Mode.MD_JSON)
    assert tools.reason == md.reason == "scripted"
    assert [p.included for p in tools.points] == [False, True, False]
    assert (await plain(srv)).choices[0].message.content == "plain text"
    with pytest.raises(InternalServerError, match="ran out"):
        await plain(srv)
    assert srv.stats().outcomes == {"ok": 3, "handler_error": 1}
    assert "ran out after 3 replies" in srv.handler_errors[-1]


async def test_callable_handler_sees_the_exact_request(srv: OpenAIStandIn) -> None:
    seen: list[dict[str, Any]] = []

    async def handler(body: dict[str, Any]) -> str:
        seen.append(body)
        return f"echo: {body['messages'][-1]['content']}"

    srv.handler = handler
    reply = await plain(srv, [{"role": "user", "content": "exact prompt"}], temperature=0.2)
    assert reply.choices[0].message.content == "echo: exact prompt"
    assert seen[0]["temperature"] == 0.2
    assert srv.requests[-1]["messages"] == [{"role": "user", "content": "exact prompt"}]


def test_request_recording_keeps_the_last_n() -> None:
    with OpenAIStandIn(record_requests=2) as srv, httpx.Client(base_url=srv.base_url) as client:
        for text in ("one", "two", "three"):
            client.post("/chat/completions", json={"messages": [{"role": "user", "content": text}]})
        assert [r["messages"][0]["content"] for r in srv.requests] == ["two", "three"]
        assert srv.stats().requests == 3


async def test_max_in_flight_counts_concurrent_requests(srv: OpenAIStandIn) -> None:
    state: dict[str, Any] = {"arrived": 0, "all_in": None}

    async def barrier(body: dict[str, Any]) -> str:
        # Hold every request until all eight are inside the server at once: no timing involved.
        # The handler runs on the server's loop, so the event is created there.
        if state["all_in"] is None:
            state["all_in"] = asyncio.Event()
        state["arrived"] += 1
        if state["arrived"] == 8:
            state["all_in"].set()
        await asyncio.wait_for(state["all_in"].wait(), 20)
        return "done"

    srv.handler = barrier
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
        body = {"messages": [{"role": "user", "content": "x"}]}
        replies = await asyncio.gather(
            *(client.post("/chat/completions", json=body) for _ in range(8))
        )
    assert [r.status_code for r in replies] == [200] * 8
    stats = srv.stats()
    assert stats.max_in_flight == 8
    assert stats.in_flight == 0
    assert stats.requests == stats.ok == 8


async def test_async_context_manager_runs_on_the_callers_loop() -> None:
    async with OpenAIStandIn(latency=0.01) as srv, httpx.AsyncClient() as client:
        health = await client.get(f"{srv.url}/health")
        models = await client.get(f"{srv.base_url}/models")
        bad = await client.post(f"{srv.base_url}/chat/completions", content=b"{nope")
        no_messages = await client.post(f"{srv.base_url}/chat/completions", json={"model": "m"})
    assert health.json() == {"status": "ok"}
    assert models.json()["data"][0]["id"] == "standin"
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    assert "'messages'" in no_messages.json()["error"]["message"]
    assert srv.stats().outcomes == {"bad_request": 2}


# -- faults as the client sees them --------------------------------------------------------------


async def test_http_faults_raise_the_documented_litellm_errors(srv: OpenAIStandIn) -> None:
    srv.faults = FaultPlan(
        sequence=[
            "rate_limit",
            "rate_limit_no_header",
            "server_error",
            "server_error",
            "server_error",
            "reset",
        ],
        retry_after=7,
    )
    with pytest.raises(RateLimitError) as limited:
        await plain(srv)
    # litellm keeps the provider's headers here; ``exc.response.headers`` does not have them.
    assert limited.value.litellm_response_headers["retry-after"] == "7"  # type: ignore[attr-defined]
    with pytest.raises(RateLimitError) as no_header:
        await plain(srv)
    headers = getattr(no_header.value, "litellm_response_headers", None) or {}
    assert "retry-after" not in headers
    statuses: list[tuple[int, type[Exception]]] = [
        (500, InternalServerError),
        (502, BadGatewayError),
        (503, ServiceUnavailableError),
    ]
    for status, error in statuses:
        with pytest.raises(error) as excinfo:
            await plain(srv)
        assert getattr(excinfo.value, "status_code", None) == status
    with pytest.raises(InternalServerError, match="Connection error"):
        await plain(srv)
    outcomes = srv.stats().outcomes
    assert outcomes == {"rate_limit": 1, "rate_limit_no_header": 1, "server_error": 3, "reset": 1}


async def test_instructor_wraps_http_faults_without_retrying(srv: OpenAIStandIn) -> None:
    srv.faults = FaultPlan(sequence=["rate_limit"])
    with pytest.raises(InstructorRetryException) as excinfo:
        await structured(srv, instructor.Mode.TOOLS, max_retries=2)
    assert isinstance(excinfo.value.__cause__, RateLimitError)
    assert excinfo.value.n_attempts == 1
    assert excinfo.value.last_completion is None
    assert srv.stats().requests == 1


async def test_timeout_fault_raises_litellm_timeout_and_does_not_block_shutdown() -> None:
    with OpenAIStandIn(faults=FaultPlan(sequence=["timeout", "timeout"], timeout_hold=600)) as srv:
        with pytest.raises(Timeout):
            await plain(srv, timeout=0.3)
        # A second held request is still in the server when it stops.
        thread = threading.Thread(
            target=lambda: httpx.post(
                f"{srv.base_url}/chat/completions",
                json={"messages": [{"role": "user", "content": "x"}]},
                timeout=60,
            ),
            daemon=True,
        )
        thread.start()
        deadline = time.monotonic() + 20
        while srv.stats().in_flight < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert srv.stats().in_flight == 2
    thread.join(30)
    assert not thread.is_alive()  # released by shutdown rather than after 600 s
    assert srv.stats().outcomes == {"timeout": 2}


@pytest.mark.parametrize(
    "mode", [instructor.Mode.TOOLS, instructor.Mode.JSON], ids=lambda m: m.name
)
@pytest.mark.parametrize(
    ("kind", "error_type", "quoted"),
    [
        ("malformed_json", "json_invalid", "Invalid JSON"),
        ("invalid", "literal_error", "Input should be 1, 2 or 3"),
    ],
)
async def test_output_faults_are_reasked_then_raise(
    srv: OpenAIStandIn, mode: instructor.Mode, kind: FaultKind, error_type: str, quoted: str
) -> None:
    srv.faults = FaultPlan(sequence=[kind] * 3, invalid_variant="out_of_range")
    with pytest.raises(InstructorRetryException) as excinfo:
        await structured(srv, mode, max_retries=2)
    error = excinfo.value
    assert error.n_attempts == 3
    assert srv.stats().requests == 3
    assert isinstance(error.__cause__, pydantic.ValidationError)
    assert error.__cause__.errors()[0]["type"] == error_type
    assert [attempt.attempt_number for attempt in error.failed_attempts or []] == [1, 2, 3]
    assert error.total_usage.prompt_tokens == srv.stats().prompt_tokens
    # The re-ask quotes the validation error back to the judge.
    assert quoted in json.dumps(srv.requests[-1]["messages"])


async def test_a_reask_that_succeeds_sums_usage_over_attempts(srv: OpenAIStandIn) -> None:
    srv.faults = FaultPlan(sequence=["invalid"], invalid_variant="missing")
    result, completion = await structured(srv, instructor.Mode.TOOLS, max_retries=1)
    assert len(result.points) == 3
    stats = srv.stats()
    assert stats.outcomes == {"invalid": 1, "ok": 1}
    assert completion.usage.prompt_tokens == stats.prompt_tokens


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
async def test_truncated_output_raises_incomplete_without_reask(
    srv: OpenAIStandIn, mode: instructor.Mode
) -> None:
    srv.faults = FaultPlan(sequence=["truncated"])
    with pytest.raises(IncompleteOutputException) as excinfo:
        await structured(srv, mode, max_retries=2)
    completion = excinfo.value.last_completion
    assert completion is not None
    assert completion.choices[0].finish_reason == "length"
    assert srv.stats().requests == 1


@pytest.mark.parametrize("kind", ["refusal", "empty"])
async def test_refusal_and_empty_fail_parsing(srv: OpenAIStandIn, kind: FaultKind) -> None:
    srv.faults = FaultPlan(sequence=[kind])
    with pytest.raises(InstructorRetryException) as excinfo:
        await structured(srv, instructor.Mode.TOOLS, max_retries=0)
    completion = excinfo.value.last_completion
    assert completion is not None
    message = completion.choices[0].message
    assert message.tool_calls in (None, [])
    if kind == "refusal":
        # litellm moves the OpenAI ``refusal`` field into provider_specific_fields.
        assert "sorry" in message.provider_specific_fields["refusal"]
        assert message.content is None
    else:
        assert message.content == ""
    srv.faults = FaultPlan(sequence=[kind])
    text = (await plain(srv)).choices[0].message.content
    assert ("sorry" in text) if kind == "refusal" else (text == "")


async def test_plain_output_faults(srv: OpenAIStandIn) -> None:
    srv.faults = FaultPlan(sequence=["malformed_json", "invalid", "truncated"])
    assert (await plain(srv)).choices[0].message.content == "Null"
    assert (await plain(srv)).choices[0].message.content == "[Included Bonus Points]: 99"
    truncated = await plain(srv)
    assert truncated.choices[0].finish_reason == "length"
    assert truncated.choices[0].message.content == "[Included Bonus Points]: 1"[:13]


def test_every_fault_kind_is_counted() -> None:
    with OpenAIStandIn(faults=FaultPlan(sequence=list(FAULT_KINDS), timeout_hold=0)) as srv:
        with httpx.Client(base_url=srv.base_url, timeout=10) as client:
            for _ in FAULT_KINDS:
                with contextlib.suppress(httpx.TransportError):  # the reset
                    client.post(
                        "/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
                    )
        stats = srv.stats()
    assert stats.outcomes == dict.fromkeys(FAULT_KINDS, 1)
    assert stats.faults == len(FAULT_KINDS)


# -- CLI -----------------------------------------------------------------------------------------


@pytest.mark.process
def test_cli_prints_its_url_and_stops_on_sigint() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "standins.openai_server", "--port", "0", "--fault", "empty=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        reply = httpx.post(
            f"{base_url}/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
        )
        assert reply.json()["choices"][0]["message"]["content"] == ""
        extra = httpx.post(
            f"{base_url}/chat/completions", json={"messages": MESSAGES, "validation_context": {}}
        )
        assert extra.status_code == 400  # strict by default
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.process
def test_cli_lenient_accepts_unknown_fields() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "standins.openai_server", "--port", "0", "--lenient"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        reply = httpx.post(
            f"{base_url}/chat/completions", json={"messages": MESSAGES, "validation_context": {}}
        )
        assert reply.status_code == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.process
def test_cli_rejects_bad_options() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args, needle in [
        (["--host", "0.0.0.0"], "host"),
        (["--fault", "boom=0.1"], "unknown kind"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "standins.openai_server", "--port", "0", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert done.returncode == 2
        assert needle in done.stderr


def test_public_names_are_sorted_and_resolve() -> None:
    import standins

    def isort_style(name: str) -> tuple[int, str]:
        # ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical.
        kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
        return kind, name

    assert standins.__all__ == sorted(standins.__all__, key=isort_style)
    for name in standins.__all__:
        value = getattr(standins, name)
        assert not isinstance(value, type(standins)), name  # a name, not a submodule
