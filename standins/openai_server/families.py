"""The three wires the stand-in speaks, behind one interface the server's pipeline drives.

A :class:`Wire` turns the shared machinery's decisions (refuse, fault, reply) into one API's
HTTP answers: its credentials check, its strict body check, its view of the request as
OpenAI-shaped messages (what the default answers, faults and token counts read), and its
answer and error bodies. :class:`OpenAIWire` is the chat-completions API (byte for byte what the
stand-in always sent), :class:`AnthropicWire` the Messages API, :class:`GeminiWire` Google AI
Studio's ``generateContent``.
"""

from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web
from typing_extensions import override

from standins.openai_server import anthropic_wire, gemini_wire
from standins.openai_server.ledger import WireFamily
from standins.openai_server.wire import (
    Reply,
    Shape,
    TokenCount,
    analyse,
    completion_body,
    error_body,
    pieces,
    prompt_tokens,
    unknown_fields,
    validate_body,
)


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, JSON body and extra headers."""

    status: int
    payload: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)

    def response(self) -> web.Response:
        """The aiohttp response that sends this answer."""
        return json_response(self.payload, status=self.status, headers=self.headers)


@dataclass(frozen=True)
class Usage:
    """One answer's token counts.

    Attributes:
        prompt: Prompt (input) tokens.
        completion: Completion (output) tokens.
        cached: Of ``prompt``, those served from the prompt cache; None without a cache.
    """

    prompt: int
    completion: int
    cached: int | None = None


def json_response(
    payload: Mapping[str, Any], *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A JSON response (UTF-8, not ASCII-escaped, as the providers send)."""
    return web.Response(
        body=json.dumps(payload, ensure_ascii=False).encode(),
        status=status,
        content_type="application/json",
        headers=dict(headers or {}),
    )


