"""A loopback OpenAI-compatible chat-completions server that stands in for a judge model.

Tests, benchmarks and the fault-injection suite need a real HTTP server that speaks the OpenAI
chat completions API, so that the whole client stack (instructor over litellm over httpx/aiohttp)
runs exactly as in production. :class:`OpenAIStandIn` is that server: an aiohttp application on
127.0.0.1, in a background thread (``with``) or on the caller's event loop (``async with``).

::

    with OpenAIStandIn(latency=0.2, faults=FaultPlan({"rate_limit": 0.1}, seed=7)) as srv:
        srv.base_url          # "http://127.0.0.1:PORT/v1"
        ...                   # point litellm at it: model="openai/standin", api_base=srv.base_url
        srv.stats().outcomes  # {"ok": 91, "rate_limit": 9}

Endpoints: ``POST /v1/chat/completions`` (also streamed as SSE when ``stream: true``),
``GET /v1/models``, ``GET /health``. Only chat completions count in :meth:`OpenAIStandIn.stats`.

Strict by default, like the real API
------------------------------------
OpenAI's API answers a chat-completions body with any top-level field it does not document with
HTTP 400 and ``{"error": {"message": "Unrecognized request argument supplied: <name>", "type":
"invalid_request_error", "param": null, "code": null}}`` (several unknown fields: "Unrecognized
request arguments supplied: a, b"). The stand-in does the same, so a client that leaks a private
keyword into the body (instructor's old ``validation_context``, a litellm-only option) fails here
as it would in production. The documented fields are :data:`OPENAI_CHAT_PARAMS`, read from the
installed ``openai`` package's ``CompletionCreateParams`` so the list follows the SDK. Only
top-level names are checked: nested objects (``response_format``, ``tools``...) are checked only
as far as the answer needs them, so llama.cpp's ``response_format: {"type": "json_object",
"schema": ...}`` (the product's ``json_object_schema`` mode, meant for lenient local servers)
passes. ``OpenAIStandIn(strict=False)`` (CLI ``--lenient``) accepts unknown top-level fields, as
llama.cpp, vLLM and Ollama do; use it only to test that switch or a local-server dialect.

Every chat-completions body that parses as a JSON object is recorded in
:attr:`OpenAIStandIn.requests`, rejected ones included (their 400 messages are in
:attr:`OpenAIStandIn.rejections`); a rejected body draws no fault from the :class:`FaultPlan`.

Default answers (no ``handler``) are *valid* for the request's own schema:

- ``tools`` present (``tool_choice`` naming a function, ``"required"``, ``"auto"`` or absent): one
  call to the named (else the first) function, its ``arguments`` an instance of the function's
  ``parameters`` schema (:func:`judge.testing.schemas.schema_instance`).
  ``tool_choice: "none"`` is answered as a plain request.
- ``response_format: {"type": "json_schema"}``: the content is an instance of that schema.
- ``response_format: {"type": "json_object"}``: the schema embedded in the messages after the word
  ``json_schema`` (instructor's ``JSON`` mode), else ``{}``.
- no ``response_format`` but a schema embedded after ``json_schema`` (instructor's ``MD_JSON``
  mode): the instance inside a fenced json code block.
- anything else is a plain request: ``plain_reply`` when given, else
  ``"[Included Bonus Points]: 1"`` when the prompt contains ``[Bonus Points]`` (the CharToM-QA
  coverage prompt), else ``"[Defect]: None"``.

A ``handler`` replaces the default: a callable ``handler(request_json) -> ReplyLike`` (may be
async), or a sequence of replies consumed in order (a request after the last one gets a 500 and
counts as ``handler_error``). A :data:`ReplyLike` is a :class:`Reply` (sent as is), or a payload
placed where the request's mode expects it: a ``str`` verbatim, a dict/list serialised as JSON
(tool-call arguments in tools mode, fenced in MD_JSON mode, the content otherwise).

Faults (:class:`FaultPlan`) are decided per chat-completion request, from a seeded RNG or a
scripted sequence; see :data:`FaultKind` for what each does. Token counts in ``usage`` are a
deterministic estimate (``max(words, chars / 4)`` per text, CJK-aware via :mod:`core.text`).

How the client stack reacts
---------------------------
Observed with litellm 1.106.2, instructor 1.17.0, openai 2.54 (``tests/judge/
test_openai_standin.py`` pins the modes, exceptions, re-asks, refusal and usage lines; the
litellm-retry and cost lines were checked by hand), calling
``instructor.from_litellm(litellm.acompletion, mode=...)`` and
``client.chat.completions.create(model="openai/standin", api_base=base_url, api_key="sk-test",
response_model=M, max_retries=N, num_retries=0, timeout=T)``:

- All four modes round-trip: ``TOOLS`` sends ``tools`` + ``tool_choice: {"type": "function",
  "function": {"name": <Model>}}``; ``JSON_SCHEMA`` sends ``response_format: {"type":
  "json_schema", "json_schema": {"name", "schema"}}``; ``JSON`` sends ``response_format:
  {"type": "json_object"}`` and appends the schema to the system message (after the words
  "json_schema:"); ``MD_JSON`` sends no ``response_format``, the same system text, and expects a
  fenced json code block. litellm strips the ``openai/`` prefix: the server sees
  ``model: "standin"``.
- Every failure of the HTTP call is wrapped by instructor, even with ``max_retries=0``:
  ``instructor.core.InstructorRetryException`` (the same class as
  ``instructor.exceptions.InstructorRetryException``, which is a deprecated import path) with
  ``n_attempts == 1``, ``last_completion is None``, ``failed_attempts == []``, zero
  ``total_usage``, and the litellm exception as ``__cause__``. instructor never retries these
  (``max_retries`` only counts validation re-asks); with ``num_retries=0`` litellm does not
  either, so the server sees exactly one request. Without ``num_retries=0`` litellm retries
  internally (a 500 then a 500 then success is 3 requests and no error).
- The ``__cause__`` (also what a bare ``litellm.acompletion`` raises), all under
  ``litellm.exceptions`` (re-exported as ``litellm.X``) and subclasses of ``openai.APIError``:

  - 429 -> ``litellm.RateLimitError``, ``status_code == 429``. The ``Retry-After`` value is in
    ``exc.litellm_response_headers["retry-after"]`` (an ``httpx.Headers``; a string, e.g.
    ``"7"``); ``exc.response.headers`` does not carry it.
  - 500 -> ``litellm.InternalServerError`` (500); 502 -> ``litellm.BadGatewayError`` (502);
    503 -> ``litellm.ServiceUnavailableError`` (503). Use ``status_code`` rather than the class.
  - client timeout (``timeout=`` seconds) -> ``litellm.Timeout`` (subclass of
    ``openai.APITimeoutError`` and ``openai.APIConnectionError``), ``status_code == 408``.
  - connection reset -> ``litellm.InternalServerError`` with ``status_code == 500`` and message
    ``"... OpenAIException - Connection error."``; its ``__context__`` chain is litellm's
    ``OpenAIError`` -> ``openai.APIConnectionError`` -> ``httpx.ConnectError`` ->
    ``aiohttp.ClientOSError`` (errno 104, "Connection reset by peer"): litellm sends through
    aiohttp. Tell it from a real 500 by that chain or the message, not the class.
- ``finish_reason: "length"`` -> ``instructor.core.IncompleteOutputException`` raised directly
  (not wrapped, no re-ask even with ``max_retries=2``: one request), with ``last_completion`` set,
  in all four modes.
- ``malformed_json`` and ``invalid`` -> instructor re-asks: with ``max_retries=2`` the server sees
  3 requests (the re-ask appends the bad assistant message and a tool/user message quoting the
  pydantic error), then ``InstructorRetryException`` with ``n_attempts == 3``,
  ``last_completion`` (the last ``litellm.ModelResponse``), ``failed_attempts`` (a list of
  ``instructor.core.FailedAttempt(attempt_number, exception, completion)``, the exception a
  ``pydantic.ValidationError``), ``total_usage`` (an ``openai`` ``CompletionUsage`` summed over
  attempts) and ``__cause__`` the last ``pydantic.ValidationError`` (``json_invalid`` for
  malformed JSON, ``literal_error``/``missing`` for invalid). A re-ask that then succeeds returns
  normally. The ``duplicate`` variant passes a model that has no uniqueness validator.
- ``refusal`` and ``empty`` are not recognised as such: they are re-asked like a parse failure
  and end in ``InstructorRetryException`` whose cause is
  ``instructor.core.ResponseParsingError("No tool calls or function call found ...")`` in
  ``TOOLS`` mode, a ``pydantic.ValidationError`` (``json_invalid`` on ``''``) in the JSON modes.
  To classify a refusal, read ``exc.last_completion.choices[0].message``: litellm's ``Message``
  has no ``refusal`` attribute; the text is in ``message.provider_specific_fields["refusal"]``
  (``content`` None, ``tool_calls`` None).
- Usage: ``create_with_completion`` returns ``(model, completion)``; ``completion.usage``
  (``prompt_tokens``, ``completion_tokens``, ``total_tokens``) is summed over all attempts,
  re-asks included (it equals the server's own totals). Cost: ``litellm.completion_cost(
  completion)`` raises ``litellm.exceptions.ModelNotMappedError`` (a plain ``Exception``
  subclass) for a model litellm does not know, and
  ``completion._hidden_params["response_cost"]`` is None. Pass ``custom_cost_per_token=
  {"input_cost_per_token": ..., "output_cost_per_token": ...}`` to ``completion_cost``, or
  call ``litellm.register_model({"openai/standin": {...}})`` first (then ``response_cost`` is
  filled in too).
- A plain ``litellm.acompletion`` returns ``ModelResponse`` with ``choices[0].message.content``;
  ``stream=True`` (with ``stream_options={"include_usage": True}``) yields chunks and a final
  usage chunk. instructor's ``create(..., stream=True)`` is not a streaming path through
  litellm (use ``create_partial``); the product does not stream.
- Set ``litellm.suppress_debug_info = True`` to stop litellm printing a help banner on stdout
  for every error.
- instructor takes the validators' context as ``context=``; ``validation_context=`` is no
  parameter of instructor 1.17's ``create``/``create_with_completion``, so it stays in the
  completion kwargs, and litellm sends every keyword it does not consume in the request body.
  The strict stand-in answers that with 400 -> ``litellm.BadRequestError`` (``status_code ==
  400``), wrapped in ``InstructorRetryException`` like any HTTP failure. litellm's own options
  (``api_base``, ``api_key``, ``timeout``, ``num_retries``, ``extra_body``) never reach the body;
  ``extra_body`` is merged into it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import ipaddress
import json
import math
import random
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias, get_args

from aiohttp import web

from core.errors import ConfigError
from core.text import count_words
from judge.testing.schemas import (
    SchemaError,
    find_embedded_schema,
    invalid_instance,
    schema_instance,
)

__all__ = [
    "FAULT_KINDS",
    "OPENAI_CHAT_PARAMS",
    "FaultKind",
    "FaultPlan",
    "Handler",
    "OpenAIStandIn",
    "Reply",
    "ReplyLike",
    "StandInStats",
    "ToolCall",
    "main",
]

FaultKind = Literal[
    "rate_limit",
    "rate_limit_no_header",
    "server_error",
    "timeout",
    "reset",
    "malformed_json",
    "invalid",
    "truncated",
    "refusal",
    "empty",
]
"""What can go wrong with one request.

