"""The stand-in's wire contract: what OpenAI's chat-completions API accepts and answers.

The request side: the documented top-level fields (:func:`openai_chat_params`), the checks a
body must pass (:func:`validate_body`, :func:`unknown_fields`) and what answer it expects
(:func:`analyse`). The answer side: the assistant message (:class:`Reply`), the completion object
that carries it, token counts and OpenAI's error body. Nothing here runs a server.
"""

from __future__ import annotations

import functools
import json
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from core.text import count_words
from standins.schemas import find_embedded_schema


@functools.cache
def openai_chat_params() -> frozenset[str]:
    """Every top-level field OpenAI documents for ``POST /v1/chat/completions``.

    Read from the installed ``openai`` package's ``CompletionCreateParams`` (``model``,
    ``messages``, ``tools``, ``response_format``, ``temperature``, ``max_tokens``, ``seed``,
    ``stream``...). The strict stand-in rejects any other top-level field with HTTP 400, as OpenAI
    does. Read on the first call, not at import: the SDK's types cost about a second of CPU, which
    a process that imports the stand-in and checks no body (a test session collecting) need not
    pay.
    """
    # The SDK's TypedDicts are generated from OpenAI's API spec, so reading them (rather than
    # copying a list) keeps the stand-in in step with the installed SDK. Streaming and
    # non-streaming variants differ only in ``stream``'s type; take both to be safe.
    from openai.types.chat import completion_create_params as params

    names: set[str] = set()
    for typed in (
        params.CompletionCreateParamsNonStreaming,
        params.CompletionCreateParamsStreaming,
    ):
        names.update(typed.__required_keys__, typed.__optional_keys__)
    return frozenset(names)


FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
"""OpenAI ``finish_reason`` values the stand-in emits."""

@dataclass(frozen=True)
class ToolCall:
    """One function call in an assistant message.

    Attributes:
        name: The function's name.
        arguments: The arguments as sent on the wire: a JSON text (or not, for fault tests).
        id: The call id; generated when None.
    """

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """One assistant message the server sends, exactly as specified.

    Attributes:
        content: The message content (None for a pure tool call or refusal).
        tool_calls: Function calls in the message.
        refusal: The ``message.refusal`` text (structured-output refusals).
        finish_reason: The choice's finish reason; None means ``"tool_calls"`` when the message
            has tool calls, else ``"stop"``.
    """

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    finish_reason: FinishReason | None = None

    @classmethod
    def text(cls, content: str, *, finish_reason: FinishReason | None = None) -> Reply:
        """Build a plain text reply."""
        return cls(content=content, finish_reason=finish_reason)

    @classmethod
    def tool(cls, name: str, arguments: str | Mapping[str, Any]) -> Reply:
        """Build a reply with one tool call; mapping arguments are serialised as JSON."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return cls(tool_calls=(ToolCall(name=name, arguments=text),))

    @property
    def effective_finish_reason(self) -> FinishReason:
        """The finish reason sent on the wire."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


ReplyLike: TypeAlias = Reply | str | Mapping[str, Any] | list[Any]
"""What a handler may return: a full :class:`Reply`, or a payload placed by the request's mode."""

Handler: TypeAlias = Callable[[dict[str, Any]], ReplyLike | Awaitable[ReplyLike]]
"""A function from the parsed request body to the reply (sync or async)."""


Mode = Literal["tools", "json_schema", "json_object", "md_json", "plain"]
"""Where a request expects its answer: a tool call, JSON content (by schema, or instructor's JSON
mode), a fenced json block (instructor's MD_JSON mode), or plain text."""


@dataclass(frozen=True)
class Shape:
    """What kind of answer a request expects."""

    mode: Mode
    schema: dict[str, Any] | None = None
    tool_name: str | None = None


def message_text(message: Any) -> str:
    """The text of one chat message (its text parts, for multi-part content)."""
    if not isinstance(message, Mapping):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Multi-part content: only the text parts carry a prompt.
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def prompt_text(body: Mapping[str, Any]) -> str:
    """The text of every message of a request, one per line."""
    return "\n".join(message_text(message) for message in body.get("messages") or [])


def validate_body(body: Any) -> str | None:
    """Return an error message naming the offending field, or None when the body is usable."""
    if not isinstance(body, Mapping):
        return "request body must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            return f"'messages[{index}]' must be an object with a string 'role'"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "'tools' must be an array"
        for index, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
                return f"'tools[{index}].function.name' must be a string"
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, Mapping) or "type" not in response_format
    ):
        return "'response_format' must be an object with a 'type'"
    if response_format is not None and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema", {}), Mapping):
            return "'response_format.json_schema.schema' must be an object"
    return None


def unknown_fields(body: Any) -> str | None:
    """OpenAI's 400 message for a body with undocumented top-level fields, or None."""
    if not isinstance(body, Mapping):
        return None
    unknown = [str(name) for name in body if name not in openai_chat_params()]
    if not unknown:
        return None
    if len(unknown) == 1:
        return f"Unrecognized request argument supplied: {unknown[0]}"
    return f"Unrecognized request arguments supplied: {', '.join(unknown)}"