class Wire(ABC):
    """One provider API: how the shared pipeline's decisions look on its wire."""

    family: ClassVar[WireFamily]
    """The wire's name in the ledger (:attr:`StandInStats.families`)."""

    caches_prompts: ClassVar[bool] = False
    """Whether answers report the stand-in's prompt cache (OpenAI's ``cached_tokens`` only)."""

    @abstractmethod
    def auth_failure(self, request: web.Request, api_key: str) -> Answer | None:
        """The answer to a request without the server's key (None: it has it)."""

    @abstractmethod
    def problem(self, request: web.Request, body: Any, *, strict: bool) -> str | None:
        """The message of the 400 a body gets (None: it is usable)."""

    @abstractmethod
    def not_json(self, error: Exception) -> str:
        """The message of the 400 a body that is not JSON gets."""

    @abstractmethod
    def bad_request(self, message: str) -> Answer:
        """The 400 answer with ``message``."""

    @abstractmethod
    def model(self, request: web.Request, body: Mapping[str, Any]) -> str | None:
        """The model the request names (None: it names none)."""

    @abstractmethod
    def model_not_found(self, request: web.Request, model: str | None) -> Answer:
        """The answer to a request for a model the server does not list."""

    @abstractmethod
    def not_found(self, message: str) -> Answer:
        """The 404 answer with ``message`` (a path the stand-in does not serve)."""

    @abstractmethod
    def view(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """The request as OpenAI-shaped ``messages`` (plus ``tools``/``response_format``)."""

    @abstractmethod
    def shape(self, body: Mapping[str, Any], view: Mapping[str, Any]) -> Shape:
        """What kind of answer the request expects."""

    @abstractmethod
    def rate_limited(self, retry_after: str | None) -> Answer:
        """The 429 answer (``retry_after``: the delay in seconds; None sends none)."""

    @abstractmethod
    def server_error(self, status: int) -> Answer:
        """The 5xx answer with ``status``."""

    @abstractmethod
    def handler_failed(self, message: str) -> Answer:
        """The 500 answer when the handler raised ``message``."""

    def prompt_tokens(self, view: Mapping[str, Any], count: TokenCount) -> int:
        """The prompt's token count (see :func:`~standins.openai_server.wire.prompt_tokens`)."""
        return prompt_tokens(view, count)

    @abstractmethod
    async def respond(
        self,
        request: web.Request,
        body: Mapping[str, Any],
        reply: Reply,
        model: str,
        usage: Usage,
    ) -> web.StreamResponse:
        """The answer that carries ``reply``."""


class OpenAIWire(Wire):
    """OpenAI's chat completions (``POST /v1/chat/completions``), streamed when asked."""

    family: ClassVar[WireFamily] = "openai"
    caches_prompts: ClassVar[bool] = True

    @override
    def auth_failure(self, request: web.Request, api_key: str) -> Answer | None:
        if request.headers.get("Authorization") == f"Bearer {api_key}":
            return None
        return Answer(
            401,
            error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
        )

    @override
    def problem(self, request: web.Request, body: Any, *, strict: bool) -> str | None:
        # The unknown-field check comes first, so its message names the field whatever else is
        # wrong with the body.
        return (unknown_fields(body) if strict else None) or validate_body(body)

    @override
    def not_json(self, error: Exception) -> str:
        return f"request body is not valid JSON: {error}"

    @override
    def bad_request(self, message: str) -> Answer:
        return Answer(400, error_body(message, "invalid_request_error"))

    @override
    def model(self, request: web.Request, body: Mapping[str, Any]) -> str | None:
        return body.get("model")

    @override
    def model_not_found(self, request: web.Request, model: str | None) -> Answer:
        return Answer(
            404,
            error_body(
                f"The model `{model}` does not exist or you do not have access to it.",
                "invalid_request_error",
                "model_not_found",
            ),
        )

    @override
    def not_found(self, message: str) -> Answer:
        return Answer(404, error_body(message, "invalid_request_error"))

    @override
    def view(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return body

    @override
    def shape(self, body: Mapping[str, Any], view: Mapping[str, Any]) -> Shape:
        return analyse(body)

    @override
    def rate_limited(self, retry_after: str | None) -> Answer:
        payload = error_body("Rate limit reached (stand-in)", "requests", "rate_limit_exceeded")
        return Answer(429, payload, {"Retry-After": retry_after} if retry_after else {})

    @override
    def server_error(self, status: int) -> Answer:
        return Answer(
            status, error_body(f"The server had an error (stand-in {status})", "server_error")
        )

    @override
    def handler_failed(self, message: str) -> Answer:
        return Answer(500, error_body(f"stand-in handler failed: {message}", "server_error"))

    @override
    async def respond(
        self,
        request: web.Request,
        body: Mapping[str, Any],
        reply: Reply,
        model: str,
        usage: Usage,
    ) -> web.StreamResponse:
        counts: dict[str, Any] = {
            "prompt_tokens": usage.prompt,
            "completion_tokens": usage.completion,
            "total_tokens": usage.prompt + usage.completion,
        }
        if usage.cached is not None:
            counts["prompt_tokens_details"] = {"cached_tokens": usage.cached}
        if body.get("stream"):
            return await _stream(request, body, reply, model, counts)
        return json_response(completion_body(reply, model, counts))


class AnthropicWire(Wire):
    """Anthropic's Messages API (``POST /v1/messages``); see :mod:`.anthropic_wire`."""

    family: ClassVar[WireFamily] = "anthropic"

    @override
    def auth_failure(self, request: web.Request, api_key: str) -> Answer | None:
        given = request.headers.get("x-api-key")
        if given == api_key:
            return None
        message = "x-api-key header is required" if given is None else "invalid x-api-key"
        return Answer(401, anthropic_wire.anthropic_error("authentication_error", message))

    @override
    def problem(self, request: web.Request, body: Any, *, strict: bool) -> str | None:
        if strict and "anthropic-version" not in request.headers:
            return "anthropic-version: header is required"
        found = anthropic_wire.anthropic_problem(
            body, strict=strict, beta="anthropic-beta" in request.headers
        )
        if found is None and body.get("stream"):
            # The product does not stream; an answer in the wrong framing would mislead more.
            return "stream: the stand-in does not stream Messages API answers"
        return found

    @override
    def not_json(self, error: Exception) -> str:
        return f"There was an error parsing the body: {error}"

    @override
    def bad_request(self, message: str) -> Answer:
        return Answer(400, anthropic_wire.anthropic_error("invalid_request_error", message))

    @override
    def model(self, request: web.Request, body: Mapping[str, Any]) -> str | None:
        return body.get("model")

    @override
    def model_not_found(self, request: web.Request, model: str | None) -> Answer:
        return self.not_found(f"model: {model}")

    @override
    def not_found(self, message: str) -> Answer:
        return Answer(404, anthropic_wire.anthropic_error("not_found_error", message))

    @override
    def view(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return anthropic_wire.anthropic_chat_view(body)

    @override
    def shape(self, body: Mapping[str, Any], view: Mapping[str, Any]) -> Shape:
        return anthropic_wire.anthropic_shape(body, view)

    @override
    def rate_limited(self, retry_after: str | None) -> Answer:
        payload = anthropic_wire.anthropic_error(
            "rate_limit_error",
            "This request would exceed the rate limit for your organization (stand-in).",
        )
        return Answer(429, payload, {"retry-after": retry_after} if retry_after else {})

    @override
    def server_error(self, status: int) -> Answer:
        kind = anthropic_wire.error_type(status)
        message = "Overloaded" if kind == "overloaded_error" else "Internal server error"
        return Answer(status, anthropic_wire.anthropic_error(kind, f"{message} (stand-in)"))

    @override
    def handler_failed(self, message: str) -> Answer:
        return Answer(
            500, anthropic_wire.anthropic_error("api_error", f"stand-in handler failed: {message}")
        )

    @override
    async def respond(
        self,
        request: web.Request,
        body: Mapping[str, Any],
        reply: Reply,
        model: str,
        usage: Usage,
    ) -> web.StreamResponse:
        message = anthropic_wire.anthropic_message(reply, model, usage.prompt, usage.completion)
        return json_response(message, headers={"request-id": f"req_{uuid.uuid4().hex[:24]}"})


class GeminiWire(Wire):
    """Gemini's ``POST /v1beta/models/{model}:generateContent``; see :mod:`.gemini_wire`."""

    family: ClassVar[WireFamily] = "gemini"

    @override
    def auth_failure(self, request: web.Request, api_key: str) -> Answer | None:
        given = request.headers.get("x-goog-api-key") or request.query.get("key")
        if given == api_key:
            return None
        if given is None:
            return Answer(403, gemini_wire.gemini_error(403, gemini_wire.NO_API_KEY))
        # Google answers a wrong key with 400 INVALID_ARGUMENT, not 401.
        details = [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "API_KEY_INVALID",
            "domain": "googleapis.com",
            "metadata": {"service": "generativelanguage.googleapis.com"},
        }]  # fmt: skip
        return Answer(400, gemini_wire.gemini_error(400, gemini_wire.API_KEY_INVALID, details))

    @override
    def problem(self, request: web.Request, body: Any, *, strict: bool) -> str | None:
        return gemini_wire.gemini_problem(body, strict=strict)

    @override
    def not_json(self, error: Exception) -> str:
        return f"Invalid JSON payload received. {error}"

    @override
    def bad_request(self, message: str) -> Answer:
        violations = [{"description": line} for line in message.splitlines() if line]
        details = [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": violations}]  # fmt: skip
        return Answer(400, gemini_wire.gemini_error(400, message, details))

    @override
    def model(self, request: web.Request, body: Mapping[str, Any]) -> str | None:
        # The model is in the path (``models/{model}:generateContent``), not the body.
        return request.match_info.get("target", "").rpartition(":")[0] or None

    @override
    def model_not_found(self, request: web.Request, model: str | None) -> Answer:
        version = request.match_info.get("version", "v1beta")
        message = (
            f"models/{model} is not found for API version {version}, or is not supported for "
            "generateContent. Call ListModels to see the list of available models and their "
            "supported methods."
        )
        return self.not_found(message)

    @override
    def not_found(self, message: str) -> Answer:
        return Answer(404, gemini_wire.gemini_error(404, message))

    @override
    def view(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return gemini_wire.gemini_chat_view(body)

    @override
    def shape(self, body: Mapping[str, Any], view: Mapping[str, Any]) -> Shape:
        return gemini_wire.gemini_shape(body, view)

    @override
    def rate_limited(self, retry_after: str | None) -> Answer:
        # Google states the delay in the body (RetryInfo); the header is for clients that read
        # only headers (litellm's ``litellm_response_headers``).
        details = (
            [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_after}s"}]
            if retry_after
            else None
        )
        payload = gemini_wire.gemini_error(
            429, "Resource has been exhausted (e.g. check quota).", details
        )
        return Answer(429, payload, {"retry-after": retry_after} if retry_after else {})

    @override
    def server_error(self, status: int) -> Answer:
        message = gemini_wire.SERVER_ERROR_MESSAGES.get(status, f"Server error (stand-in {status})")
        return Answer(status, gemini_wire.gemini_error(status, message))

    @override
    def handler_failed(self, message: str) -> Answer:
        return Answer(500, gemini_wire.gemini_error(500, f"stand-in handler failed: {message}"))

    @override
    async def respond(
        self,
        request: web.Request,
        body: Mapping[str, Any],
        reply: Reply,
        model: str,
        usage: Usage,
    ) -> web.StreamResponse:
        return json_response(
            gemini_wire.gemini_response(reply, model, usage.prompt, usage.completion)
        )


async def _stream(
    request: web.Request,
    body: Mapping[str, Any],
    reply: Reply,
    model: str,
    usage: Mapping[str, Any],
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
    for piece in pieces(reply.content or ""):
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
        for piece in pieces(call.arguments):
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