- ``rate_limit``: HTTP 429 with a ``Retry-After`` header (:attr:`FaultPlan.retry_after`).
- ``rate_limit_no_header``: HTTP 429 without ``Retry-After``.
- ``server_error``: HTTP 500/502/503 (:attr:`FaultPlan.server_error_statuses`, cycled or random).
- ``timeout``: the answer is held :attr:`FaultPlan.timeout_hold` seconds (far past any client
  timeout), then sent; server shutdown releases held requests at once.
- ``reset``: the TCP connection is reset (RST) without any response.
- ``malformed_json``: tool-call arguments / content that are not JSON (single-quoted keys);
  plain requests get ``"Null"`` (the unparseable reply of protocol.md section 4).
- ``invalid``: valid JSON that fails the schema (an enum field out of range, two items sharing an
  enum value, or a missing required field; see :attr:`FaultPlan.invalid_variant`); plain requests
  get ``"[Included Bonus Points]: 99"`` (an index no rubric has).
- ``truncated``: ``finish_reason: "length"`` and the payload cut in half (mid-JSON).
- ``refusal``: ``message.refusal`` set and ``content`` null; plain requests get the refusal text
  as content (as real models do outside structured outputs).
- ``empty``: ``content: ""`` and no tool calls.
"""

FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
"""Every fault kind, in declaration order."""


def _documented_chat_params() -> frozenset[str]:
    """The top-level fields of OpenAI's chat-completions request, from the ``openai`` SDK."""
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


