"""The direct transport: OpenAI-compatible chat completions on one shared aiohttp session.

Why it exists: instructor over litellm over the openai SDK costs about 9 ms of CPU per judge call
(the SDK ~3.4 ms, litellm ~4 ms more, instructor 2-3 ms more) against ~0.3 ms for a raw aiohttp
POST, so one grading process tops out near 55 items/s whatever the concurrency
(``bench/README.md``). For an OpenAI-compatible endpoint (``openai/`` and ``hosted_vllm/``
models, an ``--api-base`` server) ``DirectProvider`` builds the request itself, posts it on one
keep-alive connection pool and validates the reply with pydantic from the raw bytes. Everything
that can be done once is done once: the endpoint (URL, headers), the request's fixed part (model,
sampling, tool or schema, pre-serialised), the JSON-mode instruction text, the client timeouts
and the model's price.

What it sends is what ``judge.providers.litellm.LiteLLMProvider`` (instructor 1.17 over litellm
1.106)
sends, field for field, in every ``StructuredMode`` and for plain text, first asks and re-asks
alike (``judge.providers.wire`` holds that wire format): the same tool definition (instructor's
``generate_openai_schema``) or ``response_format``, the same system text and merged messages of the
JSON modes, the same sampling fields, the same re-ask messages (instructor's ``reask_tools`` and
``reask_md_json``) up to ``config.reasks``, with pydantic's own error text.
``tests/judge/providers/test_direct_wire.py`` pins the bodies against the litellm path's on the
strict stand-in. Replies are read as instructor and ``LiteLLMProvider`` read them: ``finish_reason:
"length"`` ends the call ``truncated_output`` at once; a missing tool call or an empty answer is
re-asked like a parse failure and classified from the last reply (``empty_output``,
``validation_failure``); a refused answer ends the call ``refusal`` at once (re-asking a judge
that declined the prompt buys the same refusal again); HTTP failures become the ``ProviderError``
that ``judge.providers.base.provider_error`` gives the litellm path for the same status (a client
timeout is litellm's 408, a failed connection litellm's 500).

One deliberate difference from the litellm path, and one way of getting the same figure:

* instructor renders every message as a Jinja template when a validation context is given (the
  coverage calls), so untrusted response text with Jinja markup is *evaluated* there (``{{ 7*7
  }}`` reaches the judge as ``49``; an unbalanced ``{%`` fails the call). Here only the rendering's
  effect on markup-free text is reproduced (newlines normalised, one trailing newline dropped,
  ``textwrap.dedent``), so ordinary prompts go out byte for byte the same, and marked-up text goes
  out as written.
* ``cost_usd`` is priced from litellm's price table read once per model, without importing
  litellm (the litellm path sums litellm's own price of each reply: the same figure).

``RoutingProvider`` is the ``Grader``'s default provider: per call it picks this transport or
litellm from ``JudgeConfig.transport`` and the model (``transport_for``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import json
import logging
import os
import sys
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from core.errors import (
    ConfigError,
    JudgeOutputError,
    ProviderError,
    SpendingError,
    unset_variable,
)
from judge.config import JudgeConfig
from judge.providers.base import (
    PROBE_MESSAGES,
    Completion,
    Preflight,
    UsageSum,
    probe_config,
    provider_error,
    retry_after_seconds,
    usable_text,
)
from judge.providers.wire import (
    ParsedReply,
    Plan,
    ReplyError,
    Unparseable,
    parse_reply,
    prepared_messages,
    reask_messages,
    request_body,
    request_plan,
)

if TYPE_CHECKING:
    import aiohttp

_T = TypeVar("_T")



__all__ = ["DirectProvider", "error_for_answer", "preflight_direct"]

log = logging.getLogger("bonusjudge.direct")
"""Re-asks and failed requests, as instructor and litellm log theirs (``--verbose`` shows them)."""

_KEEPALIVE_S = 60.0
"""Seconds an idle connection to a judge endpoint is kept open."""


# -- where a call goes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Endpoint:
    """Where a model's calls go: the URL, the headers, the model name on the wire."""

    url: str
    headers: Mapping[str, str]
    wire_model: str
    provider: str
    proxy: str | None = None


