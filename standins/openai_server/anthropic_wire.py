"""Anthropic's Messages API (``POST /v1/messages``) as the stand-in speaks it.

The request side: the documented top-level fields (:data:`ANTHROPIC_MESSAGE_PARAMS`, and the
beta ones a request with an ``anthropic-beta`` header may also send), the checks a body must
pass (:func:`anthropic_problem`) and what answer it expects (:func:`anthropic_shape`). The answer
side: the ``message`` object that carries a :class:`~standins.openai_server.wire.Reply`
(:func:`anthropic_message`) and Anthropic's error bodies (:func:`anthropic_error`). Nothing here
runs a server.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from standins.openai_server.wire import Reply, Shape, json_object, message_text, text_shape

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header value litellm sends (the only version Anthropic serves)."""

ANTHROPIC_MESSAGE_PARAMS = frozenset({
    "model", "messages", "max_tokens", "cache_control", "container", "inference_geo",
    "metadata", "output_config", "service_tier", "stop_sequences", "stream", "system",
    "temperature", "thinking", "tool_choice", "tools", "top_k", "top_p",
})  # fmt: skip
"""The top-level fields of Anthropic's API reference for ``POST /v1/messages`` (generally
available). Any other field is answered with a 400 ``"<field>: Extra inputs are not
permitted"``, as Anthropic does."""

ANTHROPIC_BETA_MESSAGE_PARAMS = frozenset({
    "context_management", "mcp_servers", "output_format", "speed", "diagnostics", "fallbacks",
    "fallback_credit_token", "user_profile_id",
})  # fmt: skip
"""The fields the beta reference adds; accepted only from a request with an ``anthropic-beta``
header (litellm sends ``output_format`` with ``anthropic-beta: structured-outputs-2025-11-13``)."""

REQUIRED = ("model", "max_tokens", "messages")
"""The fields a body must have, in the order their absence is reported."""

ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic's error ``type`` per HTTP status (its errors page); other 5xx are ``api_error``."""


def error_type(status: int) -> str:
    """The ``error.type`` Anthropic sends with ``status``."""
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_problem(body: Any, *, strict: bool, beta: bool) -> str | None:
    """The 400 message for a body Anthropic would refuse, or None when it is usable.

    Args:
        body: The parsed request body.
        strict: Refuse top-level fields Anthropic does not document.
        beta: The request carries an ``anthropic-beta`` header (beta fields are documented).
    """
    if not isinstance(body, Mapping):
        return "Input should be a valid dictionary"
    if strict:
        known = ANTHROPIC_MESSAGE_PARAMS | (ANTHROPIC_BETA_MESSAGE_PARAMS if beta else frozenset())
        # The first undocumented field, in body order: Anthropic names one field per message.
        extra = next((str(name) for name in body if name not in known), None)
        if extra is not None:
            return f"{extra}: Extra inputs are not permitted"
    missing = next((name for name in REQUIRED if name not in body), None)
    if missing is not None:
        return f"{missing}: Field required"
    return _invalid_field(body)


def _invalid_field(body: Mapping[str, Any]) -> str | None:
    if not isinstance(body["model"], str):
        return "model: Input should be a valid string"
    tokens = body["max_tokens"]
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return "max_tokens: Input should be a valid integer greater than or equal to 0"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if "content" not in message:
            return f"messages.{index}.content: Field required"
    system = body.get("system")
    if (
        system is not None
        and not isinstance(system, str)
        and not (
            isinstance(system, list)
            and all(isinstance(b, Mapping) and b.get("type") == "text" for b in system)
        )
    ):
        return "system: Input should be a valid string or a list of text blocks"
    return _invalid_tools(body)


