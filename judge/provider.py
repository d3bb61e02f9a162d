"""Providers: the one thin layer that talks to a judge model.

A provider does a single thing: send rendered messages and return the judge's answer, either a
validated pydantic object (structured output) or plain text (the faithful mode). It raises
``ProviderError`` for transport and HTTP failures and ``JudgeOutputError`` for unusable answers.
Caching, retries with backoff, the circuit breaker (``judge.calls.Caller``) and concurrency (the
engine) live outside providers (style.md practice 1). ``LiteLLMProvider`` reaches any litellm
model through instructor; ``judge.direct.DirectProvider`` sends the same requests to
OpenAI-compatible endpoints on its own HTTP client, at a fraction of the CPU (``JudgeConfig.
transport`` picks one, ``judge.direct.RoutingProvider`` routes); ``judge.fake.FakeProvider`` is the
scripted stand-in for tests. Both transports map failures with ``provider_error``.

What reaches the wire: OpenAI's API rejects any top-level request field it does not document
(HTTP 400 "Unrecognized request argument supplied: <name>"), and litellm forwards every keyword
it does not know into the request body. So only three kinds of keyword may reach
``litellm.acompletion``: documented request fields (``model``, ``messages``, sampling, and what
instructor adds: ``tools``/``tool_choice`` or ``response_format``), options litellm itself
consumes (``api_base``, ``api_key``, ``timeout``, ``num_retries``, ``extra_body``), and the
caller's ``extra_params``. instructor's own options (``context``, ``max_retries``, ``hooks``) are
named parameters of ``create_with_completion``, which consumes them. The wire contract is pinned
by ``tests/judge/test_wire_contract.py`` against the strict ``judge.testing.OpenAIStandIn``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Protocol, cast

from pydantic import BaseModel

from core.errors import ConfigError, JudgeOutputError, ProviderError, UnscoredReason
from judge.config import JudgeConfig

# litellm must not fetch its model cost map from the network at import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@dataclass
class Completion:
    """A judge's answer and what it cost.

    Attributes:
        output: The validated response-model instance, or the text for plain-text calls.
        raw_text: The judge's raw text (tool arguments or content), when available.
        prompt_tokens: Prompt tokens over all attempts, when the provider reports them.
        completion_tokens: Completion tokens over all attempts, when reported.
        cost_usd: Cost litellm computed, when it knows the model's price.
        attempts: Attempts made, re-asks included.
    """

    output: BaseModel | str
    raw_text: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    attempts: int = 1


class Provider(Protocol):
    """What the engine needs from a judge backend."""

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        """Ask the judge once (with re-asks on invalid structured answers).

        Args:
            messages: Chat messages, rendered from a rubric.
            response_model: The pydantic model to fill, or None for a plain-text answer.
            config: The judge configuration (model, base URL, sampling, mode, timeouts).
            validation_context: Extra context for the response model's validators.

        Raises:
            ProviderError: the call failed (``retryable`` tells whether to try again).
            JudgeOutputError: the judge answered but not usably (after re-asks).
        """
        ...


_MODES = {
    "tools": "TOOLS",
    "json_schema": "JSON_SCHEMA",
    "json": "JSON",
    "md_json": "MD_JSON",
    # llama.cpp: instructor's JSON mode, with the schema added to response_format (see below).
    "json_object_schema": "JSON",
}


def _retry_after(exc: BaseException) -> float | None:
    # litellm keeps the provider's headers in `litellm_response_headers`; `response.headers` is
    # its own reconstruction and lacks Retry-After (observed with litellm 1.106).
    for headers in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ):
        if not headers:
            continue
        value = headers.get("retry-after")
        if value is None:
            continue
        return retry_after_seconds(value)
    return None


def retry_after_seconds(value: Any) -> float | None:
    """A ``Retry-After`` header's delay in seconds (never negative), or None.

    An HTTP date (the header's other form) is treated as absent: the backoff then decides.
    """
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return None


def _literal_for_jinja(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """Messages that instructor's templating renders back to exactly themselves.

    Given a validation context, instructor renders every message as a Jinja template with that
    context. The messages hold the graded response and the story, untrusted text: a response
    with ``{{ 7*7 }}`` reached the judge as ``49``, and an unbalanced ``{%`` failed the call as a
    retryable provider error. Every ``{`` becomes the expression ``{{ '{' }}``, which renders
    to ``{``; with no ``{`` left in the text, nothing else in it can open a tag.
    """
    return [
        {**message, "content": message["content"].replace("{", "{{ '{' }}")}
        if isinstance(message.get("content"), str)
        else message
        for message in messages
    ]


def _is_transport_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` is an HTTP/transport failure (as opposed to an unusable answer)."""
    if exc is None:
        return False
    import openai

    return isinstance(exc, openai.APIError | TimeoutError | ConnectionError)


def provider_error(
    message: str,
    *,
    status: int | None,
    timeout: bool = False,
    connection: bool = False,
    content_policy: bool = False,
    retry_after: float | None = None,
) -> ProviderError:
    """The ``ProviderError`` of a failed request, from what is known about the failure.

    The one table both transports use (``map_provider_exception`` for litellm's exceptions,
    ``judge.direct`` for HTTP statuses): 429, 5xx, timeouts and connection failures are
    retryable; 4xx (bad request, auth, not found, content policy) are not, since asking again
    cannot help. ``retry_after`` is kept for 429 and 5xx only, the answers that may carry one.

    Args:
        message: What failed, for the log and the unscored detail (bounded by the caller).
        status: The HTTP status, when there was one.
        timeout: The request timed out.
        connection: The connection failed (refused, reset, closed early).
        content_policy: The provider refused the request on content-policy grounds.
        retry_after: The provider's ``Retry-After``, in seconds.
    """
    if timeout:
        return ProviderError(message, reason="timeout", retryable=True, status=status)
    if status == 429:
        return ProviderError(
            message, reason="rate_limited", retryable=True, status=429, retry_after=retry_after
        )
    if content_policy:
        return ProviderError(message, reason="refusal", retryable=False, status=status)
    if connection or status is None:
        return ProviderError(message, reason="provider_error", retryable=True, status=status)
    if isinstance(status, int) and status >= 500:
        return ProviderError(
            message,
            reason="provider_error",
            retryable=True,
            status=status,
            retry_after=retry_after,
        )
    return ProviderError(message, reason="provider_error", retryable=False, status=status)


def map_provider_exception(exc: BaseException) -> ProviderError:
    """Turn a litellm/openai/httpx exception into a ``ProviderError`` with reason and retryability.

    The classes say what the status cannot (a timeout, a connection failure, a content-policy
    refusal); ``provider_error`` decides retryability.
    """
    from litellm import exceptions as lx

    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    rate_limited = isinstance(exc, lx.RateLimitError) or status == 429
    return provider_error(
        f"{name}: {str(exc)[:500]}",
        status=429 if rate_limited else status,
        timeout=isinstance(exc, lx.Timeout) or "Timeout" in name,
        connection=isinstance(exc, lx.APIConnectionError),
        content_policy=isinstance(exc, lx.ContentPolicyViolationError),
        retry_after=_retry_after(exc),
    )


def _message_of(completion: Any) -> Any:
    try:
        return completion.choices[0].message
    except (AttributeError, IndexError, TypeError):
        return None


def _raw_text(completion: Any) -> str | None:
    message = _message_of(completion)
    if message is None:
        return None
    tool_calls = getattr(message, "tool_calls", None)
    if tool_calls:
        try:
            return str(tool_calls[0].function.arguments)
        except (AttributeError, IndexError):
            pass
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def _finish_reason(completion: Any) -> str | None:
    try:
        return str(completion.choices[0].finish_reason)
    except (AttributeError, IndexError, TypeError):
        return None


def output_failure_reason(completion: Any) -> UnscoredReason:
    """Classify why a judge's answer was unusable, from its last raw completion."""
    if completion is None:
        return "parse_failure"
    return failure_reason_of(
        refused=bool(_refusal(completion)),
        finish_reason=_finish_reason(completion),
        raw=_raw_text(completion),
    )


def failure_reason_of(*, refused: bool, finish_reason: Any, raw: str | None) -> UnscoredReason:
    """Why an answer that failed validation was unusable, from what its reply says.

    The one classification of both transports (``output_failure_reason`` reads the SDK's
    completion, ``judge.wire.failure_reason`` a raw reply): a refusal, a reply cut off at the
    token limit, an empty answer, else an answer that did not validate.
    """
    if refused:
        return "refusal"
    if finish_reason == "length":
        return "truncated_output"
    if raw is None or not raw.strip():
        return "empty_output"
    return "validation_failure"


def _refusal(completion: Any) -> str | None:
    """The refusal text of a completion, if the judge refused.

    litellm's ``Message`` has no ``refusal`` attribute: it keeps OpenAI's refusal in
    ``provider_specific_fields``.
    """
    message = _message_of(completion)
    if message is None:
        return None
    refusal = getattr(message, "refusal", None)
    if not refusal:
        fields = getattr(message, "provider_specific_fields", None) or {}
        refusal = fields.get("refusal") if isinstance(fields, dict) else None
    return str(refusal) if refusal else None


def _usage(completion: Any) -> tuple[int | None, int | None]:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return None, None
    return getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)


@functools.lru_cache(maxsize=256)
def _instructor_model(response_model: type[BaseModel]) -> type[BaseModel]:
    """The response model wrapped once as instructor's ``OpenAISchema`` subclass.

    instructor wraps a plain model in a new subclass on every call, which defeats its own
    ``lru_cache`` of the tool schema: each call regenerated the JSON schema and built a class
    (~3 ms of CPU per judge call, a quarter of the client stack's cost). instructor uses a
    model that already is an ``OpenAISchema`` as given, so wrapping once here keeps the class,
    and with it the schema cache entry, the same across calls. The wrapper subclasses
    ``response_model``, so the parsed output is still an instance of it.
    """
    import instructor

    return cast(type[BaseModel], instructor.openai_schema(response_model))


def _cost(completion: Any) -> float | None:
    # litellm already priced the response when it knows the model; pricing it again costs ~2 ms
    # per call, and for an unknown model it only raises.
    hidden = getattr(completion, "_hidden_params", None) or {}
    if isinstance(hidden, dict) and "response_cost" in hidden:
        value = hidden.get("response_cost")
        return float(value) if value else None
    import litellm

    try:
        value = litellm.completion_cost(completion_response=completion)
    except Exception:  # unknown model price: cost is simply not known
        return None
    return float(value) if value else None


class LiteLLMProvider:
    """Any litellm model, with structured output through instructor.

    litellm's own retries are off (``num_retries=0``): retries belong to ``judge.calls.Caller``,
    which applies backoff with jitter, ``Retry-After`` and a per-run budget.

    Args:
        extra_params: Extra keywords for ``litellm.acompletion``. litellm sends the ones it does
            not consume in the request body, so they must be fields the provider documents
            (OpenAI answers any other with HTTP 400).
    """

    def __init__(self, *, extra_params: dict[str, Any] | None = None) -> None:
        self.extra_params = extra_params or {}
        self._clients: dict[str, Any] = {}

    def _client(self, mode: str) -> Any:
        if mode not in self._clients:
            import instructor
            import litellm

            litellm.suppress_debug_info = True
            self._clients[mode] = instructor.from_litellm(
                litellm.acompletion, mode=getattr(instructor.Mode, _MODES[mode])
            )
        return self._clients[mode]

    def _params(self, config: JudgeConfig) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": config.model,
            "timeout": config.timeout,
            "num_retries": 0,
            **config.sampling(),
            **self.extra_params,
        }
        if config.api_base:
            params["api_base"] = config.api_base
        if config.api_key is not None:
            params["api_key"] = config.api_key.get_secret_value()
        elif config.api_base and config.model.startswith(("openai/", "hosted_vllm/")):
            # OpenAI-compatible local servers ignore the key but the client insists on one.
            params["api_key"] = os.environ.get("OPENAI_API_KEY", "sk-no-key")
        return params

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        """Send one judge call; see ``Provider.complete``."""
        if response_model is None:
            return await self._complete_text(messages, config)
        from instructor.core import IncompleteOutputException, InstructorRetryException
        from instructor.core.hooks import Hooks

        # instructor reports its attempt count only when it gives up; count the requests it
        # sends (per call, so concurrent calls do not mix), so that a re-ask that then succeeds
        # shows in ``attempts`` too.
        sent = 0

        def count_attempt(*args: Any, **kwargs: Any) -> None:
            nonlocal sent
            sent += 1

        hooks = Hooks()
        hooks.on("completion:kwargs", count_attempt)
        params = self._params(config)
        if config.mode == "json_object_schema":
            # The OpenAI client merges extra_body over the body instructor built, so the server
            # sees the schema and constrains decoding with a grammar. The top-level fields stay
            # documented ones; the nested ``response_format.schema`` is llama.cpp's dialect, which
            # OpenAI does not document: this mode is for lenient local servers only.
            params["extra_body"] = {
                "response_format": {
                    "type": "json_object",
                    "schema": response_model.model_json_schema(),
                }
            }
        try:
            output, raw = await self._client(config.mode).chat.completions.create_with_completion(
                messages=_literal_for_jinja(messages) if validation_context else messages,
                response_model=_instructor_model(response_model),
                max_retries=config.reasks,
                # ``context=`` is instructor's parameter for the validators' context. The old
                # ``validation_context=`` is no parameter of instructor 1.17's
                # ``create_with_completion``: it fell into ``**kwargs``, litellm sent it in the
                # request body, OpenAI rejected every call with HTTP 400, and the validators
                # never saw it.
                context=validation_context,
                hooks=hooks,
                **params,
            )
        except IncompleteOutputException as exc:
            raise JudgeOutputError(
                "the judge's output was cut off (finish_reason=length)",
                reason="truncated_output",
                raw=_raw_text(getattr(exc, "last_completion", None)),
                # A cut-off re-ask still cost the requests before it.
                attempts=max(1, sent),
            ) from exc
        except InstructorRetryException as exc:
            cause = exc.__cause__
            if cause is not None and _is_transport_error(cause):
                # instructor wraps transport/HTTP errors too (with the litellm exception as the
                # cause); those are provider failures, retried by the engine.
                error = map_provider_exception(cause)
                error.attempts = max(1, sent)
                raise error from exc
            last = getattr(exc, "last_completion", None)
            raise JudgeOutputError(
                f"no valid answer after {exc.n_attempts} attempt(s): {str(exc)[:300]}",
                reason=output_failure_reason(last),
                raw=_raw_text(last),
                attempts=int(exc.n_attempts or 1),
            ) from exc
        except (JudgeOutputError, ProviderError):
            raise
        except Exception as exc:
            raise map_provider_exception(exc) from exc
        prompt, completion_tokens = _usage(raw)
        return Completion(
            output=output,
            raw_text=_raw_text(raw),
            prompt_tokens=prompt,
            completion_tokens=completion_tokens,
            cost_usd=_cost(raw),
            attempts=max(1, sent),
        )

    async def _complete_text(
        self, messages: list[dict[str, str]], config: JudgeConfig
    ) -> Completion:
        import litellm

        try:
            raw = await litellm.acompletion(messages=messages, **self._params(config))
        except Exception as exc:
            raise map_provider_exception(exc) from exc
        refusal = _refusal(raw)
        if refusal:
            raise JudgeOutputError("the judge refused", reason="refusal", raw=refusal)
        if _finish_reason(raw) == "length":
            raise JudgeOutputError(
                "the judge's output was cut off (finish_reason=length)",
                reason="truncated_output",
                raw=_raw_text(raw),
            )
        text = _raw_text(raw)
        if text is None or not text.strip():
            raise JudgeOutputError("the judge returned no text", reason="empty_output")
        prompt, completion_tokens = _usage(raw)
        return Completion(
            output=text,
            raw_text=text,
            prompt_tokens=prompt,
            completion_tokens=completion_tokens,
            cost_usd=_cost(raw),
        )


_CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "CREDENTIAL", "PASSWORD")

PROBE_MESSAGES: tuple[dict[str, str], ...] = ({"role": "user", "content": "Reply with OK."},)
"""The messages of a probe request (the preflight's, and the service's during an outage)."""

PROBE_TIMEOUT = 30.0
"""Most seconds a probe request waits for its answer (less when the judge's timeout is less)."""


def probe_config(config: JudgeConfig) -> JudgeConfig:
    """``config`` for a probe request: one token (``max_tokens=1``), at most ``PROBE_TIMEOUT``.

    Built without validation: ``max_tokens`` is at least 16 for judge calls, which need room to
    answer; a probe needs only an answer.
    """
    return config.model_copy(
        update={"max_tokens": 1, "timeout": min(config.timeout, PROBE_TIMEOUT)}
    )


def preflight(config: JudgeConfig, *, call: bool = True) -> str | None:
    """Find out before a run whether ``config``'s judge can work at all.

    Checks, in order: that litellm knows the model's provider (a missing or mistyped prefix), that
    the credentials the provider needs are set (litellm says which), and, with ``call``, that one
    tiny request (``max_tokens=1``) is answered. A busy (429) or failing (5xx) provider passes,
    with a warning returned: grading retries and waits those out; what cannot work fails here.

    Returns:
        A warning to show, or None.

    Raises:
        ConfigError: the judge cannot work; the message starts with the cause (``unknown
            model``, ``missing credentials``, ``unreachable``, ``refused``).
    """
    from judge.direct import preflight_direct, transport_for

    if transport_for(config) == "direct":
        # The direct transport's own request and checks: no litellm import at start-up.
        return preflight_direct(config, call=call)
    import litellm
    from litellm import exceptions as lx

    litellm.suppress_debug_info = True
    model = config.model
    try:
        litellm.get_llm_provider(model, api_base=config.api_base)
    except Exception as exc:
        raise ConfigError(
            f"unknown model {model!r}: litellm needs a provider prefix it knows, e.g. "
            "openai/gpt-4o, anthropic/NAME, hosted_vllm/NAME, or openai/NAME with --api-base "
            "for an OpenAI-compatible server",
            field="model",
        ) from exc
    if config.api_key is None and not config.api_base:
        env = litellm.validate_environment(model=model)
        missing = [
            key for key in env.get("missing_keys") or []
            if any(word in str(key).upper() for word in _CREDENTIAL_WORDS)
        ]
        if missing:
            raise ConfigError(
                f"missing credentials for {model}: set {', '.join(missing)} in the environment "
                "(or name the variable that holds the key with --api-key-env)",
                field="api_key_env",
            )
    if not call:
        return None
    params = LiteLLMProvider()._params(probe_config(config))
    where = config.api_base or model.split("/", 1)[0]
    try:
        litellm.completion(messages=list(PROBE_MESSAGES), **params)
    except (lx.AuthenticationError, lx.PermissionDeniedError) as exc:
        raise ConfigError(
            f"refused: {where} rejected the credentials for {model} ({_short(exc)})",
            field="api_key_env",
        ) from exc
    except lx.NotFoundError as exc:
        raise ConfigError(
            f"unknown model: {where} has no model {model!r} ({_short(exc)})", field="model"
        ) from exc
    except (lx.Timeout, lx.APIConnectionError) as exc:
        raise ConfigError(
            f"unreachable: no answer from {where} for {model} ({_short(exc)})", field="api_base"
        ) from exc
    except lx.RateLimitError as exc:
        return f"preflight: {where} is rate limiting ({_short(exc)}); grading will back off"
    except Exception as exc:  # litellm's other errors (5xx classes are not all lx.APIError)
        status = getattr(exc, "status_code", None)
        if _connection_failed(exc):
            # litellm reports a refused or reset connection to an OpenAI-compatible server as
            # a 500 "Connection error." (its cause chain holds the transport error).
            raise ConfigError(
                f"unreachable: cannot connect to {where} for {model} ({_short(exc)})",
                field="api_base",
            ) from exc
        if isinstance(status, int) and status >= 500:
            return f"preflight: {where} answered {status}; grading will retry and wait it out"
        raise ConfigError(
            f"refused: {where} answered {status} to a one-token request for {model} "
            f"({_short(exc)})",
            field="model",
        ) from exc
    return None


def _connection_failed(exc: BaseException) -> bool:
    """Whether a transport failure (refused, reset, DNS) is behind ``exc``."""
    import httpx
    import openai

    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            break
        if isinstance(seen, openai.APIConnectionError | httpx.ConnectError | ConnectionError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "Connection error" in str(exc)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] + ("..." if len(text) > 200 else "")