@functools.lru_cache(maxsize=64)
def _endpoint(model: str, api_base: str | None, api_key: str | None) -> _Endpoint:
    """The endpoint of ``model``, resolved as litellm resolves it (base URL and key).

    Raises:
        ConfigError: no base URL is known for the model.
    """
    prefix, _, name = model.partition("/")
    if not name:
        prefix, name = "openai", model
    base = api_base
    if not base and prefix == "openai":
        base = (
            os.environ.get("OPENAI_BASE_URL")
            or os.environ.get("OPENAI_API_BASE")
            or "https://api.openai.com/v1"
        )
    elif not base and prefix == "hosted_vllm":
        base = os.environ.get("HOSTED_VLLM_API_BASE")
    if not base:
        raise ConfigError(
            f"the direct transport needs a base URL for {model!r}: pass --api-base (an "
            "OpenAI-compatible server) or use --transport litellm",
            field="api_base",
        )
    key = api_key
    if key is None:
        if api_base:
            # As LiteLLMProvider: OpenAI-compatible local servers ignore the key, clients insist.
            key = os.environ.get("OPENAI_API_KEY", "sk-no-key")
        else:
            key = os.environ.get(
                "HOSTED_VLLM_API_KEY" if prefix == "hosted_vllm" else "OPENAI_API_KEY"
            )
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    url = base.rstrip("/") + "/chat/completions"
    return _Endpoint(
        url=url, headers=headers, wire_model=name, provider=prefix, proxy=_proxy_for(url)
    )


def _proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``, ``NO_PROXY``...), or None.

    As the openai SDK under litellm honours them; read once per endpoint, because aiohttp's own
    ``trust_env`` looks them (and ``~/.netrc``) up in a worker thread on every request.
    """
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _endpoint_of(config: JudgeConfig) -> _Endpoint:
    key = config.api_key.get_secret_value() if config.api_key is not None else None
    return _endpoint(config.model, config.api_base, key)


# -- the price table -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _price_table() -> Mapping[str, Any]:
    """The model price table of litellm, read once.

    The loaded module's table when litellm is already imported (it holds prices registered at run
    time), else the JSON file that ships inside the litellm package: importing litellm costs ~2.8 s,
    which the direct transport never pays.
    """
    litellm = sys.modules.get("litellm")
    table = getattr(litellm, "model_cost", None)
    if isinstance(table, Mapping) and table:
        return table
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return {}
    path = Path(spec.origin).parent / "model_prices_and_context_window_backup.json"
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


@dataclass(frozen=True)
class _Prices:
    """A model's USD prices per token, as litellm's cost map gives them.

    Attributes:
        prompt: Per prompt token.
        completion: Per completion token.
        cache_read: Per prompt token served from the provider's prompt cache: the model's
            ``cache_read_input_token_cost``, or the prompt price where it has none (as litellm
            bills cached tokens then).
    """

    prompt: float
    completion: float
    cache_read: float


def _price(entry: Mapping[str, Any], key: str) -> float | None:
    value = entry.get(key)
    return float(value) if isinstance(value, int | float) else None


@functools.lru_cache(maxsize=256)
def _prices(provider: str, wire_model: str) -> _Prices | None:
    """A model's prices as litellm looks them up; None when unpriced.

    litellm prices ``openai/NAME`` by the entry of NAME that belongs to OpenAI, and knows no price
    for a ``hosted_vllm/`` model unless one is registered under its full name.
    """
    table = _price_table()
    entry = table.get(f"{provider}/{wire_model}")
    if entry is None and provider == "openai":
        entry = table.get(wire_model)
        if isinstance(entry, Mapping) and entry.get("litellm_provider") != "openai":
            entry = None
    if not isinstance(entry, Mapping):
        return None
    prompt = _price(entry, "input_cost_per_token")
    completion = _price(entry, "output_cost_per_token")
    if prompt is None or completion is None:
        return None
    cache_read = _price(entry, "cache_read_input_token_cost")
    return _Prices(prompt, completion, prompt if cache_read is None else cache_read)


def _cost(
    endpoint: _Endpoint, prompt: int | None, completion: int | None, cached: int | None = None
) -> float | None:
    """What litellm's ``completion_cost`` charges for this usage (the same float, same order).

    Cached prompt tokens are billed at the cache-read price and the rest at the prompt price,
    as litellm's ``generic_cost_per_token`` does for OpenAI-compatible usage; a test compares
    the two for a model with a cache-read price.
    """
    prices = _prices(endpoint.provider, endpoint.wire_model)
    if prices is None or prompt is None or completion is None:
        return None
    hit = min(cached or 0, prompt)
    prompt_cost = float(prompt - hit) * prices.prompt + float(hit) * prices.cache_read
    value = prompt_cost + float(completion) * prices.completion
    return value or None


def _plan_of(
    config: JudgeConfig,
    endpoint: _Endpoint,
    response_model: type[BaseModel] | None,
    extra: str,
) -> Plan:
    sampling = tuple(config.sampling().items())
    return request_plan(endpoint.wire_model, response_model, config.mode, sampling, extra)


# -- the provider --------------------------------------------------------------------------------


def _no_valid_answer(
    attempts: int, error: str, last_reply: ParsedReply | None
) -> JudgeOutputError:
    """The failure of a call whose replies never validated, classified from the last reply."""
    return JudgeOutputError(
        f"no valid answer after {attempts} attempt(s): {error}",
        reason=last_reply.failure_reason() if last_reply is not None else "parse_failure",
        raw=last_reply.raw if last_reply is not None else None,
        attempts=attempts,
    )


class _Tokens(UsageSum):
    """Token counts summed over a call's attempts (None until a reply reports them)."""

    __slots__ = ("endpoint",)

    def __init__(self, endpoint: _Endpoint) -> None:
        super().__init__()
        self.endpoint = endpoint

    def add(self, reply: Mapping[str, Any]) -> None:
        """Add one reply's ``usage`` (and its price, each reply priced alone as litellm does)."""
        usage = reply.get("usage")
        if not isinstance(usage, Mapping):
            return
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        prompt = prompt if isinstance(prompt, int) else None
        completion = completion if isinstance(completion, int) else None
        cached = cached if isinstance(cached, int) else None
        self.count(prompt, completion, cached, _cost(self.endpoint, prompt, completion, cached))