OPENAI_CHAT_PARAMS: frozenset[str] = _documented_chat_params()
"""Every top-level field OpenAI documents for ``POST /v1/chat/completions``.

Derived from the installed ``openai`` package's ``CompletionCreateParams`` (``model``,
``messages``, ``tools``, ``response_format``, ``temperature``, ``max_tokens``, ``seed``,
``stream``...). The strict stand-in rejects any other top-level field with HTTP 400, as OpenAI does.
"""

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
"""OpenAI ``finish_reason`` values the stand-in emits."""

InvalidVariantChoice = Literal["cycle", "out_of_range", "duplicate", "missing"]
"""How the ``invalid`` fault breaks a payload (``cycle`` rotates through the other three)."""

_REFUSAL_TEXT = "I'm sorry, but I can't help with that request."


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


@dataclass(frozen=True)
class FaultPlan:
    """Which faults the server injects, per chat-completion request.

    A scripted ``sequence`` is consumed first, one entry per request (``None`` or ``"ok"`` means
    no fault); after it runs out (or when it is None), each request draws one fault from
    ``probabilities`` with a ``random.Random(seed)``, so a run is reproducible.

    Attributes:
        probabilities: Probability of each fault kind per request; their sum must not exceed 1.
        sequence: Scripted faults for the first requests, in order.
        seed: Seed of the RNG that draws faults (and random 5xx statuses).
        retry_after: Value of the ``Retry-After`` header of ``rate_limit`` answers, in seconds.
        server_error_statuses: The statuses ``server_error`` answers with.
        server_error_order: ``cycle`` through the statuses in order, or draw them at ``random``.
        timeout_hold: How long a ``timeout`` request is held before it is answered, in seconds.
        invalid_variant: How ``invalid`` breaks a payload (``cycle``: out_of_range, duplicate,
            missing, in turn; each falls back to the next that the schema allows).
    """

    probabilities: Mapping[FaultKind, float] = field(default_factory=dict)
    sequence: Sequence[FaultKind | Literal["ok"] | None] | None = None
    seed: int = 0
    retry_after: float = 1.0
    server_error_statuses: tuple[int, ...] = (500, 502, 503)
    server_error_order: Literal["cycle", "random"] = "cycle"
    timeout_hold: float = 60.0
    invalid_variant: InvalidVariantChoice = "cycle"

    def __post_init__(self) -> None:
        total = 0.0
        for kind, probability in self.probabilities.items():
            if kind not in FAULT_KINDS:
                raise ConfigError(
                    f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}",
                    field=f"probabilities.{kind}",
                )
            if not isinstance(probability, int | float) or not 0.0 <= probability <= 1.0:
                raise ConfigError(
                    f"fault probability for {kind!r} must be in [0, 1], got {probability!r}",
                    field=f"probabilities.{kind}",
                )
            total += probability
        if total > 1.0 + 1e-9:
            raise ConfigError(
                f"fault probabilities sum to {total:.3f}, more than 1", field="probabilities"
            )
        for position, entry in enumerate(self.sequence or ()):
            if entry is not None and entry != "ok" and entry not in FAULT_KINDS:
                raise ConfigError(
                    f"unknown fault kind {entry!r} in sequence; expected one of "
                    f"ok, {', '.join(FAULT_KINDS)}",
                    field=f"sequence[{position}]",
                )
        if self.retry_after < 0:
            raise ConfigError("retry_after must be >= 0", field="retry_after")
        if not self.server_error_statuses or any(
            not 500 <= status <= 599 for status in self.server_error_statuses
        ):
            raise ConfigError(
                "server_error_statuses must be a non-empty tuple of 5xx codes",
                field="server_error_statuses",
            )
        if self.server_error_order not in ("cycle", "random"):
            raise ConfigError(
                "server_error_order must be cycle or random", field="server_error_order"
            )
        if self.timeout_hold < 0:
            raise ConfigError("timeout_hold must be >= 0", field="timeout_hold")
        if self.invalid_variant not in get_args(InvalidVariantChoice):
            raise ConfigError(
                f"invalid_variant must be one of {', '.join(get_args(InvalidVariantChoice))}",
                field="invalid_variant",
            )

    @classmethod
    def from_specs(cls, specs: Sequence[str], **options: Any) -> FaultPlan:
        """Build a plan from ``kind=probability`` strings (the CLI's ``--fault`` values).

        Args:
            specs: Strings such as ``"malformed_json=0.3"``.
            **options: Other :class:`FaultPlan` fields (``seed``, ``retry_after``...).

        Returns:
            The plan.

        Raises:
            ConfigError: If a spec is not ``kind=probability`` or names an unknown kind.
        """
        probabilities: dict[FaultKind, float] = {}
        for spec in specs:
            name, sep, value = spec.partition("=")
            name = name.strip()
            if not sep:
                raise ConfigError(
                    f"fault spec {spec!r} must look like kind=probability", field="fault"
                )
            try:
                probability = float(value)
            except ValueError:
                raise ConfigError(
                    f"fault spec {spec!r}: {value!r} is not a number", field="fault"
                ) from None
            if name not in FAULT_KINDS:
                raise ConfigError(
                    f"fault spec {spec!r}: unknown kind; expected one of {', '.join(FAULT_KINDS)}",
                    field="fault",
                )
            probabilities[name] = probabilities.get(name, 0.0) + probability  # type: ignore[index]
        return cls(probabilities=probabilities, **options)


