"""The direct transport sends what the litellm path sends, and reads replies as it does.

Each scenario scripts the strict stand-in's replies (fixed tool-call ids, so re-asks can be
compared), runs the same call through ``LiteLLMProvider`` (instructor over litellm) and through
``DirectProvider``, and compares the recorded request bodies (first asks and re-asks, in every
structured mode and for plain text, for both OpenAI-compatible prefixes) and the outcomes
(validated output, raw text, tokens, cost, attempts; or the error's class, reason and attempts).
The strict stand-in answers any undocumented top-level field with HTTP 400, so a leaked field
fails here as it would against OpenAI.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import instructor
import litellm
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from instructor.v2.providers.openai.schema import generate_openai_schema
from pydantic import BaseModel, ValidationInfo, field_validator

from core.errors import JudgeOutputError, ProviderError
from judge.config import JudgeConfig
from judge.mcq.llm import reading_model
from judge.providers.base import Completion
from judge.providers.direct import DirectProvider
from judge.providers.litellm import LiteLLMProvider
from judge.providers.routing import RoutingProvider, transport_for
from judge.providers.wire import as_rendered, json_instruction, tool_function
from judge.verdicts import BonusPointsExtraction, DefectJudgement, coverage_model
from standins import OpenAIStandIn, Reply, ToolCall, openai_chat_params

litellm.suppress_debug_info = True

MODES = ["tools", "json_schema", "json", "md_json", "json_object_schema"]
MODELS = ["openai/standin", "hosted_vllm/standin"]
COVERAGE = coverage_model(2)
GOOD = {"points": [{"index": 1, "covered": True}, {"index": 2, "covered": False}]}
BAD = {"points": [{"index": 7, "covered": True}]}
MALFORMED = "{'points': [{'index': 1,}"
REFUSAL = "I'm sorry, but I can't help with that request."
# Windows newlines, a trailing newline and a common indent: what instructor's rendering of a
# message (coverage calls carry a validation context) changes in markup-free text.
MESSAGES = [
    {"role": "system", "content": "You judge answers.\r\nBe strict.\n"},
    {"role": "user", "content": "  Question: why?\n  Response: because.\n"},
]

Script = Callable[[str], list[Reply]]
"""Replies for one call, given the mode (where the payload goes depends on it)."""


def placed(mode: str, payload: Any, *, finish: Any = None, call_id: str = "call_0") -> Reply:
    """``payload`` where ``mode`` expects the answer, with a fixed tool-call id."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    if mode == "tools":
        return Reply(
            tool_calls=(ToolCall(name=COVERAGE.__name__, arguments=text, id=call_id),),
            finish_reason=finish,
        )
    if mode == "md_json":
        return Reply(content=f"Here it is:\n```json\n{text}\n```", finish_reason=finish)
    return Reply(content=text, finish_reason=finish)


SCENARIOS: dict[str, Script] = {
    "valid": lambda mode: [placed(mode, GOOD)],
    "invalid then valid": lambda mode: [placed(mode, BAD), placed(mode, GOOD, call_id="call_1")],
    "malformed then valid": lambda mode: [
        placed(mode, MALFORMED),
        placed(mode, GOOD, call_id="call_1"),
    ],
    "invalid until out of re-asks": lambda mode: [
        placed(mode, BAD, call_id=f"call_{i}") for i in range(3)
    ],
    "refusal": lambda mode: [Reply(content=None, refusal=REFUSAL, finish_reason="stop")] * 3,
    "empty": lambda mode: [Reply(content="", finish_reason="stop")] * 3,
    "truncated": lambda mode: [placed(mode, '{"points": [{"ind', finish="length")],
    "invalid then truncated": lambda mode: [
        placed(mode, BAD),
        placed(mode, '{"points": [{"ind', finish="length", call_id="call_1"),
    ],
}


@pytest.fixture
async def server() -> AsyncIterator[OpenAIStandIn]:
    async with OpenAIStandIn(record_requests=100) as srv:
        assert srv.strict
        yield srv