class DirectProvider:
    """OpenAI-compatible chat completions over one shared aiohttp session (see the module).

    The session is made in the running event loop on first use: a connection pool without a cap
    of its own (the engine's concurrency limit is the bound, so the pool never queues a call the
    engine let through), connections kept alive between calls. ``aclose`` closes it; the
    ``Grader`` calls it for the provider it made.

    Args:
        extra_params: Extra top-level request fields (documented ones: the strict API answers any
            other with HTTP 400), as ``LiteLLMProvider``'s.
    """

    def __init__(self, *, extra_params: dict[str, Any] | None = None) -> None:
        self.extra_params = dict(extra_params or {})
        self._extra = json.dumps(self.extra_params, sort_keys=True)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    # -- the session -----------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._session
        if session is not None and self._loop is loop and not session.closed:
            return session
        import aiohttp

        self._drop()
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=_KEEPALIVE_S)
        # No trust_env: each endpoint's proxy is looked up once (_proxy_for), not per request.
        self._session = aiohttp.ClientSession(connector=connector)
        self._loop = loop
        return self._session

    def _drop(self) -> None:
        """Forget the session without awaiting anything (its event loop may be gone).

        Its connector is closed synchronously (``_close``: ``close`` is a coroutine, which needs
        the session's own loop), so neither it nor the session reports itself unclosed when it is
        collected; connections whose loop has ended were already dropped with it.
        """
        session, self._session, self._loop = self._session, None, None
        if session is None or session.closed:
            return
        close = getattr(session.connector, "_close", None)
        if close is not None:
            with contextlib.suppress(Exception):  # a loop that is closing: nothing left to do
                close()

    def __del__(self) -> None:
        # A grader nobody closed (or closed from another event loop) must not leave a session
        # that logs "Unclosed client session" when it is collected.
        self._drop()

    def _timeout(self, seconds: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(seconds)
        if timeout is None:
            import aiohttp

            timeout = self._timeouts[seconds] = aiohttp.ClientTimeout(total=seconds)
        return timeout

    async def aclose(self) -> None:
        """Close the session and its connections.

        A new session is made if the provider is used again.
        """
        session = self._session
        if session is None:
            return
        try:
            same_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            same_loop = False
        if same_loop:
            self._session = self._loop = None
            await session.close()
        else:
            self._drop()

    # -- one request -----------------------------------------------------------------------------

    async def _post(
        self, endpoint: _Endpoint, body: bytes, config: JudgeConfig, sent: int
    ) -> dict[str, Any]:
        """POST one request and return the decoded reply.

        Raises:
            ProviderError: HTTP error status, timeout, connection failure or an unreadable reply
                (``attempts`` is ``sent``, re-asks included).
        """
        import aiohttp

        try:
            async with self._client().post(
                endpoint.url,
                data=body,
                headers=endpoint.headers,
                timeout=self._timeout(config.timeout),
                proxy=endpoint.proxy,
            ) as response:
                payload = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except TimeoutError as exc:  # asyncio's and aiohttp's timeouts are both TimeoutError
            # litellm reports a client timeout as its Timeout, status 408.
            error = provider_error(
                f"Timeout: no answer within {config.timeout:g} s", status=408, timeout=True
            )
            error.attempts = sent
            log.error("request failed on attempt %d: %s", sent, error)
            raise error from exc
        except (aiohttp.ClientError, OSError) as exc:
            # litellm reports a refused, reset or dropped connection as a 500 "Connection error."
            error = provider_error(
                f"Connection error: {type(exc).__name__}: {str(exc)[:300]}",
                status=500,
                connection=True,
            )
            error.attempts = sent
            log.error("request failed on attempt %d: %s", sent, error)
            raise error from exc
        if status >= 400:
            error = error_for_answer(status, payload, retry_after_seconds(retry_after))
            error.attempts = sent
            log.error("request failed on attempt %d: %s", sent, error)
            raise error
        try:
            reply = json.loads(payload)
        except ValueError as exc:
            error = provider_error(
                f"unreadable reply (HTTP {status}): {payload[:200]!r}", status=None
            )
            error.attempts = sent
            raise error from exc
        if not isinstance(reply, dict):
            error = provider_error(f"unreadable reply (HTTP {status}): not an object", status=None)
            error.attempts = sent
            raise error
        return reply

    # -- Provider --------------------------------------------------------------------------------

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        """Send one judge call; see ``judge.providers.base.Provider.complete``."""
        endpoint = _endpoint_of(config)
        plan = _plan_of(config, endpoint, response_model, self._extra)
        if response_model is None:
            return await self._complete_text(messages, config, endpoint, plan)
        tokens = _Tokens(endpoint)
        history = prepared_messages(list(messages), plan, validation_context)
        started = time.monotonic()
        sent = 0
        last_error: Exception | None = None
        last_reply: ParsedReply | None = None
        while True:
            sent += 1
            try:
                body = await self._post(endpoint, request_body(history, plan), config, sent)
            except ProviderError as exc:
                tokens.charged(exc)  # the re-asks before the failure were answered and billed
                raise
            tokens.add(body)
            reply = parse_reply(body)  # the one trip through the reply
            if reply.finish_reason == "length":
                raise tokens.charged(
                    JudgeOutputError(
                        "the judge's output was cut off (finish_reason=length)",
                        reason="truncated_output",
                        raw=reply.raw,
                        attempts=sent,
                    )
                )
            try:
                text = reply.answer(config.mode)
                output = response_model.model_validate_json(
                    text, strict=True, context=validation_context
                )
            except (ValidationError, ReplyError) as exc:
                last_error, last_reply = exc, reply
                if reply.refusal:
                    # A judge that declined the prompt declines a re-ask too: the call ends
                    # `refusal` here, as the litellm path's re-ask policy ends it.
                    break
            except Unparseable as exc:
                # instructor does not re-ask this; it reports the last *re-asked* reply, if any.
                raise tokens.charged(_no_valid_answer(sent, str(exc), last_reply)) from exc
            else:
                return tokens.completed(output, reply.raw, attempts=sent)
            # instructor stops re-asking after reasks, or once the call has taken `timeout`.
            if sent > config.reasks or time.monotonic() - started >= config.timeout:
                break
            log.info("re-asking after an invalid answer (attempt %d): %s", sent, last_error)
            history = [*history, *reask_messages(reply.message, config.mode, last_error)]
        log.error("no valid answer after %d attempt(s): %s", sent, last_error)
        raise tokens.charged(
            _no_valid_answer(sent, str(last_error)[:300], last_reply)
        ) from last_error

    async def _complete_text(
        self,
        messages: list[dict[str, str]],
        config: JudgeConfig,
        endpoint: _Endpoint,
        plan: Plan,
    ) -> Completion:
        body = await self._post(endpoint, request_body(list(messages), plan), config, 1)
        reply = parse_reply(body)
        tokens = _Tokens(endpoint)
        tokens.add(body)
        try:
            text = usable_text(
                refusal=reply.refusal, finish_reason=reply.finish_reason, raw=reply.raw
            )
        except JudgeOutputError as exc:
            tokens.charged(exc)  # a refused or cut-off answer is billed all the same
            raise
        return tokens.completed(text, text)


def error_for_answer(status: int, payload: bytes, retry_after: float | None) -> ProviderError:
    """The ``ProviderError`` of an HTTP error answer (reading OpenAI's error body, if it is one).

    The same reason, retryability, status and ``Retry-After`` as ``map_provider_exception`` gives
    litellm's exception for that answer.
    """
    text = payload[:2000].decode("utf-8", "replace")
    detail = text
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        detail = str(body["error"].get("message") or text)
    # litellm's tests for OpenAI's content-policy refusals, which it reads from the error text.
    # (It reads a rate limit from the text too, e.g. "rate limit" in a 503; here only a 429 is
    # one: either way the call is retried.)
    policy = (
        ("invalid_request_error" in text and "content_policy_violation" in text)
        or ("Invalid prompt" in text and "violating our usage policy" in text)
        or "request was rejected as a result of the safety system" in text.lower()
    )
    return provider_error(
        f"HTTP {status}: {detail[:500]}",
        status=status,
        # litellm raises its Timeout for a 408 and a 504 (gateway timeout) alike.
        timeout=status in (408, 504),
        content_policy=policy,
        retry_after=retry_after,
    )



# -- preflight -----------------------------------------------------------------------------------


def preflight_direct(config: JudgeConfig, *, call: bool = True) -> Preflight:
    """``judge.providers.routing.preflight`` for the direct transport (no litellm import).

    Checks that a base URL is known and, for OpenAI's own API, that a key is set; with ``call``,
    sends one tiny request (``max_tokens=1``). A busy (429) or failing (5xx) server passes with a
    warning; what cannot work raises ``ConfigError`` with the same causes as the litellm path's.
    The probe's usage comes back with the verdict: the provider bills it.
    """
    endpoint = _endpoint_of(config)
    if config.api_key is None and not config.api_base and "Authorization" not in endpoint.headers:
        variable = "HOSTED_VLLM_API_KEY" if endpoint.provider == "hosted_vllm" else "OPENAI_API_KEY"
        if variable in os.environ:  # set but empty: the fix is to give it the key, not export it
            fix = f"{unset_variable(variable)}: give it the key"
        else:
            fix = f"set {variable} in the environment"
        raise ConfigError(
            f"missing credentials for {config.model}: {fix} (or name the variable that holds "
            "the key with --api-key-env)",
            field="api_key_env",
        )
    if not call:
        return Preflight()
    probe = probe_config(config)
    where = config.api_base or endpoint.url.rsplit("/chat/completions", 1)[0]

    async def ask() -> Completion | SpendingError:
        provider = DirectProvider()
        try:
            return await provider.complete(list(PROBE_MESSAGES), None, probe)
        except JudgeOutputError as exc:
            return exc  # an answer, even a cut-off one (max_tokens=1): the judge works
        finally:
            await provider.aclose()

    try:
        return Preflight.of(_run(ask()))
    except ProviderError as exc:
        return Preflight.of(exc, _preflight_verdict(exc, config.model, where))


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` to the end, also when called from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _preflight_verdict(exc: ProviderError, model: str, where: str) -> str | None:
    """A warning for what grading waits out; ``ConfigError`` for what cannot work."""
    short = " ".join(str(exc).split())[:200]
    if exc.status in (401, 403):
        raise ConfigError(
            f"refused: {where} rejected the credentials for {model} ({short})",
            field="api_key_env",
        ) from exc
    if exc.status == 404:
        raise ConfigError(
            f"unknown model: {where} has no model {model!r} ({short})", field="model"
        ) from exc
    if exc.reason == "timeout" or isinstance(exc.__cause__, OSError | _client_errors()):
        raise ConfigError(
            f"unreachable: no answer from {where} for {model} ({short})", field="api_base"
        ) from exc
    if exc.reason == "rate_limited":
        return f"preflight: {where} is rate limiting ({short}); grading will back off"
    if exc.retryable and exc.status is not None:
        return f"preflight: {where} answered {exc.status}; grading will retry and wait it out"
    raise ConfigError(
        f"refused: {where} answered {exc.status} to a one-token request for {model} ({short})",
        field="model",
    ) from exc


def _client_errors() -> type[BaseException]:
    import aiohttp

    return aiohttp.ClientError