@dataclass(frozen=True)
class StandInStats:
    """A consistent snapshot of the server's counters.

    Attributes:
        requests: Chat-completion requests received (including rejected and faulted ones).
        in_flight: Requests being handled at the time of the snapshot.
        max_in_flight: The most requests handled at once since start (or the last reset).
        outcomes: Requests by outcome: ``ok``, each :data:`FaultKind`, ``bad_request`` (a body
            the server rejected with 400: not JSON, malformed, or, when strict, carrying an
            undocumented field) and ``handler_error`` (the handler raised or ran out).
        prompt_tokens: Sum of ``usage.prompt_tokens`` sent.
        completion_tokens: Sum of ``usage.completion_tokens`` sent.
    """

    requests: int
    in_flight: int
    max_in_flight: int
    outcomes: dict[str, int]
    prompt_tokens: int
    completion_tokens: int

    @property
    def ok(self) -> int:
        """Requests answered normally."""
        return self.outcomes.get("ok", 0)

    @property
    def faults(self) -> int:
        """Requests that got an injected fault."""
        return sum(count for kind, count in self.outcomes.items() if kind in FAULT_KINDS)


# ------------------------------------------------------------------------------------------------
# Request analysis


Mode = Literal["tools", "json_schema", "json_object", "md_json", "plain"]


@dataclass(frozen=True)
class _Shape:
    """What kind of answer a request expects."""

    mode: Mode
    schema: dict[str, Any] | None = None
    tool_name: str | None = None


def _message_text(message: Any) -> str:
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


def _prompt_text(body: Mapping[str, Any]) -> str:
    return "\n".join(_message_text(message) for message in body.get("messages") or [])


def _validate_body(body: Any) -> str | None:
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


def _unknown_fields(body: Any) -> str | None:
    """OpenAI's 400 message for a body with undocumented top-level fields, or None."""
    if not isinstance(body, Mapping):
        return None
    unknown = [str(name) for name in body if name not in OPENAI_CHAT_PARAMS]
    if not unknown:
        return None
    if len(unknown) == 1:
        return f"Unrecognized request argument supplied: {unknown[0]}"
    return f"Unrecognized request arguments supplied: {', '.join(unknown)}"


def _analyse(body: Mapping[str, Any]) -> _Shape:
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
        return _Shape(
            mode="tools",
            schema=dict(parameters) if isinstance(parameters, Mapping) else {},
            tool_name=str(chosen["name"]),
        )
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping):
        kind = response_format.get("type")
        if kind == "json_schema":
            spec = response_format.get("json_schema") or {}
            return _Shape(mode="json_schema", schema=dict(spec.get("schema") or {}))
        if kind == "json_object":
            return _Shape(mode="json_object", schema=_embedded_schema(body))
    embedded = _embedded_schema(body)
    if embedded is not None:
        return _Shape(mode="md_json", schema=embedded)
    return _Shape(mode="plain")


def _embedded_schema(body: Mapping[str, Any]) -> dict[str, Any] | None:
    messages = body.get("messages") or []
    # instructor puts the schema in the system message; look there first.
    ordered = sorted(messages, key=lambda m: 0 if m.get("role") == "system" else 1)
    for message in ordered:
        found = find_embedded_schema(_message_text(message))
        if found is not None:
            return found
    return None


def _approx_tokens(text: str) -> int:
    if not text:
        return 0
    return max(count_words(text), math.ceil(len(text) / 4))


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    # Per-message overhead as in OpenAI's accounting (role and separators).
    total = 3
    for message in body.get("messages") or []:
        total += 4 + _approx_tokens(_message_text(message))
    for key in ("tools", "response_format"):
        if body.get(key):
            total += _approx_tokens(json.dumps(body[key], separators=(",", ":")))
    return total


def _completion_tokens(reply: Reply) -> int:
    total = _approx_tokens(reply.content or "") + _approx_tokens(reply.refusal or "")
    for call in reply.tool_calls:
        total += _approx_tokens(call.name) + _approx_tokens(call.arguments)
    return total


# ------------------------------------------------------------------------------------------------
# Replies and faults


