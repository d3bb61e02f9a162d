"""The stand-in reports cached prompt tokens as a provider with prefix caching does (issue 32.3).

Plain HTTP against the stand-in (no client stack), so each figure is the stand-in's own: off by
default (no ``prompt_tokens_details``), nothing under the minimum, then the longest prefix seen
before, in whole blocks, never past the first text that differs, never more than the prompt.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from core.errors import ConfigError
from standins import OpenAIStandIn
from standins.openai_server import OPENAI_PROMPT_CACHE, main
from standins.openai_server.prompt_cache import PromptCache, char_units, prompt_text

STATIC = "You judge answers. " * 40  # 760 characters: 190 units of 4 characters


def body(static: str, response: str) -> dict[str, Any]:
    """A chat request whose user message is ``static`` then the response."""
    return {
        "model": "standin",
        "messages": [
            {"role": "system", "content": "Judge."},
            {"role": "user", "content": f"{static}\nResponse: {response}"},
        ],
    }


async def usage_of(server: OpenAIStandIn, request: dict[str, Any]) -> dict[str, Any]:
    """The ``usage`` of the stand-in's answer to ``request``."""
    async with httpx.AsyncClient() as client:
        answer = await client.post(f"{server.base_url}/chat/completions", json=request)
    answer.raise_for_status()
    usage: dict[str, Any] = answer.json()["usage"]
    return usage


async def test_off_by_default_usage_has_no_details() -> None:
    async with OpenAIStandIn() as server:
        usage = await usage_of(server, body(STATIC, "a"))
        assert "prompt_tokens_details" not in usage
        assert server.stats().cached_tokens == 0


async def test_the_longest_prefix_seen_before_in_whole_blocks() -> None:
    async with OpenAIStandIn(prompt_cache=(64, 32)) as server:
        first = await usage_of(server, body(STATIC, "first answer"))
        second = await usage_of(server, body(STATIC, "a second answer"))
        other = await usage_of(server, body("Another rubric. " * 50, "first answer"))
        books = server.stats()
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}  # nothing seen yet
    shared = len(char_units(prompt_text(body(STATIC, ""))))  # the units before the response
    cached = second["prompt_tokens_details"]["cached_tokens"]
    # Whole blocks past the minimum, within the common prefix and at most one block short of it.
    assert cached >= 64 and (cached - 64) % 32 == 0 and shared - 32 < cached <= shared
    assert other["prompt_tokens_details"]["cached_tokens"] == 0  # differs from its first line
    assert books.cached_tokens == cached
    assert books.prompt_tokens == first["prompt_tokens"] + second["prompt_tokens"] + (
        other["prompt_tokens"])


async def test_nothing_under_the_minimum_and_never_more_than_the_prompt() -> None:
    async with OpenAIStandIn(prompt_cache=OPENAI_PROMPT_CACHE) as server:
        await usage_of(server, body(STATIC, "a"))
        again = await usage_of(server, body(STATIC, "a"))
    assert again["prompt_tokens_details"] == {"cached_tokens": 0}  # ~200 units < 1,024
    cache = PromptCache(min_tokens=1, block=1)
    request = body(STATIC, "a")
    cache.serve(request, 10)
    assert cache.serve(request, 10) == 10  # capped at the prompt's own tokens


async def test_tool_definitions_come_first() -> None:
    """A change to the tool definitions changes the prefix at its start: nothing is cached."""
    tools = [{"type": "function", "function": {"name": "Judgement", "parameters": {}}}]
    renamed = [{"type": "function", "function": {"name": "Verdict", "parameters": {}}}]
    async with OpenAIStandIn(prompt_cache=(16, 16)) as server:
        await usage_of(server, {**body(STATIC, "a"), "tools": tools})
        same = await usage_of(server, {**body(STATIC, "b"), "tools": tools})
        changed = await usage_of(server, {**body(STATIC, "a"), "tools": renamed})
    assert same["prompt_tokens_details"]["cached_tokens"] > 0
    assert changed["prompt_tokens_details"]["cached_tokens"] == 0


def test_bad_sizes_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must be >= 1"):
        OpenAIStandIn(prompt_cache=(0, 128))
    assert main(["--prompt-cache", "x,y", "--port", "0"]) == 2
