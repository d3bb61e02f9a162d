"""The stand-in server: OpenAI's chat-completions endpoints over the replies and faults.

See :mod:`standins.openai_server` for what it answers; its life cycle (threads, loops,
binding) is :class:`~standins.openai_server.runner.LoopbackServer`'s.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import random
import socket
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from core.errors import ConfigError
from standins.openai_server.ledger import Ledger, StandInStats
from standins.openai_server.plan import FaultDecider, FaultKind, FaultPlan
from standins.openai_server.prompt_cache import PromptCache, char_units
from standins.openai_server.replies import (
    ScriptedHandler,
    apply_fault,
    default_reply,
    to_reply,
)
from standins.openai_server.runner import LoopbackServer
from standins.openai_server.wire import (
    Handler,
    Reply,
    ReplyLike,
    analyse,
    approx_tokens,
    completion_body,
    completion_tokens,
    error_body,
    pieces,
    prompt_tokens,
    tiktoken_count,
    tiktoken_units,
    unknown_fields,
    validate_body,
)


class OpenAIStandIn(LoopbackServer):
    """A loopback OpenAI-compatible server with scripted replies, latency and fault injection.

    Use it as a context manager: ``with`` runs the server on its own event loop in a background
    thread (usable from sync code and from other event loops); ``async with`` runs it on the
    caller's running loop. See :mod:`standins.openai_server` for the default answers and
    fault kinds.

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
        strict: Reject a body with a top-level field outside :func:`openai_chat_params` with
            OpenAI's HTTP 400 (the default, as the real API does); False accepts extras, as
            lenient local servers (llama.cpp, vLLM, Ollama) do.
        api_key: When set, a request without ``Authorization: Bearer <api_key>`` gets OpenAI's
            401 ``invalid_api_key`` (as the real API answers a wrong key).
        check_model: Answer a request for a model not in ``models`` with OpenAI's 404
            ``model_not_found`` (off by default: tests name models freely).
        tokenizer: The tiktoken encoding ``usage`` is counted with, as an OpenAI server counts
            (``o200k_base`` for the gpt-4o family); None for the deterministic estimate
            ``max(words, chars / 4)``, which needs no tokenizer.
        prompt_cache: Report ``usage.prompt_tokens_details.cached_tokens`` as a provider with
            prefix caching does, by the rule of :mod:`~standins.openai_server.prompt_cache`:
            ``(min_tokens, block)``, OpenAI's being :data:`OPENAI_PROMPT_CACHE` (1,024 tokens,
            then 128-token steps; the bundled examples' prompts are shorter, so tests use
            less). None (the default): ``usage`` has no ``prompt_tokens_details``.

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
        tokenizer: str | None = None,
        prompt_cache: tuple[int, int] | None = None,
    ) -> None:
        if latency < 0:
            raise ConfigError("latency must be >= 0", field="latency")
        if jitter < 0:
            raise ConfigError("jitter must be >= 0", field="jitter")
        if record_requests < 0:
            raise ConfigError("record_requests must be >= 0", field="record_requests")
        super().__init__(host=host, port=port, allow_remote=allow_remote)
        self.latency = latency
        self.jitter = jitter
        self.plain_reply = plain_reply
        self.strict = strict
        self.api_key = api_key
        self.check_model = check_model
        self.models = tuple(models)
        self._jitter_rng = random.Random(seed)
        self._handler: Handler | None = None
        self.handler = handler
        self._faults: FaultPlan | None = None
        self._decider: FaultDecider | None = None
        self.faults = faults
        self._ledger = Ledger(record_requests)
        self._count = approx_tokens if tokenizer is None else tiktoken_count(tokenizer)
        self._prompt_cache: PromptCache | None = None
        if prompt_cache is not None:
            units = char_units if tokenizer is None else tiktoken_units(tokenizer)
            minimum, block = prompt_cache
            try:
                self._prompt_cache = PromptCache(units, min_tokens=minimum, block=block)
            except ValueError as exc:
                raise ConfigError(str(exc), field="prompt_cache") from exc

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
            self._handler = ScriptedHandler(value)
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
        self._decider = FaultDecider(value) if value is not None else None

    # -- counters ----------------------------------------------------------------------------

    def stats(self) -> StandInStats:
        """Return a consistent snapshot of the counters (thread-safe)."""
        return self._ledger.stats()

    def reset_stats(self) -> None:
        """Zero the counters (requests in flight stay counted as in flight)."""
        self._ledger.reset_stats()

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The latest chat-completion bodies (parsed JSON), oldest first (a copy).

        Rejected bodies (HTTP 400) are included, so a test can see exactly what a client sent;
        only a body that is not a JSON object cannot be recorded.
        """
        return self._ledger.requests()

    def clear_requests(self) -> None:
        """Forget the recorded request bodies and the rejection messages."""
        self._ledger.clear_requests()

    @property
    def rejections(self) -> list[str]:
        """The messages of the HTTP 400 answers to chat completions (a copy), oldest first."""
        return self._ledger.rejections()

    @property
    def handler_errors(self) -> list[str]:
        """Messages of the exceptions the handler raised (a copy), oldest first."""
        return self._ledger.handler_errors()

    # -- endpoints ---------------------------------------------------------------------------

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/models", self._list_models)
        app.router.add_get("/health", self._health)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return _json_response({"status": "ok"})

    async def _list_models(self, request: web.Request) -> web.Response:
        created = int(time.time())
        data = [
            {"id": model, "object": "model", "created": created, "owned_by": "bonusjudge-standin"}
            for model in self.models
        ]
        return _json_response({"object": "list", "data": data})

    def _latency(self) -> float:
        if self.jitter <= 0:
            return self.latency
        return max(0.0, self.latency + self._jitter_rng.uniform(-self.jitter, self.jitter))

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        with self._ledger.handling():
            return await self._answer(request)

    def _reject(self, message: str) -> web.Response:
        self._ledger.reject(message)
        return _json_response(error_body(message, "invalid_request_error"), status=400)

    def _refusal(self, request: web.Request, body: Any) -> web.Response | None:
        """The 400/401/404 a request gets before any fault or reply, if any."""
        if self.api_key is not None and (
            request.headers.get("Authorization") != f"Bearer {self.api_key}"
        ):
            self._ledger.count("unauthorized")
            return _json_response(
                error_body("Incorrect API key provided.", "invalid_request_error",
                           "invalid_api_key"),
                status=401,
            )
        # The unknown-field check comes first, so its message names the field whatever else is
        # wrong with the body.
        problem = (unknown_fields(body) if self.strict else None) or validate_body(body)
        if problem is not None:
            return self._reject(problem)
        if self.check_model and body.get("model") not in self.models:
            self._ledger.count("model_not_found")
            return _json_response(
                error_body(
                    f"The model `{body.get('model')}` does not exist or you do not have access "
                    "to it.", "invalid_request_error", "model_not_found",
                ),
                status=404,
            )
        return None

    def _fault_answer(
        self, request: web.Request, fault: FaultKind | None, decider: FaultDecider | None
    ) -> web.StreamResponse | None:
        """The answer of a fault that replaces the reply (429, 5xx, reset), if any."""
        if fault == "rate_limit" and decider is not None:
            self._ledger.count(fault)
            return _json_response(
                error_body("Rate limit reached (stand-in)", "requests", "rate_limit_exceeded"),
                status=429,
                headers={"Retry-After": f"{decider.plan.retry_after:g}"},
            )
        if fault == "rate_limit_no_header":
            self._ledger.count(fault)
            return _json_response(
                error_body("Rate limit reached (stand-in)", "requests", "rate_limit_exceeded"),
                status=429,
            )
        if fault == "server_error" and decider is not None:
            self._ledger.count(fault)
            status = decider.server_error_status()
            return _json_response(
                error_body(f"The server had an error (stand-in {status})", "server_error"),
                status=status,
            )
        if fault == "reset":
            self._ledger.count(fault)
            return _reset(request)
        return None

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return self._reject(f"request body is not valid JSON: {exc}")
        # Recorded before any check, so tests see rejected bodies too (what the client sent).
        self._ledger.record(body)
        refused = self._refusal(request, body)
        if refused is not None:
            return refused

        decider = self._decider
        fault = decider.next_fault() if decider is not None else None
        await self._pause(self._latency())
        faulted = self._fault_answer(request, fault, decider)
        if faulted is not None:
            return faulted

        try:
            reply = await self._reply(body, fault, decider)
        except Exception as exc:  # the handler is user code: report, do not kill the server
            message = f"{type(exc).__name__}: {exc}"
            self._ledger.handler_failed(message)
            return _json_response(
                error_body(f"stand-in handler failed: {message}", "server_error"), status=500
            )

        if fault == "timeout" and decider is not None:
            # Counted before the hold: a held request may end by the server's shutdown
            # cancelling it (or its client going away), and the count must not depend on which.
            self._ledger.count(fault)
            await self._pause(decider.plan.timeout_hold)
        else:
            self._ledger.count(fault or "ok")
        prompt = prompt_tokens(body, self._count)
        completion = completion_tokens(reply, self._count)
        cache = self._prompt_cache
        cached = cache.serve(body, prompt) if cache is not None else 0
        self._ledger.add_tokens(prompt, completion, cached)
        model = str(body.get("model") or self.models[0])
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if cache is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        if body.get("stream"):
            return await _stream(request, body, reply, model, usage)
        return _json_response(completion_body(reply, model, usage))

    async def _reply(
        self, body: dict[str, Any], fault: FaultKind | None, decider: FaultDecider | None
    ) -> Reply:
        shape = analyse(body)
        handler = self._handler
        if handler is not None:
            produced = handler(body)
            if inspect.isawaitable(produced):
                produced = await produced
            reply = to_reply(produced, shape)
        else:
            reply = default_reply(body, shape, self.plain_reply)
        if fault is None or fault == "timeout":
            return reply
        return apply_fault(reply, shape, fault, decider, body)


def _json_response(
    payload: Mapping[str, Any], *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=json.dumps(payload, ensure_ascii=False).encode(),
        status=status,
        content_type="application/json",
        headers=dict(headers or {}),
    )


def _reset(request: web.Request) -> web.StreamResponse:
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


async def _stream(
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