def outcome(result: Completion | Exception) -> dict[str, Any]:
    """What a call ended with, in terms both transports must agree on."""
    if isinstance(result, Completion):
        output = result.output
        return {
            "output": output.model_dump() if isinstance(output, BaseModel) else output,
            "raw_text": result.raw_text,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "cost_usd": result.cost_usd,
            "attempts": result.attempts,
            "cached_tokens": result.cached_tokens,
        }
    if isinstance(result, JudgeOutputError):
        return {"error": "output", "reason": result.reason, "attempts": result.attempts,
                "raw": result.raw}
    if isinstance(result, ProviderError):
        return {"error": "provider", "reason": result.reason, "retryable": result.retryable,
                "status": result.status, "retry_after": result.retry_after,
                "attempts": result.attempts}
    raise result


async def run_both(
    server: OpenAIStandIn,
    replies: Sequence[Reply] | None,
    config: JudgeConfig,
    response_model: type[BaseModel] | None,
    *,
    messages: list[dict[str, str]] = MESSAGES,
    context: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Bodies and outcome of the litellm path, then of the direct path, for the same replies."""
    runs = []
    direct = DirectProvider()
    try:
        for provider in (LiteLLMProvider(), direct):
            server.clear_requests()
            if replies is not None:
                server.handler = list(replies)
            try:
                result: Completion | Exception = await provider.complete(
                    [dict(m) for m in messages], response_model, config,
                    validation_context=context,
                )
            except (JudgeOutputError, ProviderError) as exc:
                result = exc
            runs.append((server.requests, outcome(result)))
    finally:
        await direct.aclose()
    assert server.rejections == []
    (lite_bodies, lite), (direct_bodies, mine) = runs
    return lite_bodies, direct_bodies, lite, mine


# -- the request's parts, as instructor builds them -----------------------------------------------


@pytest.mark.parametrize(
    "model", [coverage_model(1), COVERAGE, coverage_model(8), DefectJudgement,
              BonusPointsExtraction, reading_model(("A", "B", "C", "D"), False)],
    ids=lambda m: m.__name__,
)
def test_tool_definition_and_json_instruction_are_instructors(model: type[BaseModel]) -> None:
    wrapped = instructor.openai_schema(model)
    assert tool_function(model) == generate_openai_schema(wrapped)
    # instructor's JSON-mode text, built as its handler builds it (the message it sends).
    from instructor.v2.core.mode import Mode
    from instructor.v2.core.providers import Provider
    from instructor.v2.core.registry import mode_registry

    handlers = mode_registry.get_handlers(Provider.OPENAI, Mode.JSON)
    _, prepared = handlers.request_handler(
        response_model=wrapped, kwargs={"messages": [{"role": "user", "content": "x"}]}
    )
    assert prepared["messages"][0] == {"role": "system", "content": json_instruction(model)}


# -- bodies and outcomes, scenario by scenario ----------------------------------------------------


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("mode", MODES)
async def test_structured_calls_match_the_litellm_path(
    server: OpenAIStandIn, mode: str, scenario: str
) -> None:
    config = JudgeConfig(model="openai/standin", api_base=server.base_url, mode=mode, seed=7)
    lite_bodies, bodies, lite, mine = await run_both(
        server, SCENARIOS[scenario](mode), config, COVERAGE, context={"n_points": 2}
    )
    assert bodies == lite_bodies
    assert all(set(body) <= openai_chat_params() for body in bodies)
    assert mine == lite
    assert len(bodies) == mine["attempts"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", MODES)
async def test_every_prefix_and_mode_without_a_context(
    server: OpenAIStandIn, model: str, mode: str
) -> None:
    """A call without a validation context (defects) is not rendered by instructor at all."""
    config = JudgeConfig(model=model, api_base=server.base_url, mode=mode, temperature=0.2)
    lite_bodies, bodies, lite, mine = await run_both(server, None, config, DefectJudgement)
    assert bodies == lite_bodies and mine == lite
    assert bodies[0]["model"] == "standin"  # the prefix is litellm's, not the server's
    assert "error" not in mine


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    "reply",
    [
        "[Included Bonus Points]: 1",
        Reply(content=None, refusal=REFUSAL, finish_reason="stop"),
        Reply(content="[Included Bonus", finish_reason="length"),
        Reply(content="   ", finish_reason="stop"),
    ],
    ids=["text", "refusal", "truncated", "empty"],
)
async def test_plain_text_calls_match_the_litellm_path(
    server: OpenAIStandIn, model: str, reply: Any
) -> None:
    config = JudgeConfig(model=model, api_base=server.base_url, seed=3)
    lite_bodies, bodies, lite, mine = await run_both(server, [reply], config, None)
    assert bodies == lite_bodies and mine == lite


async def test_a_priced_model_costs_the_same(server: OpenAIStandIn) -> None:
    config = JudgeConfig(model="openai/gpt-4o-mini", api_base=server.base_url)
    _, _, lite, mine = await run_both(server, None, config, DefectJudgement)
    assert mine == lite and mine["cost_usd"] is not None and mine["cost_usd"] > 0


@settings(max_examples=3 * settings().max_examples, deadline=None)
@given(
    prompt=st.integers(0, 200_000), completion=st.integers(0, 20_000), share=st.floats(0, 1),
    model=st.sampled_from(["gpt-4o-mini", "gpt-4o", "gpt-3.5-turbo"]),
)
def test_cached_tokens_cost_what_litellm_charges(
    prompt: int, completion: int, share: float, model: str
) -> None:
    """The direct transport prices a reply's usage, cached prompt tokens included, to the same
    float as litellm's ``completion_cost`` (the litellm path's price): cached tokens at the
    model's cache-read price, or at the prompt price for a model without one."""
    from litellm.types.utils import ModelResponse, PromptTokensDetailsWrapper, Usage

    from judge.providers.direct import _cost, _endpoint

    cached = int(prompt * share)
    reply = ModelResponse(model=model, usage=Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=cached),
    ))
    expected = litellm.completion_cost(completion_response=reply, model=f"openai/{model}")
    assert _cost(_endpoint(f"openai/{model}", "http://127.0.0.1:1/v1", None),
                 prompt, completion, cached) == (expected or None)


