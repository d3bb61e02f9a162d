"""The OpenAI chat-completions wire format, as instructor writes requests and reads replies.

``judge.providers.direct.DirectProvider`` sends what ``judge.providers.litellm.LiteLLMProvider``
(instructor over
litellm) sends, field for field; this module holds that knowledge, free of any transport: the
request's fixed part for a structured-output mode (``request_plan``, serialised once per model,
schema, mode and sampling), the messages as instructor prepares them (its JSON-mode instruction,
merged turns, the effect of its Jinja rendering), and a reply read as instructor's handler for the
mode reads it, with the re-ask turns it appends after a failure.
``tests/judge/providers/test_direct_wire.py`` pins the bodies against the litellm path's on the
strict stand-in.
"""

from __future__ import annotations

import functools
import json
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from core.errors import UnscoredReason
from judge.config import StructuredMode
from judge.providers.base import failure_reason_of

__all__ = [
    "ParsedReply",
    "Plan",
    "ReplyError",
    "Unparseable",
    "as_rendered",
    "json_instruction",
    "parse_reply",
    "prepared_messages",
    "reask_messages",
    "request_body",
    "request_plan",
    "tool_function",
]

_MD_JSON_ASK = "Return the correct JSON response within a ```json codeblock. not the JSON_SCHEMA"
_TOOLS_REASK = "Validation Error found:\n{error}\nRecall the function correctly, fix the errors"
_JSON_REASK = "Correct your JSON ONLY RESPONSE, based on the following errors:\n{error}"
_NO_TOOL_CALL = "No tool calls or function call found in response (mode: TOOLS)"
_NO_ARGUMENTS = "Tool call arguments missing in response (mode: TOOLS)"
_NO_CHOICES = "No choices in OpenAI response"
_PAD = " " * 12  # instructor's source indentation, which its JSON-mode text keeps (see below)

# instructor's bounds on the MD_JSON code-block extraction (``instructor.v2.core.json``).
_MAX_EXTRACTION_CHARS = 1_048_576
_MAX_JSON_DEPTH = 128

_NEWLINE = re.compile(r"\r\n|\r|\n")
_BLANK_LINE = re.compile(r"^[ \t]+$", re.MULTILINE)  # what textwrap.dedent empties

# -- the request's fixed part --------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def tool_function(model: type[BaseModel]) -> dict[str, Any]:
    """The function definition instructor's TOOLS mode sends (its ``generate_openai_schema``)."""
    from docstring_parser import parse  # instructor's own dependency, for the same text

    schema = model.model_json_schema()
    docstring = parse(model.__doc__ or "")
    parameters = {k: v for k, v in schema.items() if k not in ("title", "description")}
    for param in docstring.params:
        name, description = param.arg_name, param.description
        if name in parameters["properties"] and description:
            parameters["properties"][name].setdefault("description", description)
    parameters["required"] = sorted(schema.get("required", []))
    if "description" in schema:
        description = schema["description"]
    else:
        description = (
            docstring.short_description
            or f"Correctly extracted `{model.__name__}` with all the required parameters with "
            "correct types"
        )
    return {"name": schema["title"], "description": description, "parameters": parameters}


@functools.lru_cache(maxsize=256)
def json_instruction(model: type[BaseModel]) -> str:
    """The system text instructor's JSON and MD_JSON modes add, character for character.

    instructor builds it with ``dedent`` over an indented f-string holding the schema; the schema's
    own lines start at column 0, so nothing is dedented and the source's 12-space indentation
    stays in the text (only whitespace-only lines are emptied).
    """
    schema = json.dumps(model.model_json_schema(), indent=2, ensure_ascii=False)
    return textwrap.dedent(
        f"\n{_PAD}As a genius expert, your task is to understand the content and provide\n"
        f"{_PAD}the parsed objects in json that match the following json_schema:\n\n\n"
        f"{_PAD}{schema}\n\n"
        f"{_PAD}Make sure to return an instance of the JSON, not the schema itself\n{_PAD}"
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Plan:
    """The fixed part of a call's request: everything but the messages, serialised once.

    Attributes:
        tail: The body after the messages (``,"model":...}``), as bytes.
        instruction: The JSON-mode system text, or None.
        md_json: Whether the MD_JSON ask is appended to the messages.
    """

    tail: bytes
    instruction: str | None
    md_json: bool


@functools.lru_cache(maxsize=512)
def request_plan(
    wire_model: str,
    response_model: type[BaseModel] | None,
    mode: StructuredMode,
    sampling: tuple[tuple[str, Any], ...],
    extra: str,
) -> Plan:
    """The fixed part of the request for this model, response model, mode and sampling."""
    fields: dict[str, Any] = {"model": wire_model, **dict(sampling), **json.loads(extra)}
    instruction: str | None = None
    if response_model is not None:
        if mode == "tools":
            function = tool_function(response_model)
            fields["tools"] = [{"type": "function", "function": function}]
            fields["tool_choice"] = {"type": "function", "function": {"name": function["name"]}}
        elif mode == "json_schema":
            fields["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": response_model.__name__,
                    "schema": response_model.model_json_schema(),
                },
            }
        else:
            instruction = json_instruction(response_model)
            if mode == "json":
                fields["response_format"] = {"type": "json_object"}
            elif mode == "json_object_schema":
                # llama.cpp's dialect, which LiteLLMProvider sends through extra_body.
                fields["response_format"] = {
                    "type": "json_object",
                    "schema": response_model.model_json_schema(),
                }
    # litellm's order: the messages, the model, then the other fields by name.
    ordered = {"model": fields.pop("model"), **dict(sorted(fields.items()))}
    return Plan(
        tail=("," + _dumps(ordered)[1:]).encode(),
        instruction=instruction,
        md_json=response_model is not None and mode == "md_json",
    )