def analyse(body: Mapping[str, Any]) -> Shape:
    """What kind of answer a (valid) request expects, and the schema it must follow."""
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    if tools and choice != "none":
        name: str | None = None
        if isinstance(choice, Mapping):
            function = choice.get("function")
            if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                name = function["name"]
        chosen = next(
            (tool["function"] for tool in tools if tool["function"]["name"] == name),
            tools[0]["function"],
        )
        parameters = chosen.get("parameters")
        return Shape(
            mode="tools",
            schema=dict(parameters) if isinstance(parameters, Mapping) else {},
            tool_name=str(chosen["name"]),
        )
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping):
        kind = response_format.get("type")
        if kind == "json_schema":
            spec = response_format.get("json_schema") or {}
            return Shape(mode="json_schema", schema=dict(spec.get("schema") or {}))
        if kind == "json_object":
            return Shape(mode="json_object", schema=embedded_schema(body))
    embedded = embedded_schema(body)
    if embedded is not None:
        return Shape(mode="md_json", schema=embedded)
    return Shape(mode="plain")


def embedded_schema(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON schema instructor embeds in the messages (JSON and MD_JSON modes), if any."""
    messages = body.get("messages") or []
    # instructor puts the schema in the system message; look there first.
    ordered = sorted(messages, key=lambda m: 0 if m.get("role") == "system" else 1)
    for message in ordered:
        found = find_embedded_schema(message_text(message))
        if found is not None:
            return found
    return None


def text_shape(view: Mapping[str, Any]) -> Shape:
    """The shape of a text answer on the Anthropic and Gemini wires.

    Those wires carry instructor's ``JSON`` and ``MD_JSON`` modes alike, as a schema embedded
    in the prompt (no ``response_format`` tells them apart): the answer is the schema's instance,
    in a fenced json block when the prompt asks for one (``MD_JSON``), else bare; with no
    embedded schema it is a plain answer.

    Args:
        view: The request as OpenAI-shaped messages (each wire's ``chat_view``).
    """
    schema = embedded_schema(view)
    if schema is None:
        return Shape(mode="plain")
    fenced = "```json" in prompt_text(view)
    return Shape(mode="md_json" if fenced else "json_object", schema=schema)


def json_object(text: str) -> dict[str, Any] | None:
    """``text`` parsed, when it is a JSON object; None otherwise (not JSON, or no object).

    The Anthropic and Gemini wires carry a tool call's arguments as a parsed object, so only
    arguments that pass this can travel as one.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def approx_tokens(text: str) -> int:
    """A deterministic token estimate: ``max(words, chars / 4)``, CJK-aware."""
    if not text:
        return 0
    return max(count_words(text), math.ceil(len(text) / 4))


TokenCount: TypeAlias = Callable[[str], int]
"""Counts the tokens of a text: :func:`approx_tokens`, or a tokenizer's (:func:`tiktoken_count`)."""


@functools.lru_cache(maxsize=4)
def tiktoken_encoding(encoding: str) -> Any:
    """The tiktoken ``encoding`` (``o200k_base`` is the gpt-4o family's), read offline.

    The encoding files are the ones litellm ships; ``TIKTOKEN_CACHE_DIR``, when set, is used
    instead.
    """
    import importlib.util
    import os
    from pathlib import Path

    import tiktoken

    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        spec = importlib.util.find_spec("litellm")
        if spec is not None and spec.origin is not None:
            bundled = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
            os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
    return tiktoken.get_encoding(encoding)


def tiktoken_units(encoding: str) -> Callable[[str], list[int]]:
    """A text's token ids with the tiktoken ``encoding`` (see :func:`tiktoken_encoding`)."""
    coder = tiktoken_encoding(encoding)
    return lambda text: coder.encode(text, disallowed_special=()) if text else []


@functools.lru_cache(maxsize=4)
def tiktoken_count(encoding: str) -> TokenCount:
    """Token counts with the tiktoken ``encoding`` (see :func:`tiktoken_encoding`)."""
    units = tiktoken_units(encoding)
    return lambda text: len(units(text))


def prompt_tokens(body: Mapping[str, Any], count: TokenCount = approx_tokens) -> int:
    """``usage.prompt_tokens`` of a request.

    Per message the text plus OpenAI's overhead (its role and separators, 4 tokens), 3 to prime
    the reply, and the tool and response-format definitions as their JSON text (OpenAI renders
    them in its own, unpublished format: a client's count of those differs a little).
    """
    total = 3
    for message in body.get("messages") or []:
        total += 4 + count(message_text(message))
    for key in ("tools", "response_format"):
        if body.get(key):
            total += count(json.dumps(body[key], separators=(",", ":")))
    return total


def completion_tokens(reply: Reply, count: TokenCount = approx_tokens) -> int:
    """``usage.completion_tokens`` of a reply."""
    total = count(reply.content or "") + count(reply.refusal or "")
    for call in reply.tool_calls:
        total += count(call.name) + count(call.arguments)
    return total


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def pieces(text: str, parts: int = 3) -> list[str]:
    """Split text into a few chunks, as a streaming model would send it."""
    if not text:
        return []
    size = max(1, math.ceil(len(text) / parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def completion_body(reply: Reply, model: str, usage: Mapping[str, int]) -> dict[str, Any]:
    """The ``chat.completion`` object that carries ``reply`` (the non-streamed answer)."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content,
        "refusal": reply.refusal,
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_standin",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.effective_finish_reason,
            }
        ],
        "usage": dict(usage),
    }