def test_gpt_4o_mini_has_a_cache_read_price_of_its_own() -> None:
    """What makes the price test above mean something: a cached token costs less there."""
    entry = litellm.model_cost["gpt-4o-mini"]
    assert 0 < entry["cache_read_input_token_cost"] < entry["input_cost_per_token"]


@pytest.mark.parametrize("mode", ["tools", "json_schema"])
async def test_cached_prompt_tokens_are_read_and_priced_alike(mode: str) -> None:
    """A provider reporting ``prompt_tokens_details.cached_tokens``: both transports read the
    same cached tokens and charge them the same (less than the same prompt uncached)."""
    async with OpenAIStandIn(record_requests=100, prompt_cache=(1, 1)) as server:
        config = JudgeConfig(model="openai/gpt-4o-mini", api_base=server.base_url, mode=mode)
        # The first request (uncached) warms the stand-in's prompt cache for the two compared.
        warming = DirectProvider()
        try:
            cold = await warming.complete(MESSAGES, DefectJudgement, config)
        finally:
            await warming.aclose()
        _, _, lite, mine = await run_both(server, None, config, DefectJudgement)
    assert cold.cached_tokens == 0
    assert mine == lite
    assert 0 < mine["cached_tokens"] <= mine["prompt_tokens"] == cold.prompt_tokens
    assert cold.cost_usd is not None and 0 < mine["cost_usd"] < cold.cost_usd


async def test_validation_context_reaches_the_validators(server: OpenAIStandIn) -> None:
    seen: list[Any] = []

    class Probe(BaseModel):
        points: list[Any]

        @field_validator("points")
        @classmethod
        def _record(cls, value: list[Any], info: ValidationInfo) -> list[Any]:
            seen.append(info.context)
            return value

    server.handler = lambda body: {"points": [{"index": 1, "covered": True}]}
    config = JudgeConfig(model="openai/standin", api_base=server.base_url)
    provider = DirectProvider()
    try:
        await provider.complete(MESSAGES, Probe, config, validation_context={"n_points": 1})
    finally:
        await provider.aclose()
    assert seen == [{"n_points": 1}]


async def test_jinja_markup_in_a_response_is_sent_as_written(server: OpenAIStandIn) -> None:
    """instructor evaluates the messages as Jinja templates when a validation context is given;
    the litellm path escapes them first, so neither path sends ``{{ 7*7 }}`` as ``49``."""
    messages = [{"role": "user", "content": "Response: {{ 7*7 }} and {{ n_points }}."}]
    config = JudgeConfig(model="openai/standin", api_base=server.base_url)
    replies = [placed("tools", GOOD)]
    lite_bodies, bodies, lite, mine = await run_both(
        server, replies, config, COVERAGE, messages=messages, context={"n_points": 2}
    )
    assert bodies[0]["messages"][0]["content"] == "Response: {{ 7*7 }} and {{ n_points }}."
    assert lite_bodies[0]["messages"][0]["content"] == "Response: {{ 7*7 }} and {{ n_points }}."
    assert mine == lite


