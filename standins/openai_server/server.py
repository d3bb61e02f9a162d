"""The stand-in server: three providers' endpoints over one set of replies, faults and books.

OpenAI's chat completions, Anthropic's Messages API and Gemini's ``generateContent`` share the
handler, the fault plan, the latency and the ledger; each wire
(:mod:`~standins.openai_server.families`) only shapes the HTTP answers. See
:mod:`standins.openai_server` for what each route answers; the life cycle (threads, loops,
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
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from core.errors import ConfigError
from standins.openai_server.families import (
    AnthropicWire,
    GeminiWire,
    OpenAIWire,
    Usage,
    Wire,
    json_response,
)
from standins.openai_server.gemini_wire import GEMINI_API_VERSIONS
from standins.openai_server.ledger import Ledger, StandInStats, WireFamily
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
    approx_tokens,
    completion_tokens,
    tiktoken_count,
    tiktoken_units,
)

OPENAI = OpenAIWire()
ANTHROPIC = AnthropicWire()
GEMINI = GeminiWire()


class OpenAIStandIn(LoopbackServer):
    """A loopback judge-model server with scripted replies, latency and fault injection.

    It speaks OpenAI's chat completions (:attr:`base_url`), Anthropic's Messages API
    (:attr:`anthropic_base_url`) and Gemini's ``generateContent`` (:attr:`gemini_base_url`) on
    one port, with one handler, fault plan and set of books. Use it as a context manager:
    ``with`` runs the server on its own event loop in a background thread (usable from sync code
    and from other event loops); ``async with`` runs it on the caller's running loop. See
    :mod:`standins.openai_server` for the default answers and fault kinds.

    Args:
        latency: Seconds every generation request waits before it is answered.
        jitter: Latency varies uniformly in ``[latency - jitter, latency + jitter]`` (seeded).
        handler: A callable or a sequence of scripted replies; None for schema-valid defaults.
            A callable gets the body as its wire sent it (OpenAI, Anthropic or Gemini JSON).
        faults: The fault plan; None for no faults.
        plain_reply: The text of plain (non-structured) default answers; None for the
            CharToM-QA-shaped default.
        host: The address to bind; must be loopback unless ``allow_remote``.
        port: The port to bind; 0 picks a free one.
        record_requests: How many of the latest request bodies :attr:`requests` keeps (0: none).
        models: Model ids listed by ``GET /v1/models`` (and accepted by ``check_model``, on
            every wire).
        seed: Seed of the jitter RNG.
        allow_remote: Allow binding a non-loopback address.
        strict: Reject a body with a field its API does not document with that API's 400 (the
            default, as the real APIs do): OpenAI's top-level fields
            (:func:`openai_chat_params`), Anthropic's (and its ``anthropic-version`` header),
            Gemini's top-level and ``generationConfig`` fields. False accepts extras, as
            lenient local servers (llama.cpp, vLLM, Ollama) do.
        api_key: When set, a request without it gets its API's answer to a wrong key: OpenAI's
            401 ``invalid_api_key`` (``Authorization: Bearer``), Anthropic's 401
            ``authentication_error`` (``x-api-key``), Gemini's 400 ``API_KEY_INVALID`` (or 403
            without a key; ``x-goog-api-key`` or ``?key=``).
        check_model: Answer a request for a model not in ``models`` with its API's 404
            (off by default: tests name models freely).
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
        """The latest generation request bodies (parsed JSON), oldest first (a copy).

        Each body is as its wire sent it: an OpenAI chat-completions body, an Anthropic
        Messages body or a Gemini ``generateContent`` body; :attr:`request_families` tells
        which. Rejected bodies (HTTP 400) are included, so a test can see exactly what a client
        sent; only a body that is not a JSON object cannot be recorded.
        """
        return self._ledger.requests()

    @property
    def request_families(self) -> list[WireFamily]:
        """The wire of each body in :attr:`requests`, in the same order (a copy)."""
        return self._ledger.request_families()

    @property
    def anthropic_base_url(self) -> str:
        """The ``api_base`` for litellm's ``anthropic/`` models: the server root.

        litellm appends ``/v1/messages`` to it.
        """
        return self.url

    @property
    def gemini_base_url(self) -> str:
        """The ``api_base`` for litellm's ``gemini/`` models: ``{url}/v1beta``.

        litellm appends ``/models/{model}:generateContent`` to it, as it does to Google's
        ``https://generativelanguage.googleapis.com/v1beta``.
        """
        return f"{self.url}/v1beta"

    def clear_requests(self) -> None:
        """Forget the recorded request bodies and the rejection messages."""
        self._ledger.clear_requests()

    @property
    def rejections(self) -> list[str]:
        """The messages of the HTTP 400 answers to request bodies (a copy), oldest first.

        Every wire's refusals of a body are here (not a wrong key: Gemini answers that with a
        400 too, but it is counted as ``unauthorized``).
        """
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
        app.router.add_post("/v1/messages", self._messages)
        versions = "|".join(GEMINI_API_VERSIONS)
        app.router.add_post(f"/{{version:{versions}}}/models/{{target}}", self._generate_content)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/models", self._list_models)
        app.router.add_get("/health", self._health)
        # Last: any other POST is a client pointed at the wrong path (most often the wrong
        # api_base), answered with a message that names the right ones.
        app.router.add_post("/{tail:.*}", self._no_route)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def _list_models(self, request: web.Request) -> web.Response:
        created = int(time.time())
        data = [
            {"id": model, "object": "model", "created": created, "owned_by": "bonusjudge-standin"}
            for model in self.models
        ]
        return json_response({"object": "list", "data": data})

    async def _no_route(self, request: web.Request) -> web.Response:
        path = request.path
        message = (
            f"the stand-in serves no POST {path}. It serves POST /v1/chat/completions (OpenAI: "
            f"api_base {self.base_url}), POST /v1/messages (Anthropic: api_base {self.url}) and "
            f"POST /v1beta/models/MODEL:generateContent (Gemini: api_base "
            f"{self.gemini_base_url})"
        )
        wire: Wire = OPENAI
        if path.endswith("/messages"):
            wire = ANTHROPIC
        elif ":" in path.rsplit("/", 1)[-1]:
            wire = GEMINI
        return wire.not_found(message).response()

    def _latency(self) -> float:
        if self.jitter <= 0:
            return self.latency
        return max(0.0, self.latency + self._jitter_rng.uniform(-self.jitter, self.jitter))

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        with self._ledger.handling(OPENAI.family):
            return await self._answer(request, OPENAI)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        with self._ledger.handling(ANTHROPIC.family):
            return await self._answer(request, ANTHROPIC)

    async def _generate_content(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["target"].rpartition(":")
        if method != "generateContent" or not model:
            # streamGenerateContent included: litellm streams only when asked, the product never.
            return await self._no_route(request)
        with self._ledger.handling(GEMINI.family):
            return await self._answer(request, GEMINI)

    def _reject(self, wire: Wire, message: str) -> web.Response:
        self._ledger.reject(message)
        return wire.bad_request(message).response()

    def _refusal(self, request: web.Request, body: Any, wire: Wire) -> web.Response | None:
        """The 400/401/403/404 a request gets before any fault or reply, if any."""
        if self.api_key is not None:
            denied = wire.auth_failure(request, self.api_key)
            if denied is not None:
                self._ledger.count("unauthorized")
                return denied.response()
        problem = wire.problem(request, body, strict=self.strict)
        if problem is not None:
            return self._reject(wire, problem)
        model = wire.model(request, body)
        if self.check_model and model not in self.models:
            self._ledger.count("model_not_found")
            return wire.model_not_found(request, model).response()
        return None

    def _fault_answer(
        self,
        request: web.Request,
        fault: FaultKind | None,
        decider: FaultDecider | None,
        wire: Wire,
    ) -> web.StreamResponse | None:
        """The answer of a fault that replaces the reply (429, 5xx, reset), if any."""
        if fault == "rate_limit" and decider is not None:
            self._ledger.count(fault)
            return wire.rate_limited(f"{decider.plan.retry_after:g}").response()
        if fault == "rate_limit_no_header":
            self._ledger.count(fault)
            return wire.rate_limited(None).response()
        if fault == "server_error" and decider is not None:
            self._ledger.count(fault)
            return wire.server_error(decider.server_error_status()).response()
        if fault == "reset":
            self._ledger.count(fault)
            return _reset(request)
        return None

    async def _answer(self, request: web.Request, wire: Wire) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return self._reject(wire, wire.not_json(exc))
        # Recorded before any check, so tests see rejected bodies too (what the client sent).
        self._ledger.record(body, wire.family)
        refused = self._refusal(request, body, wire)
        if refused is not None:
            return refused

        decider = self._decider
        fault = decider.next_fault() if decider is not None else None
        await self._pause(self._latency())
        faulted = self._fault_answer(request, fault, decider, wire)
        if faulted is not None:
            return faulted

        view: Mapping[str, Any] = body
        try:
            view = wire.view(body)
            reply = await self._reply(body, view, wire, fault, decider)
        except Exception as exc:  # the handler is user code: report, do not kill the server
            message = f"{type(exc).__name__}: {exc}"
            self._ledger.handler_failed(message)
            return wire.handler_failed(message).response()

        if fault == "timeout" and decider is not None:
            # Counted before the hold: a held request may end by the server's shutdown
            # cancelling it (or its client going away), and the count must not depend on which.
            self._ledger.count(fault)
            await self._pause(decider.plan.timeout_hold)
        else:
            self._ledger.count(fault or "ok")
        prompt = wire.prompt_tokens(view, self._count)
        completion = completion_tokens(reply, self._count)
        cache = self._prompt_cache if wire.caches_prompts else None
        cached = cache.serve(body, prompt) if cache is not None else None
        self._ledger.add_tokens(prompt, completion, cached or 0)
        model = str(wire.model(request, body) or self.models[0])
        return await wire.respond(request, body, reply, model, Usage(prompt, completion, cached))

    async def _reply(
        self,
        body: dict[str, Any],
        view: Mapping[str, Any],
        wire: Wire,
        fault: FaultKind | None,
        decider: FaultDecider | None,
    ) -> Reply:
        # The handler sees the wire's own body; the defaults and faults read the OpenAI-shaped
        # view, so one rule (the coverage prompt's default, the schema's instance) serves all.
        shape = wire.shape(body, view)
        handler = self._handler
        if handler is not None:
            produced = handler(body)
            if inspect.isawaitable(produced):
                produced = await produced
            reply = to_reply(produced, shape)
        else:
            reply = default_reply(view, shape, self.plain_reply)
        if fault is None or fault == "timeout":
            return reply
        return apply_fault(reply, shape, fault, decider, view)


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
