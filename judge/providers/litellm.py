"""The litellm transport: any litellm model through instructor (structured output, re-asks).

What reaches the wire is pinned by ``tests/judge/providers/test_wire_contract.py`` (see
:mod:`judge.providers.base`).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from core.errors import ConfigError, JudgeOutputError, ProviderError, UnscoredReason
from judge.config import JudgeConfig
from judge.providers.base import (
    PROBE_MESSAGES,
    Completion,
    Preflight,
    UsageSum,
    _is_transport_error,
    failure_reason_of,
    map_provider_exception,
    probe_config,
    usable_text,
)

_MODES = {
    "tools": "TOOLS",
    "json_schema": "JSON_SCHEMA",
    "json": "JSON",
    "md_json": "MD_JSON",
    # llama.cpp: instructor's JSON mode, with the schema added to response_format (see below).
    "json_object_schema": "JSON",
}



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


def _usage(completion: Any) -> tuple[int | None, int | None, int | None]:
    """(prompt, completion, cached prompt) tokens a completion reports, each None if absent.

    litellm normalizes every provider's cache hits into OpenAI's
    ``usage.prompt_tokens_details.cached_tokens`` (a part of ``prompt_tokens``).
    """
    usage = getattr(completion, "usage", None)
    if usage is None:
        return None, None, None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    return (
        getattr(usage, "prompt_tokens", None),
        getattr(usage, "completion_tokens", None),
        cached if isinstance(cached, int) else None,
    )


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

    return cast("type[BaseModel]", instructor.openai_schema(response_model))


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


def _reasking(config: JudgeConfig, spent: _Spent) -> Any:
    """The re-ask policy instructor builds from an int, except that a refused answer is final.

    The same stop (``config.reasks`` re-asks, or ``config.timeout`` in all) and the same errors
    re-asked (the parse and validation errors instructor retries) as instructor builds from an
    int, so the litellm path keeps its behaviour, but a reply carrying a refusal ends the call
    at once: re-asking a judge that declined the prompt with "fix your JSON" only bought the
    same refusal twice more (3 billed requests a task). The direct transport does the same.
    """
    from instructor.core import AsyncValidationError, ResponseParsingError
    from tenacity import (
        AsyncRetrying,
        retry_if_exception,
        retry_if_exception_type,
        stop_after_attempt,
        stop_after_delay,
    )

    parse_errors = (ValidationError, json.JSONDecodeError, AsyncValidationError,
                    ResponseParsingError)
    return AsyncRetrying(
        stop=stop_after_attempt(max(config.reasks, 0) + 1) | stop_after_delay(config.timeout),
        retry=(retry_if_exception_type(parse_errors)
               & retry_if_exception(lambda _: not spent.refused)),
        reraise=True,
    )


class _Spent(UsageSum):
    """The requests one call sent and what their answers cost, from instructor's hooks.

    instructor reports its attempt count and usage only when it gives up on re-asks, not when a
    cut-off answer or a transport failure ends the call, and litellm prices only the reply it
    returns: counted per request and per answer here (per call, so concurrent calls do not
    mix), every request the provider billed is accounted for, on success and failure alike.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0
        self.refused = False

    def request(self, *args: Any, **kwargs: Any) -> None:
        """A request is about to go out (instructor's ``completion:kwargs`` hook)."""
        self.sent += 1

    def answer(self, response: Any, *args: Any, **kwargs: Any) -> None:
        """The provider answered one (``completion:response``): add its usage and price."""
        self.refused = bool(_refusal(response))
        self.count(*_usage(response), _cost(response))


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

        spent = _Spent()
        hooks = Hooks()
        hooks.on("completion:kwargs", spent.request)
        hooks.on("completion:response", spent.answer)
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
                max_retries=_reasking(config, spent),
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
            raise spent.charged(
                JudgeOutputError(
                    "the judge's output was cut off (finish_reason=length)",
                    reason="truncated_output",
                    raw=_raw_text(getattr(exc, "last_completion", None)),
                    # A cut-off re-ask still cost the requests before it.
                    attempts=max(1, spent.sent),
                )
            ) from exc
        except InstructorRetryException as exc:
            cause = exc.__cause__
            if cause is not None and _is_transport_error(cause):
                # instructor wraps transport/HTTP errors too (with the litellm exception as the
                # cause); those are provider failures, retried by the engine.
                error = map_provider_exception(cause)
                error.attempts = max(1, spent.sent)
                raise spent.charged(error) from exc
            last = getattr(exc, "last_completion", None)
            raise spent.charged(
                JudgeOutputError(
                    f"no valid answer after {exc.n_attempts} attempt(s): {str(exc)[:300]}",
                    reason=output_failure_reason(last),
                    raw=_raw_text(last),
                    attempts=int(exc.n_attempts or 1),
                )
            ) from exc
        except (JudgeOutputError, ProviderError):
            raise
        except Exception as exc:
            raise spent.charged(map_provider_exception(exc)) from exc
        return spent.completed(output, _raw_text(raw), attempts=max(1, spent.sent))

    async def _complete_text(
        self, messages: list[dict[str, str]], config: JudgeConfig
    ) -> Completion:
        import litellm

        try:
            raw = await litellm.acompletion(messages=messages, **self._params(config))
        except Exception as exc:
            raise map_provider_exception(exc) from exc
        spent = UsageSum()
        spent.count(*_usage(raw), _cost(raw))
        try:
            text = usable_text(
                refusal=_refusal(raw), finish_reason=_finish_reason(raw), raw=_raw_text(raw)
            )
        except JudgeOutputError as exc:
            spent.charged(exc)  # a refused or cut-off answer is billed all the same
            raise
        return spent.completed(text, text)


_CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "CREDENTIAL", "PASSWORD")


def preflight_litellm(config: JudgeConfig, *, call: bool = True) -> Preflight:
    """``judge.providers.routing.preflight`` for the litellm transport (any provider).

    Checks, in order: that litellm knows the model's provider (a missing or mistyped prefix), that
    the credentials the provider needs are set (litellm says which), and, with ``call``, that one
    tiny request (``max_tokens=1``) is answered, on the same parameters grading sends. The
    probe's usage and cost come back with the verdict: the provider bills it.
    """
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
        return Preflight()
    params = LiteLLMProvider()._params(probe_config(config))
    where = config.api_base or model.split("/", 1)[0]
    try:
        answer = litellm.completion(messages=list(PROBE_MESSAGES), **params)
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
        return Preflight.of(
            None, f"preflight: {where} is rate limiting ({_short(exc)}); grading will back off"
        )
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
            return Preflight.of(
                None, f"preflight: {where} answered {status}; grading will retry and wait it out"
            )
        raise ConfigError(
            f"refused: {where} answered {status} to a one-token request for {model} "
            f"({_short(exc)})",
            field="model",
        ) from exc
    spent = UsageSum()
    spent.count(*_usage(answer), _cost(answer))
    return Preflight.of(spent.completed("", None))


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