# -- choosing the transport ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "transport", "expected"),
    [
        ("openai/gpt-4o-mini", "auto", "direct"),
        ("hosted_vllm/qwen", "auto", "direct"),
        ("openai/o3-mini", "auto", "litellm"),
        ("openai/gpt-5", "auto", "litellm"),
        ("openai/gpt-5-chat-latest", "auto", "direct"),
        ("anthropic/claude-3-5-haiku", "auto", "litellm"),
        ("ollama/llama3", "auto", "litellm"),
        ("openai/gpt-4o-mini", "litellm", "litellm"),
        ("ollama/llama3", "direct", "direct"),
    ],
)
def test_transport_for(model: str, transport: str, expected: str) -> None:
    config = JudgeConfig(model=model, transport=transport)  # type: ignore[arg-type]
    assert transport_for(config) == expected


async def test_the_router_sends_each_call_on_its_transport(server: OpenAIStandIn) -> None:
    router = RoutingProvider()
    try:
        for transport in ("direct", "litellm"):
            config = JudgeConfig(
                model="openai/standin", api_base=server.base_url,
                transport=transport,  # type: ignore[arg-type]
            )
            await router.complete(MESSAGES, DefectJudgement, config)
        assert router._direct is not None and router._litellm is not None
        assert router.direct._session is not None
    finally:
        await router.aclose()
    assert router.direct._session is None


# -- instructor's rendering of markup-free text ---------------------------------------------------


@settings(max_examples=4 * settings().max_examples, deadline=None)
@given(
    st.lists(
        st.sampled_from(["a", "é", " ", "  ", "\t", "\n", "\r", "\r\n", "{", "}", "#", "%", "x y"]),
        max_size=30,
    )
    .map("".join)
    .filter(lambda text: not any(mark in text for mark in ("{{", "{%", "{#")))
)
def test_rendering_markup_free_text_is_instructors(text: str) -> None:
    from instructor.v2.core.templating import apply_template

    assert as_rendered(text) == apply_template(text, {"n_points": 2})


@pytest.mark.parametrize(
    "text",
    ["{% if x %}", "{{ n_points }}", "{# c #} {%- raw -%} x", "a {{ '{' }} b }} %} #}", "{"],
)
async def test_untrusted_markup_reaches_the_judge_unchanged_on_the_litellm_path(
    server: OpenAIStandIn, text: str
) -> None:
    messages = [{"role": "user", "content": f"Response: {text}"}]
    config = JudgeConfig(model="openai/standin", api_base=server.base_url)
    lite_bodies, bodies, _, _ = await run_both(
        server, [placed("tools", GOOD)], config, COVERAGE, messages=messages,
        context={"n_points": 2},
    )
    assert lite_bodies[0]["messages"][0]["content"] == f"Response: {text}"
    assert bodies[0]["messages"][0]["content"] == f"Response: {text}"


@pytest.mark.parametrize("scenario", ["valid", "invalid then valid", "refusal", "truncated"])
async def test_each_reply_is_read_in_one_trip(
    server: OpenAIStandIn, scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42.5: the direct transport walked each reply four times (finish reason, answer,
    refusal, raw text); now ``parse_reply`` reads it once and the call uses what it read."""
    import judge.providers.direct as direct_module

    trips: list[dict[str, Any]] = []
    parse = direct_module.parse_reply

    def counted(body: dict[str, Any]) -> Any:
        trips.append(body)
        return parse(body)

    monkeypatch.setattr(direct_module, "parse_reply", counted)
    config = JudgeConfig(model="openai/standin", api_base=server.base_url, mode="tools", seed=7)
    _, bodies, lite, mine = await run_both(
        server, SCENARIOS[scenario]("tools"), config, COVERAGE, context={"n_points": 2}
    )
    assert mine == lite
    assert len(trips) == len(bodies) == mine["attempts"]