def _default_plain(body: Mapping[str, Any]) -> str:
    if "[Bonus Points]" in _prompt_text(body):
        return "[Included Bonus Points]: 1"
    return "[Defect]: None"


def _place(payload: str, shape: _Shape, *, finish_reason: FinishReason | None = None) -> Reply:
    """Put a payload where the request's mode expects the answer."""
    if shape.mode == "tools":
        return Reply(
            tool_calls=(ToolCall(name=shape.tool_name or "function", arguments=payload),),
            finish_reason=finish_reason,
        )
    if shape.mode == "md_json":
        return Reply(content=f"```json\n{payload}\n```", finish_reason=finish_reason)
    return Reply(content=payload, finish_reason=finish_reason)


def _payload_of(reply: Reply, shape: _Shape) -> str:
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


class _FaultDecider:
    """The stateful side of a :class:`FaultPlan` (RNG, sequence position, rotations)."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.position = 0
        self.server_errors = 0
        self.invalids = 0

    def next_fault(self) -> FaultKind | None:
        sequence = self.plan.sequence
        if sequence is not None and self.position < len(sequence):
            entry = sequence[self.position]
            self.position += 1
            return None if entry is None or entry == "ok" else entry
        if not self.plan.probabilities:
            return None
        draw = self.rng.random()
        cumulative = 0.0
        for kind, probability in self.plan.probabilities.items():
            cumulative += probability
            if draw < cumulative:
                return kind
        return None

    def server_error_status(self) -> int:
        statuses = self.plan.server_error_statuses
        if self.plan.server_error_order == "random":
            return self.rng.choice(statuses)
        status = statuses[self.server_errors % len(statuses)]
        self.server_errors += 1
        return status

    def invalid_variant(self) -> Literal["out_of_range", "duplicate", "missing"]:
        if self.plan.invalid_variant != "cycle":
            return self.plan.invalid_variant
        order: tuple[Literal["out_of_range", "duplicate", "missing"], ...] = (
            "out_of_range",
            "duplicate",
            "missing",
        )
        variant = order[self.invalids % len(order)]
        self.invalids += 1
        return variant


class _ScriptedHandler:
    """Serve a fixed list of replies in order; raise once it runs out (like inspect's MockLLM)."""

    def __init__(self, replies: Sequence[ReplyLike]) -> None:
        self._replies: Iterator[ReplyLike] = iter(list(replies))
        self._count = len(replies)

    def __call__(self, body: dict[str, Any]) -> ReplyLike:
        try:
            return next(self._replies)
        except StopIteration:
            raise LookupError(f"scripted replies ran out after {self._count} replies") from None


def _error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _json_response(
    payload: Mapping[str, Any], *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=json.dumps(payload, ensure_ascii=False).encode(),
        status=status,
        content_type="application/json",
        headers=dict(headers or {}),
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ------------------------------------------------------------------------------------------------
# The server


class OpenAIStandIn:
    """A loopback OpenAI-compatible server with scripted replies, latency and fault injection.

    Use it as a context manager: ``with`` runs the server on its own event loop in a background
    thread (usable from sync code and from other event loops); ``async with`` runs it on the
    caller's running loop. See the module docstring for the default answers and fault kinds.

    Args:
        latency: Seconds every chat completion waits before it is answered.
        jitter: Latency varies uniformly in ``[latency - jitter, latency + jitter]`` (seeded).
        handler: A callable or a sequence of scripted replies; None for schema-valid defaults.
        faults: The fault plan; None for no faults.
        plain_reply: The text of plain (non-structured) default answers; None for the
            CharToM-QA-shaped default.
        host: The address to bind; must be loopback unless ``allow_remote``.
        port: The port to bind; 0 picks a free one.
        record_requests: How many of the latest request bodies :attr:`requests` keeps (0: none).
        models: Model ids listed by ``GET /v1/models``.
        seed: Seed of the jitter RNG.
        allow_remote: Allow binding a non-loopback address.
        strict: Reject a body with a top-level field outside :data:`OPENAI_CHAT_PARAMS` with
            OpenAI's HTTP 400 (the default, as the real API does); False accepts extras, as
            lenient local servers (llama.cpp, vLLM, Ollama) do.
        api_key: When set, a request without ``Authorization: Bearer <api_key>`` gets OpenAI's
            401 ``invalid_api_key`` (as the real API answers a wrong key).
        check_model: Answer a request for a model not in ``models`` with OpenAI's 404
            ``model_not_found`` (off by default: tests name models freely).

    Raises:
        ConfigError: If an option is out of range or the host is not loopback.
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        jitter: float = 0.0,
        handler: Handler | Sequence[ReplyLike] | None = None,
        faults: FaultPlan | None = None,
        plain_reply: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        record_requests: int = 100,
        models: Sequence[str] = ("standin",),
        seed: int = 0,
        allow_remote: bool = False,
        strict: bool = True,
        api_key: str | None = None,
        check_model: bool = False,
    ) -> None:
        if latency < 0:
            raise ConfigError("latency must be >= 0", field="latency")
        if jitter < 0:
            raise ConfigError("jitter must be >= 0", field="jitter")
        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be in 0..65535, got {port}", field="port")
        if record_requests < 0:
            raise ConfigError("record_requests must be >= 0", field="record_requests")
        if not allow_remote and not _is_loopback(host):
            raise ConfigError(
                f"refusing to bind non-loopback host {host!r} without allow_remote", field="host"
            )
        self.latency = latency
        self.jitter = jitter
        self.plain_reply = plain_reply
        self.strict = strict
        self.api_key = api_key
        self.check_model = check_model
        self.host = host
        self.models = tuple(models)
        self._requested_port = port
        self._port: int | None = None
        self._jitter_rng = random.Random(seed)
        self._handler: Handler | None = None
        self.handler = handler
        self._faults: FaultPlan | None = None
        self._decider: _FaultDecider | None = None
        self.faults = faults
        self._lock = threading.Lock()
        self._recorded: deque[dict[str, Any]] = deque(maxlen=record_requests or None)
        self._record = record_requests > 0
        self._handler_errors: list[str] = []
        self._rejections: list[str] = []
        self._reset_counters()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self._thread_done: asyncio.Event | None = None

    # -- configuration -----------------------------------------------------------------------

    @property
    def handler(self) -> Handler | None:
        """The reply handler (None: schema-valid defaults). Settable while running."""
        return self._handler

    @handler.setter
    def handler(self, value: Handler | Sequence[ReplyLike] | None) -> None:
        if value is None or callable(value):
            self._handler = value
        elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
            self._handler = _ScriptedHandler(value)
        else:
            raise ConfigError(
                "handler must be a callable, a sequence of replies, or None", field="handler"
            )

    @property
    def faults(self) -> FaultPlan | None:
        """The fault plan. Setting it restarts its RNG and sequence. Settable while running."""
        return self._faults

    @faults.setter
    def faults(self, value: FaultPlan | None) -> None:
        if value is not None and not isinstance(value, FaultPlan):
            raise ConfigError("faults must be a FaultPlan or None", field="faults")
        self._faults = value
        self._decider = _FaultDecider(value) if value is not None else None

    @property
    def port(self) -> int:
        """The bound port.

        Raises:
            RuntimeError: If the server is not running.
        """
        if self._port is None:
            raise RuntimeError("the stand-in server is not running")
        return self._port

    @property
    def url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:8011``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``.../v1``), for ``api_base``/``base_url``."""
        return f"{self.url}/v1"

    # -- counters ----------------------------------------------------------------------------

    def _reset_counters(self) -> None:
        self._requests = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._outcomes: dict[str, int] = {}
        self._prompt_tokens = 0
        self._completion_tokens = 0

    def stats(self) -> StandInStats:
        """Return a consistent snapshot of the counters (thread-safe)."""
        with self._lock:
            return StandInStats(
                requests=self._requests,
                in_flight=self._in_flight,
                max_in_flight=self._max_in_flight,
                outcomes=dict(self._outcomes),
                prompt_tokens=self._prompt_tokens,
                completion_tokens=self._completion_tokens,
            )

    def reset_stats(self) -> None:
        """Zero the counters (requests in flight stay counted as in flight)."""
        with self._lock:
            in_flight = self._in_flight
            self._reset_counters()
            self._in_flight = in_flight
            self._max_in_flight = in_flight

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The latest chat-completion bodies (parsed JSON), oldest first (a copy).

        Rejected bodies (HTTP 400) are included, so a test can see exactly what a client sent;
        only a body that is not a JSON object cannot be recorded.
        """
        with self._lock:
            return list(self._recorded)

    def clear_requests(self) -> None:
        """Forget the recorded request bodies and the rejection messages."""
        with self._lock:
            self._recorded.clear()
            self._rejections.clear()

    @property
    def rejections(self) -> list[str]:
        """The messages of the HTTP 400 answers to chat completions (a copy), oldest first."""
        with self._lock:
            return list(self._rejections)

    @property
    def handler_errors(self) -> list[str]:
        """Messages of the exceptions the handler raised (a copy), oldest first."""
        with self._lock:
            return list(self._handler_errors)

    def _count(self, outcome: str) -> None:
        with self._lock:
            self._outcomes[outcome] = self._outcomes.get(outcome, 0) + 1

    # -- lifecycle ---------------------------------------------------------------------------

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/models", self._list_models)
        app.router.add_get("/health", self._health)
        return app

    async def _startup(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._requested_port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot bind {self.host}:{self._requested_port}: {exc}", field="port"
            ) from exc
        self._stopping = asyncio.Event()
        # No access log: at concurrency 128 its formatting shows up in benchmarks.
        runner = web.AppRunner(self._make_app(), access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        # A deep backlog so that a burst of hundreds of connections is not refused.
        site = web.SockSite(runner, sock, backlog=2048)
        await site.start()
        self._runner = runner
        self._port = int(sock.getsockname()[1])
        self._loop = asyncio.get_running_loop()

    async def _shutdown(self) -> None:
        if self._stopping is not None:
            # Releases requests held by latency or the timeout fault, so cleanup is quick.
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self._port = None

    def start(self) -> Self:
        """Start the server in a background thread and wait until it accepts connections.

        Returns:
            The server itself.

        Raises:
            RuntimeError: If it is already running.
            ConfigError: If the port cannot be bound.
        """
        if self._port is not None or self._thread is not None:
            raise RuntimeError("the stand-in server is already running")
        self._started.clear()
        self._startup_error = None
        self._thread = threading.Thread(
            target=self._thread_main, name="openai-standin", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise self._startup_error
        return self

    def _thread_main(self) -> None:
        async def serve() -> None:
            try:
                await self._startup()
            except BaseException as exc:
                self._startup_error = exc
                self._started.set()
                return
            self._thread_done = asyncio.Event()
            self._started.set()
            await self._thread_done.wait()
            await self._shutdown()

        asyncio.run(serve())

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the background server and wait for its thread (no-op if not running).

        Requests still waiting (latency, the ``timeout`` fault) are released and answered at once.

        Args:
            timeout: Seconds to wait for the thread to finish.

        Raises:
            RuntimeError: If the server thread is still running after ``timeout`` seconds.
        """
        thread, loop, done = self._thread, self._loop, self._thread_done
        if thread is None:
            return
        if loop is not None and done is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop may close between check and call
                loop.call_soon_threadsafe(done.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"the stand-in server did not stop within {timeout:g} s")
        self._thread = None
        self._loop = None
        self._thread_done = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def astart(self) -> Self:
        """Start the server on the running event loop.

        Returns:
            The server itself.

        Raises:
            RuntimeError: If it is already running.
            ConfigError: If the port cannot be bound.
        """
        if self._port is not None or self._thread is not None:
            raise RuntimeError("the stand-in server is already running")
        await self._startup()
        return self

    async def aclose(self) -> None:
        """Stop a server started with :meth:`astart` (no-op if not running)."""
        if self._thread is not None:
            # Started in a thread: stopping blocks, so keep the caller's loop responsive.
            await asyncio.to_thread(self.stop)
            return
        await self._shutdown()
        self._loop = None

    async def __aenter__(self) -> Self:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- endpoints ---------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return _json_response({"status": "ok"})

    async def _list_models(self, request: web.Request) -> web.Response:
        created = int(time.time())
        data = [
            {"id": model, "object": "model", "created": created, "owned_by": "bonusjudge-standin"}
            for model in self.models
        ]
        return _json_response({"object": "list", "data": data})

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up at once when the server shuts down."""
        if seconds <= 0:
            return
        stopping = self._stopping
        if stopping is None or stopping.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), seconds)

    def _latency(self) -> float:
        if self.jitter <= 0:
            return self.latency
        return max(0.0, self.latency + self._jitter_rng.uniform(-self.jitter, self.jitter))

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            self._requests += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            return await self._answer(request)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _reject(self, message: str) -> web.Response:
        with self._lock:
            self._rejections.append(message)
        self._count("bad_request")
        return _json_response(_error_body(message, "invalid_request_error"), status=400)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return self._reject(f"request body is not valid JSON: {exc}")
        # Recorded before any check, so tests see rejected bodies too (what the client sent).
        if self._record and isinstance(body, dict):
            with self._lock:
                self._recorded.append(body)
        # The unknown-field check comes first, so its message names the field whatever else
        # is wrong with the body.
        if self.api_key is not None and (
            request.headers.get("Authorization") != f"Bearer {self.api_key}"
        ):
            self._count("unauthorized")
            return _json_response(
                _error_body("Incorrect API key provided.", "invalid_request_error",
                            "invalid_api_key"),
                status=401,
            )
        problem = (_unknown_fields(body) if self.strict else None) or _validate_body(body)
        if problem is not None:
            return self._reject(problem)
        if self.check_model and body.get("model") not in self.models:
            self._count("model_not_found")
            return _json_response(
                _error_body(
                    f"The model `{body.get('model')}` does not exist or you do not have access "
                    "to it.", "invalid_request_error", "model_not_found",
                ),
                status=404,
            )

        decider = self._decider
        fault = decider.next_fault() if decider is not None else None
        await self._pause(self._latency())

        if fault == "rate_limit" and decider is not None:
            self._count(fault)
            return _json_response(
                _error_body("Rate limit reached (stand-in)", "requests", "rate_limit_exceeded"),
                status=429,
                headers={"Retry-After": f"{decider.plan.retry_after:g}"},
            )
        if fault == "rate_limit_no_header":
            self._count(fault)
            return _json_response(
                _error_body("Rate limit reached (stand-in)", "requests", "rate_limit_exceeded"),
                status=429,
            )
        if fault == "server_error" and decider is not None:
            self._count(fault)
            status = decider.server_error_status()
            return _json_response(
                _error_body(f"The server had an error (stand-in {status})", "server_error"),
                status=status,
            )
        if fault == "reset":
            self._count(fault)
            return self._reset(request)

        try:
            reply = await self._reply(body, fault, decider)
        except Exception as exc:  # the handler is user code: report, do not kill the server
            message = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self._handler_errors.append(message)
            self._count("handler_error")
            return _json_response(
                _error_body(f"stand-in handler failed: {message}", "server_error"), status=500
            )

        if fault == "timeout" and decider is not None:
            await self._pause(decider.plan.timeout_hold)
        self._count(fault or "ok")
        prompt_tokens = _prompt_tokens(body)
        completion_tokens = _completion_tokens(reply)
        with self._lock:
            self._prompt_tokens += prompt_tokens
            self._completion_tokens += completion_tokens
        model = str(body.get("model") or self.models[0])
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if body.get("stream"):
            return await self._stream(request, body, reply, model, usage)
        return _json_response(_completion(reply, model, usage))

    def _reset(self, request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                # Linger 0 turns close() into a TCP RST: the client sees "connection reset".
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        # aiohttp needs a response object; nothing reaches the client over an aborted transport.
        return web.Response(status=499)

    async def _reply(
        self, body: dict[str, Any], fault: FaultKind | None, decider: _FaultDecider | None
    ) -> Reply:
        shape = _analyse(body)
        handler = self._handler
        if handler is not None:
            produced = handler(body)
            if inspect.isawaitable(produced):
                produced = await produced
            reply = self._to_reply(produced, shape)
        else:
            reply = self._default_reply(body, shape)
        if fault is None or fault == "timeout":
            return reply
        return self._apply_fault(reply, shape, fault, decider, body)

    def _to_reply(self, produced: Any, shape: _Shape) -> Reply:
        if isinstance(produced, Reply):
            return produced
        if isinstance(produced, str):
            return _place(produced, shape)
        if isinstance(produced, Mapping | list):
            return _place(json.dumps(produced, ensure_ascii=False), shape)
        raise TypeError(
            f"handler returned {type(produced).__name__}; expected Reply, str, dict or list"
        )

    def _default_reply(self, body: Mapping[str, Any], shape: _Shape) -> Reply:
        if shape.mode == "plain":
            return Reply(content=self.plain_reply or _default_plain(body))
        schema = shape.schema
        try:
            instance = schema_instance(schema) if schema else {}
        except SchemaError as exc:
            raise ValueError(f"cannot answer from the request's schema: {exc}") from exc
        if shape.mode == "json_object" and schema is None:
            instance = {}
        return _place(json.dumps(instance, ensure_ascii=False), shape)

    def _apply_fault(
        self,
        reply: Reply,
        shape: _Shape,
        fault: FaultKind,
        decider: _FaultDecider | None,
        body: Mapping[str, Any],
    ) -> Reply:
        plain = shape.mode == "plain" and not reply.tool_calls
        if fault == "empty":
            return Reply(content="", finish_reason="stop")
        if fault == "refusal":
            if plain:
                return Reply(content=_REFUSAL_TEXT, finish_reason="stop")
            return Reply(content=None, refusal=_REFUSAL_TEXT, finish_reason="stop")
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
                coverage = "[Bonus Points]" in _prompt_text(body)
                return Reply(content="[Included Bonus Points]: 99" if coverage else "[Defect]")
            try:
                value = json.loads(payload)
            except json.JSONDecodeError:
                value = schema_instance(shape.schema) if shape.schema else {}
            variant = decider.invalid_variant() if decider is not None else "out_of_range"
            broken, _ = invalid_instance(value, shape.schema, variant)
            return _place(json.dumps(broken, ensure_ascii=False), shape)
        return reply

    async def _stream(
        self,
        request: web.Request,
        body: Mapping[str, Any],
        reply: Reply,
        model: str,
        usage: Mapping[str, int],
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        )
        await response.prepare(request)
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())

        def chunk(delta: Mapping[str, Any], finish: str | None = None) -> bytes:
            event = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
            }
            return f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()

        await response.write(chunk({"role": "assistant", "content": ""}))
        for piece in _pieces(reply.content or ""):
            await response.write(chunk({"content": piece}))
        if reply.refusal is not None:
            await response.write(chunk({"refusal": reply.refusal}))
        for index, call in enumerate(reply.tool_calls):
            head = {
                "index": index,
                "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            await response.write(chunk({"tool_calls": [head]}))
            for piece in _pieces(call.arguments):
                delta = {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                await response.write(chunk(delta))
        await response.write(chunk({}, reply.effective_finish_reason))
        options = body.get("stream_options")
        if isinstance(options, Mapping) and options.get("include_usage"):
            event = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": dict(usage),
            }
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _pieces(text: str, parts: int = 3) -> list[str]:
    """Split text into a few chunks, as a streaming model would send it."""
    if not text:
        return []
    size = max(1, math.ceil(len(text) / parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _completion(reply: Reply, model: str, usage: Mapping[str, int]) -> dict[str, Any]:
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


# ------------------------------------------------------------------------------------------------
# CLI


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m judge.testing.openai_server",
        description="Run the OpenAI-compatible stand-in judge server until SIGINT/SIGTERM.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback only)")
    parser.add_argument("--port", type=int, default=8011, help="port to bind (0: a free one)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per completion")
    parser.add_argument("--jitter", type=float, default=0.0, help="+/- seconds of latency jitter")
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=P",
        help=f"inject a fault with probability P (repeatable); kinds: {', '.join(FAULT_KINDS)}",
    )
    parser.add_argument("--fault-seed", type=int, default=0, help="seed of the fault RNG")
    parser.add_argument(
        "--fault-sequence",
        default=None,
        metavar="K1,K2,...",
        help="scripted faults for the first requests (ok = no fault), before the probabilities",
    )
    parser.add_argument("--retry-after", type=float, default=1.0, help="Retry-After of 429s")
    parser.add_argument(
        "--timeout-hold", type=float, default=60.0, help="seconds a 'timeout' request is held"
    )
    parser.add_argument("--plain-reply", default=None, help="text of plain (unstructured) answers")
    parser.add_argument(
        "--allow-remote", action="store_true", help="allow binding a non-loopback address"
    )
    parser.add_argument(
        "--lenient",
        action="store_true",
        help="accept undocumented top-level request fields (as llama.cpp/vLLM do); by default "
        "they get OpenAI's 400 'Unrecognized request argument supplied'",
    )
    return parser


def _plan_from_args(args: argparse.Namespace) -> FaultPlan | None:
    sequence: list[Any] | None = None
    if args.fault_sequence:
        sequence = [part.strip() for part in args.fault_sequence.split(",") if part.strip()]
    if not args.fault and sequence is None:
        return None
    options: dict[str, Any] = {
        "seed": args.fault_seed,
        "retry_after": args.retry_after,
        "timeout_hold": args.timeout_hold,
        "sequence": sequence,
    }
    return FaultPlan.from_specs(args.fault, **options)


async def _serve_forever(server: OpenAIStandIn) -> None:
    await server.astart()
    print(server.base_url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await server.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stand-in server from the command line.

    Args:
        argv: Arguments without the program name; None reads ``sys.argv``.

    Returns:
        The process exit status: 0 after a clean stop, 2 for invalid options.
    """
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        server = OpenAIStandIn(
            latency=args.latency,
            jitter=args.jitter,
            faults=_plan_from_args(args),
            plain_reply=args.plain_reply,
            host=args.host,
            port=args.port,
            allow_remote=args.allow_remote,
            strict=not args.lenient,
        )
        asyncio.run(_serve_forever(server))
    except ConfigError as exc:
        where = f" ({exc.field})" if exc.field else ""
        print(f"error{where}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
