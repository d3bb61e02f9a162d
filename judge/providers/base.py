"""Providers: the one thin layer that talks to a judge model (the protocol and shared helpers).

A provider does a single thing: send rendered messages and return the judge's answer, either a
validated pydantic object (structured output) or plain text (the faithful mode). It raises
``ProviderError`` for transport and HTTP failures and ``JudgeOutputError`` for unusable answers.
Caching, retries with backoff, the circuit breaker (``judge.calls.Caller``) and concurrency (the
engine) live outside providers (style.md practice 1). ``LiteLLMProvider`` reaches any litellm
model through instructor; ``judge.providers.direct.DirectProvider`` sends the same requests to
OpenAI-compatible endpoints on its own HTTP client, at a fraction of the CPU (``JudgeConfig.
transport`` picks one, ``judge.providers.routing.RoutingProvider`` routes);
``judge.providers.fake.FakeProvider`` is the
scripted stand-in for tests. Both transports map failures with ``provider_error``.

What reaches the wire: OpenAI's API rejects any top-level request field it does not document
(HTTP 400 "Unrecognized request argument supplied: <name>"), and litellm forwards every keyword
it does not know into the request body. So only three kinds of keyword may reach
``litellm.acompletion``: documented request fields (``model``, ``messages``, sampling, and what
instructor adds: ``tools``/``tool_choice`` or ``response_format``), options litellm itself
consumes (``api_base``, ``api_key``, ``timeout``, ``num_retries``, ``extra_body``), and the
caller's ``extra_params``. instructor's own options (``context``, ``max_retries``, ``hooks``) are
named parameters of ``create_with_completion``, which consumes them. The wire contract is pinned
by ``tests/judge/providers/test_wire_contract.py`` against the strict ``standins.OpenAIStandIn``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from bonusjudge_client.backoff import parse_retry_after
from core.errors import JudgeOutputError, ProviderError, SpendingError, UnscoredReason
from judge.config import JudgeConfig

# litellm must not fetch its model cost map from the network at import, nor its table of
# Anthropic beta headers on the first Anthropic call.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")


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
        cached_tokens: Of ``prompt_tokens``, those the provider served from its prompt cache
            (``usage.prompt_tokens_details.cached_tokens``), when it reported them.
    """

    output: BaseModel | str
    raw_text: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    attempts: int = 1
    cached_tokens: int | None = None