def _invalid_tools(body: Mapping[str, Any]) -> str | None:
    tools = body.get("tools")
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list):
            return "tools: Input should be a valid list"
        for index, tool in enumerate(tools):
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                return f"tools.{index}.name: Field required"
            # Server tools (web search, bash...) carry a type and no input_schema.
            custom = tool.get("type") in (None, "custom")
            if custom and not isinstance(tool.get("input_schema"), Mapping):
                return f"tools.{index}.custom.input_schema: Field required"
            names.append(tool["name"])
    choice = body.get("tool_choice")
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, Mapping) else None
    if kind not in ("auto", "any", "tool", "none"):
        return (
            "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', "
            "'tool', 'none'"
        )
    if kind == "tool" and not isinstance(choice.get("name"), str):
        return "tool_choice.tool.name: Field required"
    if kind in ("any", "tool") and not names:
        return "tool_choice: tool_choice may only be specified while providing tools"
    if kind == "tool" and choice["name"] not in names:
        return f"tool_choice.name: Tool '{choice['name']}' not found in provided tools"
    return None


def anthropic_chat_view(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request as OpenAI-shaped messages, for the default answers, faults and token counts.

    The system prompt (a string or text blocks) becomes a leading system message; the tool
    definitions and the ``output_format`` (or ``output_config.format``) schema stand where an
    OpenAI request carries ``tools`` and ``response_format``.
    """
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        text = system if isinstance(system, str) else message_text({"content": system})
        messages.append({"role": "system", "content": text})
    for message in body.get("messages") or []:
        messages.append({"role": message.get("role"), "content": message_text(message)})
    view: dict[str, Any] = {"messages": messages}
    if body.get("tools"):
        view["tools"] = body["tools"]
    output_format = _output_format(body)
    if output_format is not None:
        view["response_format"] = output_format
    return view


def _output_format(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The structured-output format: beta ``output_format``, or GA ``output_config.format``."""
    output_format = body.get("output_format")
    if isinstance(output_format, Mapping):
        return output_format
    config = body.get("output_config")
    if isinstance(config, Mapping) and isinstance(config.get("format"), Mapping):
        return dict(config["format"])
    return None


def anthropic_shape(body: Mapping[str, Any], view: Mapping[str, Any]) -> Shape:
    """What kind of answer a (valid) request expects, and the schema it must follow.

    A ``tool_use`` block when the request forces a tool (``tool_choice`` ``tool`` or ``any``:
    the named, else the first tool); JSON text for ``output_format``; otherwise text, which
    carries the schema a prompt embeds (instructor's JSON modes) as bare JSON, or in a fenced
    json block when the prompt asks for one (``MD_JSON``).
    """
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, Mapping) else None
    custom = [tool for tool in tools if isinstance(tool.get("input_schema"), Mapping)]
    if custom and kind in ("tool", "any"):
        name = choice.get("name") if kind == "tool" and isinstance(choice, Mapping) else None
        chosen = next((tool for tool in custom if tool["name"] == name), custom[0])
        return Shape(mode="tools", schema=dict(chosen["input_schema"]), tool_name=chosen["name"])
    output_format = _output_format(body)
    if output_format is not None and output_format.get("type") == "json_schema":
        schema = output_format.get("schema")
        return Shape(mode="json_schema", schema=dict(schema) if isinstance(schema, Mapping) else {})
    return text_shape(view)


def anthropic_message(
    reply: Reply, model: str, input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    """The ``message`` object that carries ``reply`` (see :mod:`standins.openai_server`)."""
    content: list[dict[str, Any]] = []
    text = reply.content if reply.content is not None else reply.refusal
    if text:
        content.append({"type": "text", "text": text})
    used_tool = False
    for call in reply.tool_calls:
        arguments = json_object(call.arguments)
        if arguments is None:
            # The API only carries a parsed object as a tool's input; arguments that are no JSON
            # object (a malformed or truncated payload) read as the model answering in prose.
            content.append({"type": "text", "text": call.arguments})
            continue
        used_tool = True
        content.append({
            "type": "tool_use",
            "id": call.id or f"toolu_{uuid.uuid4().hex[:24]}",
            "name": call.name,
            "input": arguments,
        })  # fmt: skip
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _stop_reason(reply, used_tool),
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
        },
    }


def _stop_reason(reply: Reply, used_tool: bool) -> str:
    if reply.finish_reason == "length":
        return "max_tokens"
    if reply.finish_reason == "content_filter" or (
        reply.refusal is not None and reply.content is None
    ):
        return "refusal"
    return "tool_use" if used_tool else "end_turn"
