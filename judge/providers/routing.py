"""Which transport carries a judge call, and the preflight that checks a judge can work.

``RoutingProvider`` is the ``Grader``'s default provider: each call goes on the transport
:func:`transport_for` picks (``judge.providers.direct`` for OpenAI-compatible endpoints,
``judge.providers.litellm`` otherwise); :func:`preflight` dispatches the start-up check the
same way.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from judge.config import JudgeConfig, is_reasoning_model
from judge.providers.base import Completion, Preflight
from judge.providers.direct import DirectProvider

if TYPE_CHECKING:
    from judge.providers.litellm import LiteLLMProvider

__all__ = ["DIRECT_PREFIXES", "RoutingProvider", "Transport", "preflight", "transport_for"]

Transport = Literal["direct", "litellm"]
"""The transport that carries one judge call."""

DIRECT_PREFIXES = ("openai/", "hosted_vllm/")
"""Model prefixes of OpenAI-compatible endpoints, which ``auto`` sends on the direct transport."""

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
    # litellm rewrites the sampling fields of OpenAI's reasoning models (max_tokens becomes
    # max_completion_tokens); the direct transport does not, so ``auto`` leaves them to litellm.
    return not (prefix == "openai" and is_reasoning_model(name))


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



def preflight(config: JudgeConfig, *, call: bool = True) -> Preflight:
    """Find out before a run whether ``config``'s judge can work at all.

    On the transport that will carry its calls (:func:`transport_for`): that the provider is
    known (a missing or mistyped prefix), that its credentials are set and, with ``call``, that
    one tiny request (``max_tokens=1``) is answered. A busy (429) or failing (5xx) provider
    passes, with a warning: grading retries and waits those out; what cannot work fails here.

    Returns:
        The verdict's warning, if any, and what the probe request cost (it is billed).

    Raises:
        ConfigError: the judge cannot work; the message starts with the cause (``unknown
            model``, ``missing credentials``, ``unreachable``, ``refused``).
    """
    if transport_for(config) == "direct":
        # The direct transport's own request and checks: no litellm import at start-up.
        from judge.providers.direct import preflight_direct

        return preflight_direct(config, call=call)
    from judge.providers.litellm import preflight_litellm

    return preflight_litellm(config, call=call)