class UsageSum:
    """The usage the provider reported over one call's attempts, each part None until reported.

    A transport sums every answer's usage here (re-asks included, each billed), so the
    completion it returns (:meth:`completed`), or the error it raises (:meth:`charged`), carries
    all of it.
    """

    __slots__ = ("cached", "completion", "cost", "prompt")

    def __init__(self) -> None:
        self.prompt: int | None = None
        self.completion: int | None = None
        self.cached: int | None = None
        self.cost: float | None = None

    def count(
        self, prompt: int | None, completion: int | None, cached: int | None, cost: float | None
    ) -> None:
        """Add one answer's usage (None: the provider did not report that part)."""
        if prompt is not None:
            self.prompt = (self.prompt or 0) + prompt
        if completion is not None:
            self.completion = (self.completion or 0) + completion
        if cached is not None:
            self.cached = (self.cached or 0) + cached
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost

    def charged(self, error: SpendingError) -> SpendingError:
        """``error`` carrying the usage of the answers so far."""
        return error.with_usage(self.prompt, self.completion, self.cost, self.cached)

    def completed(
        self, output: BaseModel | str, raw_text: str | None, attempts: int = 1
    ) -> Completion:
        """The call's ``Completion`` of ``output``, carrying the usage of all its answers."""
        return Completion(
            output=output,
            raw_text=raw_text,
            prompt_tokens=self.prompt,
            completion_tokens=self.completion,
            cost_usd=self.cost,
            attempts=attempts,
            cached_tokens=self.cached,
        )


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

    Either of the header's forms, delta-seconds or an HTTP date
    (``bonusjudge_client.backoff.parse_retry_after``, the client's parser too); an unparsable one
    is treated as absent: the backoff then decides.
    """
    return parse_retry_after(value)


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
    ``judge.providers.direct`` for HTTP statuses): 429, 5xx, timeouts and connection failures are
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



def failure_reason_of(*, refused: bool, finish_reason: Any, raw: str | None) -> UnscoredReason:
    """Why an answer that failed validation was unusable, from what its reply says.

    The one classification of both transports (``output_failure_reason`` reads the SDK's
    completion, ``judge.providers.wire.failure_reason`` a raw reply): a refusal, a reply cut off at
    the
    token limit, an empty answer, else an answer that did not validate.
    """
    if refused:
        return "refusal"
    if finish_reason == "length":
        return "truncated_output"
    if raw is None or not raw.strip():
        return "empty_output"
    if not _holds_json(raw):
        return "parse_failure"
    return "validation_failure"


def _holds_json(raw: str) -> bool:
    """Whether ``raw`` holds a JSON value, alone or fenced (```json) or amid prose.

    A reply that is not JSON at all (``{not json``) failed to parse; one that parses but breaks
    the schema failed validation. The two call for different fixes (the structured-output mode
    against the prompt or the model), so they are reported apart.
    """
    text = raw.strip()
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return False
    start = min(starts)
    end = text.rfind("}" if text[start] == "{" else "]")
    try:
        json.loads(text[start : end + 1])
    except ValueError:
        return False
    return True


_UNUSABLE_TEXT: dict[str, str] = {
    "refusal": "the judge refused",
    "truncated_output": "the judge's output was cut off (finish_reason=length)",
    "empty_output": "the judge returned no text",
}
"""What a text-mode answer's ``JudgeOutputError`` says, by reason."""


def usable_text(*, refusal: str | None, finish_reason: Any, raw: str | None) -> str:
    """A text-mode reply's answer, or the ``JudgeOutputError`` saying why it is unusable.

    The one check of both transports' text calls, with ``failure_reason_of``'s classification:
    a refusal (its text kept as ``raw``), a reply cut off at the token limit, an empty answer.

    Args:
        refusal: The refusal the reply carries, if any.
        finish_reason: The reply's finish reason.
        raw: The reply's text.

    Raises:
        JudgeOutputError: the answer is unusable (``reason`` says why).
    """
    reason = failure_reason_of(refused=bool(refusal), finish_reason=finish_reason, raw=raw)
    if reason in ("validation_failure", "parse_failure") and raw is not None:
        return raw  # text: any complete answer is one
    kept = refusal if reason == "refusal" else raw if reason == "truncated_output" else None
    raise JudgeOutputError(_UNUSABLE_TEXT[reason], reason=reason, raw=kept)



PROBE_MESSAGES: tuple[dict[str, str], ...] = ({"role": "user", "content": "Reply with OK."},)
"""The messages of a probe request (the preflight's, and the service's during an outage)."""

PROBE_TIMEOUT = 30.0
"""Most seconds a probe request waits for its answer (less when the judge's timeout is less)."""


@dataclass(frozen=True)
class Preflight:
    """What a preflight found out about a judge, and what its probe request cost.

    The probe is a real request that the provider bills, so it is counted like any judge call:
    the CLI adds it to its bill and to its ``--max-calls``/``--max-cost`` cap.

    Attributes:
        warning: What to show before grading (a busy or failing provider), or None.
        requests: Requests sent (0 when no probe was sent, else 1).
        prompt_tokens: Prompt tokens the provider reported for the probe, when it did.
        completion_tokens: Completion tokens reported for it, likewise.
        cost_usd: The probe's cost, when the model's price is known.
    """

    warning: str | None = None
    requests: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None

    @classmethod
    def of(cls, spent: Completion | SpendingError | None, warning: str | None = None) -> Preflight:
        """The preflight of one probe that ended in ``spent`` (an answer or a failure).

        ``None``: the probe was never answered (nothing reported, one request sent).
        """
        if spent is None:
            return cls(warning=warning, requests=1)
        return cls(
            warning=warning,
            requests=max(1, spent.attempts),
            prompt_tokens=spent.prompt_tokens,
            completion_tokens=spent.completion_tokens,
            cost_usd=spent.cost_usd,
        )


def describe_spend(spent: Preflight) -> str:
    """``1 request sent (12 prompt + 1 completion tokens, $0.000032)``: what a probe cost."""
    tokens = (
        f"{spent.prompt_tokens or 0} prompt + {spent.completion_tokens or 0} completion tokens"
        if spent.prompt_tokens is not None or spent.completion_tokens is not None
        else "no usage reported"
    )
    cost = "" if spent.cost_usd is None else f", ${spent.cost_usd:.6f}"
    plural = "" if spent.requests == 1 else "s"
    return f"{spent.requests} request{plural} sent ({tokens}{cost})"


def probe_config(config: JudgeConfig) -> JudgeConfig:
    """``config`` for a probe request: one token (``max_tokens=1``), at most ``PROBE_TIMEOUT``.

    Built without validation: ``max_tokens`` is at least 16 for judge calls, which need room to
    answer; a probe needs only an answer.
    """
    return config.model_copy(
        update={"max_tokens": 1, "timeout": min(config.timeout, PROBE_TIMEOUT)}
    )


