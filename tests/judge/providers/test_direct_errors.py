"""Failures over HTTP: both transports end a failed call with the same ``ProviderError``.

Each case makes the strict stand-in (or a closed port) fail a request the way a provider does,
sends the same call through ``LiteLLMProvider`` and ``DirectProvider`` and compares the error's
reason, retryability, status, ``Retry-After`` and attempt count (the engine's retries and circuit
breaker decide on exactly these). The status table of the direct path alone is in
``tests/judge/providers/test_provider_errors.py``.
"""

from __future__ import annotations

import socket
from typing import Any

import litellm
import pytest

from core.errors import ConfigError, JudgeOutputError, ProviderError
from judge.config import JudgeConfig
from judge.providers.direct import DirectProvider, preflight_direct
from judge.providers.litellm import LiteLLMProvider
from judge.providers.routing import preflight
from judge.verdicts import coverage_model
from standins import FaultPlan, OpenAIStandIn

litellm.suppress_debug_info = True
MESSAGES = [{"role": "user", "content": "Judge."}]
COVERAGE = coverage_model(2)


def fields(error: ProviderError) -> tuple[Any, ...]:
    return (error.reason, error.retryable, error.status, error.retry_after, error.attempts)


async def both(
    base_url: str,
    *,
    mode: str = "tools",
    timeout: float = 30.0,
    extra: dict[str, Any] | None = None,
    key: str | None = None,
) -> list[tuple[Any, ...]]:
    """The error fields of the litellm path, then of the direct path."""
    config = JudgeConfig(
        model="openai/standin", api_base=base_url, mode=mode, timeout=timeout,
        api_key=key,
    )
    out = []
    for provider in (LiteLLMProvider(extra_params=extra), DirectProvider(extra_params=extra)):
        with pytest.raises(ProviderError) as caught:
            await provider.complete(MESSAGES, COVERAGE, config, validation_context={"n_points": 2})
        if isinstance(provider, DirectProvider):
            await provider.aclose()
        out.append(fields(caught.value))
    return out


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        (FaultPlan(sequence=["rate_limit"] * 2, retry_after=2.0),
         ("rate_limited", True, 429, 2.0, 1)),
        (FaultPlan(sequence=["rate_limit_no_header"] * 2), ("rate_limited", True, 429, None, 1)),
        (FaultPlan(sequence=["server_error"] * 2, server_error_statuses=(500,)),
         ("provider_error", True, 500, None, 1)),
        (FaultPlan(sequence=["server_error"] * 2, server_error_statuses=(502,)),
         ("provider_error", True, 502, None, 1)),
        (FaultPlan(sequence=["server_error"] * 2, server_error_statuses=(503,)),
         ("provider_error", True, 503, None, 1)),
        # litellm raises its Timeout for a gateway timeout.
        (FaultPlan(sequence=["server_error"] * 2, server_error_statuses=(504,)),
         ("timeout", True, 504, None, 1)),
        (FaultPlan(sequence=["reset"] * 2), ("provider_error", True, 500, None, 1)),
        # A transport failure on a re-ask: the request before it counts as an attempt.
        (FaultPlan(sequence=["invalid", "server_error"] * 2, server_error_statuses=(500,)),
         ("provider_error", True, 500, None, 2)),
    ],
    ids=["429", "429 no header", "500", "502", "503", "504", "reset", "500 on a re-ask"],
)
async def test_http_failures_map_alike(plan: FaultPlan, expected: tuple[Any, ...]) -> None:
    async with OpenAIStandIn(faults=plan) as srv:
        lite, direct = await both(srv.base_url)
    assert direct == lite == expected


async def test_a_client_timeout_maps_alike() -> None:
    plan = FaultPlan(sequence=["timeout"] * 2, timeout_hold=30.0)
    async with OpenAIStandIn(faults=plan) as srv:
        lite, direct = await both(srv.base_url, timeout=0.5)
    assert direct == lite == ("timeout", True, 408, None, 1)