def request_body(messages: list[dict[str, Any]], plan: Plan) -> bytes:
    """The request body: the messages, then the plan's pre-serialised fixed part."""
    return b'{"messages":' + _dumps(messages).encode() + plan.tail


# -- the messages, as instructor prepares them ---------------------------------------------------


def _merge_consecutive(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages merged as instructor's ``merge_consecutive_messages`` merges text ones."""
    if not all(isinstance(m.get("content", ""), str) for m in messages):
        return messages  # multi-part content: instructor merges parts; rubrics never send any
    merged: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content") or ""
        plain = set(message) <= {"role", "content"}
        if merged and plain and message["role"] == merged[-1]["role"] and (
            set(merged[-1]) <= {"role", "content"}
        ):
            merged[-1]["content"] += f"\n\n{content}"
        else:
            merged.append({**message, "content": content})
    return merged


def _with_instruction(
    messages: list[dict[str, Any]], instruction: str, md_json: bool
) -> list[dict[str, Any]]:
    """The messages of instructor's JSON and MD_JSON modes.

    The schema text ends the system message, and MD_JSON asks for a code block after the last
    message (then consecutive messages of one role are merged).
    """
    out = [dict(message) for message in messages]
    if out and out[0]["role"] == "system" and isinstance(out[0]["content"], str):
        out[0]["content"] += f"\n\n{instruction}"
    else:
        out.insert(0, {"role": "system", "content": instruction})
    if md_json:
        out.append({"role": "user", "content": _MD_JSON_ASK})
    return _merge_consecutive(out)


def as_rendered(text: str) -> str:
    """What instructor's Jinja rendering makes of markup-free text (see the module docstring).

    Jinja splits on any newline, drops one trailing newline and joins the lines with newlines;
    instructor then dedents. Text with Jinja markup gets the same, and is never evaluated.
    """
    if "\r" not in text and not text.endswith("\n") and text[:1] not in ("", " ", "\t", "\n"):
        # The common case, 10x cheaper than dedent: no newline to normalise, and a first line
        # without indentation leaves no common margin, so dedent only empties blank lines.
        return _BLANK_LINE.sub("", text) if _BLANK_LINE.search(text) else text
    lines = _NEWLINE.split(text)
    if lines[-1] == "":
        del lines[-1]
    return textwrap.dedent("\n".join(lines))


def prepared_messages(
    messages: list[dict[str, Any]],
    plan: Plan,
    validation_context: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """The first request's messages, as instructor prepares them for the mode."""
    out = messages
    if plan.instruction is not None:
        out = _with_instruction(messages, plan.instruction, plan.md_json)
    if validation_context:
        out = [
            {**m, "content": as_rendered(m["content"])}
            if isinstance(m.get("content"), str)
            else m
            for m in out
        ]
    return out


# -- reading a reply -----------------------------------------------------------------------------


class ReplyError(ValueError):
    """The reply has no answer to parse (instructor's ``ResponseParsingError``): re-asked."""


class Unparseable(ValueError):
    """An MD_JSON reply beyond instructor's extraction bounds: not re-asked."""


def _first_choice(reply: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choices = reply.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return choices[0]
    return None


def _tool_calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []


def _raw(message: Mapping[str, Any]) -> str | None:
    for call in _tool_calls(message)[:1]:
        function = call.get("function")
        if isinstance(function, Mapping) and function.get("arguments") is not None:
            return str(function["arguments"])
    content = message.get("content")
    return content if isinstance(content, str) else None


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """One chat-completions reply, read once (``parse_reply``): what a call needs of it.

    Attributes:
        has_choices: The reply has a non-empty ``choices`` list.
        message: The first choice's message (empty when the reply has none).
        finish_reason: The first choice's ``finish_reason``, or None.
        refusal: The message's ``refusal``, when it has one.
        raw: The judge's raw text: the first tool call's arguments, else the content.
    """

    has_choices: bool
    message: Mapping[str, Any]
    finish_reason: Any
    refusal: str | None
    raw: str | None

    def answer(self, mode: StructuredMode) -> str:
        """The text to validate, read as instructor's handler for ``mode`` reads it.

        Raises:
            ReplyError: the reply has no choice, or (tools mode) no tool call or arguments.
            Unparseable: (md_json) the content is beyond instructor's extraction bounds.
        """
        if not self.has_choices:
            raise ReplyError(f"{_NO_CHOICES} (mode: tool_call)" if mode == "tools" else _NO_CHOICES)
        if mode == "tools":
            return _tool_arguments(self.message)
        content = self.message.get("content") or ""
        text = content if isinstance(content, str) else str(content)
        return _last_json_span(text) if mode == "md_json" else text

    def failure_reason(self) -> UnscoredReason:
        """Why a call whose last reply this was ends unscored (``failure_reason_of``)."""
        return failure_reason_of(
            refused=bool(self.refusal), finish_reason=self.finish_reason, raw=self.raw
        )


def parse_reply(reply: Mapping[str, Any]) -> ParsedReply:
    """Read a reply's first choice once: its message, finish reason, refusal and raw text."""
    choices = reply.get("choices")
    choice = _first_choice(reply)
    message = choice.get("message") if choice is not None else None
    message = message if isinstance(message, Mapping) else {}
    refusal = message.get("refusal")
    return ParsedReply(
        has_choices=isinstance(choices, list) and bool(choices),
        message=message,
        finish_reason=choice.get("finish_reason") if choice is not None else None,
        refusal=str(refusal) if refusal else None,
        raw=_raw(message),
    )


def _tool_arguments(message: Mapping[str, Any]) -> str:
    """The JSON text of the first tool call, as instructor's TOOLS mode extracts it."""
    calls = _tool_calls(message)
    target: Any = calls[0].get("function") if calls else message.get("function_call")
    if not isinstance(target, Mapping):
        raise ReplyError(_NO_TOOL_CALL)
    arguments = target.get("arguments")
    if arguments is None:
        raise ReplyError(_NO_ARGUMENTS)
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _last_json_span(content: str) -> str:
    """The last complete JSON object or array (instructor's ``extract_json_from_codeblock``).

    The last, not the first: JSON quoted from the prompt (the graded response may hold some)
    comes before the judge's own answer.
    """
    if len(content) > _MAX_EXTRACTION_CHARS:
        raise Unparseable("JSON extraction input exceeds the 1 MiB character limit")
    decoder = json.JSONDecoder()
    last: str | None = None
    consumed = 0
    remaining_work = 16 * len(content)  # instructor's linear bound on failed decodes
    for index, char in enumerate(content):
        if index < consumed or char not in "{[":
            continue
        if remaining_work < len(content) - index:
            raise Unparseable("JSON extraction malformed-input work limit exceeded")
        try:
            value, end = decoder.raw_decode(content, index)
        except json.JSONDecodeError:
            remaining_work -= len(content) - index
            continue
        except RecursionError as exc:
            raise Unparseable("JSON extraction nesting limit exceeded") from exc
        pending: list[tuple[Any, int]] = [(value, 1)]
        while pending:
            node, depth = pending.pop()
            if isinstance(node, dict | list):
                if depth > _MAX_JSON_DEPTH:
                    raise Unparseable("JSON extraction nesting exceeds the 128 level limit")
                children = node.values() if isinstance(node, dict) else node
                pending.extend((child, depth + 1) for child in children)
        remaining_work -= end - index
        last = content[index:end]
        consumed = end
    return last if last is not None else content


def _assistant_turn(message: Mapping[str, Any]) -> dict[str, Any]:
    """The judge's reply as instructor's ``dump_message`` writes it into a re-ask."""
    turn: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        turn["tool_calls"] = [
            {
                "function": {
                    "arguments": (call.get("function") or {}).get("arguments"),
                    "name": (call.get("function") or {}).get("name"),
                },
                "id": call.get("id"),
                "type": call.get("type", "function"),
            }
            for call in calls
            if isinstance(call, Mapping)
        ]
    return turn


def reask_messages(
    message: Mapping[str, Any], mode: StructuredMode, error: Exception
) -> list[dict[str, Any]]:
    """The messages instructor appends to re-ask after ``error`` (``message``: the reply's).

    ``reask_tools`` in TOOLS mode (a tool message per tool call, else a user message),
    ``reask_md_json`` in the JSON modes.
    """
    turns = [_assistant_turn(message)]
    if mode != "tools":
        turns.append({"role": "user", "content": _JSON_REASK.format(error=error)})
        return turns
    text = _TOOLS_REASK.format(error=error)
    calls = _tool_calls(message)
    if not calls:
        turns.append({"role": "user", "content": text})
    for call in calls:
        function = call.get("function") or {}
        turns.append(
            {
                "role": "tool",
                "tool_call_id": call.get("id"),
                "name": function.get("name") if isinstance(function, Mapping) else None,
                "content": text,
            }
        )
    return turns
