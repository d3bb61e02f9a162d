"""The stand-in's answers, per structured-output mode: defaults, handler replies and faults.

Defaults are schema-valid for the request's own schema; a handler's payload is placed where the
request's mode expects the answer; a fault breaks the payload in the way its kind names.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from standins.openai_server.plan import FaultDecider, FaultKind
from standins.openai_server.wire import (
    FinishReason,
    Reply,
    ReplyLike,
    Shape,
    ToolCall,
    prompt_text,
)
from standins.schemas import SchemaError, invalid_instance, schema_instance

REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
"""What the ``refusal`` fault says."""


def _default_plain(body: Mapping[str, Any]) -> str:
    if "[Bonus Points]" in prompt_text(body):
        return "[Included Bonus Points]: 1"
    return "[Defect]: None"


def _place(payload: str, shape: Shape, *, finish_reason: FinishReason | None = None) -> Reply:
    """Put a payload where the request's mode expects the answer."""
    if shape.mode == "tools":
        return Reply(
            tool_calls=(ToolCall(name=shape.tool_name or "function", arguments=payload),),
            finish_reason=finish_reason,
        )
    if shape.mode == "md_json":
        return Reply(content=f"```json\n{payload}\n```", finish_reason=finish_reason)
    return Reply(content=payload, finish_reason=finish_reason)


def _payload_of(reply: Reply, shape: Shape) -> str:
    """The JSON (or text) payload inside a reply, the inverse of :func:`_place`."""
    if reply.tool_calls:
        return reply.tool_calls[0].arguments
    content = reply.content or ""
    if shape.mode == "md_json":
        stripped = content.strip()
        if stripped.startswith("```"):
            stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
            stripped = stripped.rsplit("```", 1)[0]
        return stripped.strip()
    return content


def _malformed(payload: str) -> str:
    # Single quotes and a trailing comma: how chatty models break JSON; no JSON parser takes it.
    if not payload.strip():
        return "{'answer': ,}"
    broken = payload.replace('"', "'")
    if broken.rstrip().endswith("}"):
        broken = broken.rstrip()[:-1] + ",}"
    if broken == payload:
        broken = "{'" + payload + "',}"
    return broken


def _truncate(payload: str) -> str:
    # Half of the text: for JSON this always stops before the closing bracket.
    return payload[: len(payload) // 2]


class ScriptedHandler:
    """Serve a fixed list of replies in order; raise once it runs out (like inspect's MockLLM)."""

    def __init__(self, replies: Sequence[ReplyLike]) -> None:
        self._replies: Iterator[ReplyLike] = iter(list(replies))
        self._count = len(replies)

    def __call__(self, body: dict[str, Any]) -> ReplyLike:
        """The next scripted reply, whatever the request."""
        try:
            return next(self._replies)
        except StopIteration:
            raise LookupError(f"scripted replies ran out after {self._count} replies") from None


def to_reply(produced: Any, shape: Shape) -> Reply:
    """A handler's answer as a reply: a :class:`Reply` as is, a payload placed by the mode."""
    if isinstance(produced, Reply):
        return produced
    if isinstance(produced, str):
        return _place(produced, shape)
    if isinstance(produced, Mapping | list):
        return _place(json.dumps(produced, ensure_ascii=False), shape)
    raise TypeError(
        f"handler returned {type(produced).__name__}; expected Reply, str, dict or list"
    )

def default_reply(body: Mapping[str, Any], shape: Shape, plain_reply: str | None) -> Reply:
    """The schema-valid answer the stand-in gives when no handler is set."""
    if shape.mode == "plain":
        return Reply(content=plain_reply or _default_plain(body))
    schema = shape.schema
    if not schema:
        return _place("{}", shape)
    return _place(_default_payload(json.dumps(schema, sort_keys=True)), shape)


@functools.lru_cache(maxsize=256)
def _default_payload(schema_json: str) -> str:
    """The default answer of one schema (canonical JSON), built once per schema.

    A judge sends the same few schemas on every call, and building the instance was a fifth of
    the stand-in's CPU per request, on the cores the benchmarks share with the client they measure.
    """
    try:
        instance = schema_instance(json.loads(schema_json))
    except SchemaError as exc:
        raise ValueError(f"cannot answer from the request's schema: {exc}") from exc
    return json.dumps(instance, ensure_ascii=False)

def apply_fault(
    reply: Reply,
    shape: Shape,
    fault: FaultKind,
    decider: FaultDecider | None,
    body: Mapping[str, Any],
) -> Reply:
    """Break ``reply`` the way ``fault`` says (faults that replace the reply are not here)."""
    plain = shape.mode == "plain" and not reply.tool_calls
    if fault == "empty":
        return Reply(content="", finish_reason="stop")
    if fault == "refusal":
        if plain:
            return Reply(content=REFUSAL_TEXT, finish_reason="stop")
        return Reply(content=None, refusal=REFUSAL_TEXT, finish_reason="stop")
    payload = _payload_of(reply, shape)
    if fault == "truncated":
        cut = _truncate(payload)
        if plain:
            return Reply(content=cut, finish_reason="length")
        return _place(cut, shape, finish_reason="length")
    if fault == "malformed_json":
        if plain:
            return Reply(content="Null")
        return _place(_malformed(payload), shape)
    if fault == "invalid":
        if plain:
            coverage = "[Bonus Points]" in prompt_text(body)
            return Reply(content="[Included Bonus Points]: 99" if coverage else "[Defect]")
        try:
            value = json.loads(payload)
        except json.JSONDecodeError:
            value = schema_instance(shape.schema) if shape.schema else {}
        variant = decider.invalid_variant() if decider is not None else "out_of_range"
        broken, _ = invalid_instance(value, shape.schema, variant)
        return _place(json.dumps(broken, ensure_ascii=False), shape)
    return reply