async def test_a_refused_connection_maps_alike() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    lite, direct = await both(f"http://127.0.0.1:{port}/v1")
    assert direct == lite == ("provider_error", True, 500, None, 1)


async def test_client_errors_map_alike() -> None:
    async with OpenAIStandIn(api_key="sk-right", check_model=True, models=("other",)) as srv:
        unauthorized = await both(srv.base_url, key="sk-wrong")
        not_found = await both(srv.base_url, key="sk-right")
        # An undocumented field: the strict stand-in answers 400, as OpenAI does.
        bad = await both(srv.base_url, key="sk-right", extra={"bogus_field": 1})
    assert unauthorized[0] == unauthorized[1] == ("provider_error", False, 401, None, 1)
    assert not_found[0] == not_found[1] == ("provider_error", False, 404, None, 1)
    assert bad[0] == bad[1] == ("provider_error", False, 400, None, 1)


async def test_an_unreadable_reply_is_a_retryable_provider_error() -> None:
    from aiohttp import web

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="<html>proxy error</html>", content_type="text/html")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", garbage)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    provider = DirectProvider()
    config = JudgeConfig(model="openai/standin", api_base=f"http://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(MESSAGES, COVERAGE, config)
    finally:
        await provider.aclose()
        await runner.cleanup()
    assert (caught.value.reason, caught.value.retryable) == ("provider_error", True)


async def test_output_failures_are_not_provider_errors() -> None:
    async with OpenAIStandIn(faults=FaultPlan(sequence=["truncated"])) as srv:
        provider = DirectProvider()
        config = JudgeConfig(model="openai/standin", api_base=srv.base_url)
        try:
            with pytest.raises(JudgeOutputError) as caught:
                await provider.complete(MESSAGES, COVERAGE, config)
        finally:
            await provider.aclose()
    assert (caught.value.reason, caught.value.attempts) == ("truncated_output", 1)


# -- preflight ------------------------------------------------------------------------------------


def test_preflight_of_a_direct_judge() -> None:
    with OpenAIStandIn(api_key="sk-right") as srv:
        ok = JudgeConfig(model="openai/standin", api_base=srv.base_url, api_key="sk-right")
        checked = preflight(ok)
        assert checked.warning is None
        sent = srv.requests[-1]
        assert sent["max_tokens"] == 1 and sent["model"] == "standin"
        # The probe is billed: what it cost comes back, as the stand-in counted it.
        stats = srv.stats()
        assert checked.requests == 1 == stats.requests
        assert (checked.prompt_tokens, checked.completion_tokens) == (
            stats.prompt_tokens, stats.completion_tokens
        )
        with pytest.raises(ConfigError, match=r"^refused: .* rejected the credentials"):
            preflight(ok.model_copy(update={"api_key": None}))
    with OpenAIStandIn(faults=FaultPlan(sequence=["rate_limit"])) as srv:
        busy = JudgeConfig(model="openai/standin", api_base=srv.base_url)
        assert "rate limiting" in (preflight(busy).warning or "")
    with OpenAIStandIn(faults=FaultPlan(sequence=["server_error"])) as srv:
        failing = JudgeConfig(model="openai/standin", api_base=srv.base_url)
        assert "answered 500" in (preflight(failing).warning or "")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConfigError, match=r"^unreachable: "):
        preflight(JudgeConfig(model="openai/standin", api_base=f"http://127.0.0.1:{port}/v1"))


def test_preflight_without_a_base_url_or_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("HOSTED_VLLM_API_BASE", raising=False)
    with pytest.raises(ConfigError, match=r"^missing credentials for openai/gpt-4o-mini"):
        preflight_direct(JudgeConfig(model="openai/gpt-4o-mini"), call=False)
    with pytest.raises(ConfigError, match="needs a base URL"):
        preflight_direct(JudgeConfig(model="hosted_vllm/qwen"), call=False)
