"""Which transport carries a judge call, and the preflight that checks a judge can work.

``RoutingProvider`` is the ``Grader``'s default provider: each call goes on the transport
:func:`transport_for` picks (``judge.providers.direct`` for OpenAI-compatible endpoints,
``judge.providers.litellm`` otherwise); :func:`preflight` dispatches the start-up check the
same way.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from core.errors import ConfigError
from judge.config import JudgeConfig
from judge.providers.base import (
    PROBE_MESSAGES,
    Completion,
    probe_config,
)
from judge.providers.direct import DirectProvider

if TYPE_CHECKING:
    from judge.providers.litellm import LiteLLMProvider

__all__ = ["DIRECT_PREFIXES", "RoutingProvider", "Transport", "preflight", "transport_for"]

Transport = Literal["direct", "litellm"]
"""The transport that carries one judge call."""

DIRECT_PREFIXES = ("openai/", "hosted_vllm/")
"""Model prefixes of OpenAI-compatible endpoints, which ``auto`` sends on the direct transport."""

# litellm rewrites or refuses the sampling fields of OpenAI's reasoning models (max_tokens becomes
# max_completion_tokens, a temperature other than 1 is an error); the direct transport does not
# replicate that, so ``auto`` leaves those models to litellm.
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5(?!-chat))")


def transport_for(config: JudgeConfig) -> Transport:
    """The transport that carries ``config``'s judge calls.

    ``auto`` is direct for ``openai/`` and ``hosted_vllm/`` models (except OpenAI's reasoning
    models, whose parameters litellm rewrites) and litellm for every other provider.
    """
    if config.transport != "auto":
        return config.transport
    return "direct" if _direct_by_default(config.model) else "litellm"


@functools.lru_cache(maxsize=256)
def _direct_by_default(model: str) -> bool:
    prefix, _, name = model.partition("/")
    if f"{prefix}/" not in DIRECT_PREFIXES or not name:
        return False
    return not (prefix == "openai" and _REASONING_MODEL.match(name))


class RoutingProvider:
    """The ``Grader``'s default provider: each call on the transport ``transport_for`` picks.

    One ``DirectProvider`` and one ``LiteLLMProvider``, each made on first use, so a run that
    never leaves the direct transport never imports litellm or instructor.
    """

    def __init__(self) -> None:
        self._direct: DirectProvider | None = None
        self._litellm: LiteLLMProvider | None = None

    @property
    def direct(self) -> DirectProvider:
        """The direct transport (made on first use)."""
        if self._direct is None:
            self._direct = DirectProvider()
        return self._direct

    @property
    def litellm(self) -> LiteLLMProvider:
        """The litellm transport (made on first use)."""
        if self._litellm is None:
            from judge.providers.litellm import LiteLLMProvider

            self._litellm = LiteLLMProvider()
        return self._litellm

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        """Send one judge call on ``config``'s transport; see ``Provider.complete``."""
        provider: DirectProvider | LiteLLMProvider = (
            self.direct if transport_for(config) == "direct" else self.litellm
        )
        return await provider.complete(
            messages, response_model, config, validation_context=validation_context
        )

    async def aclose(self) -> None:
        """Close the direct transport's session (litellm keeps its own)."""
        if self._direct is not None:
            await self._direct.aclose()



_CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "CREDENTIAL", "PASSWORD")


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
    from judge.providers.direct import preflight_direct
    from judge.providers.routing import transport_for

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

