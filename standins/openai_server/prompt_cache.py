"""Prompt (prefix) caching as OpenAI reports it, for the stand-in's ``usage``.

OpenAI caches the prompt prefixes it has processed and bills the part of a later prompt that
matches one at its cache-read price, reporting it as ``usage.prompt_tokens_details.
cached_tokens``: nothing under 1,024 tokens, then the longest cached prefix in steps of 128
tokens. :class:`PromptCache` reports the same figure by a documented, deterministic rule:

- A request's prompt is read as one sequence of units: the ``tools`` and ``response_format``
  definitions first (as their compact JSON; OpenAI renders tool definitions ahead of the
  messages), then each message's role and text, in order. The units are the tokenizer's token
  ids when the stand-in counts with one (``tokenizer=``), else 4-character pieces of that text
  (the same scale as the stand-in's ``chars / 4`` token estimate).
- Once a request is answered, its prefixes of ``min_tokens`` units and of every ``block`` units
  more are remembered (by digest).
- ``cached_tokens`` of a request is its longest prefix remembered before it was answered, 0 when
  none (so never a prefix shorter than ``min_tokens``), and never more than its
  ``prompt_tokens``.

A prompt whose static part comes first (rubric, question, reference, points, then the
response) therefore gets that part cached from the second response to the same question on,
once the static part reaches ``min_tokens``; a prompt that puts the response earlier gets
nothing past it. The remembered digests are the provider's state, not the books: resetting the
stand-in's statistics keeps them.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from standins.openai_server.wire import message_text

OPENAI_PROMPT_CACHE = (1024, 128)
"""OpenAI's prompt caching: prefixes from 1,024 tokens, in steps of 128 (``min_tokens, block``)."""

Units = Callable[[str], Sequence[object]]
"""Splits a text into the units prefixes are measured in (token ids, or 4-character pieces)."""


def char_units(text: str) -> list[str]:
    """4-character pieces of ``text``: the units without a tokenizer."""
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def prompt_text(body: Mapping[str, Any]) -> str:
    """The prompt of a request as one text, definitions first (see the module's rule)."""
    parts = [
        json.dumps(body[key], separators=(",", ":"), sort_keys=True)
        for key in ("tools", "response_format")
        if body.get(key)
    ]
    for message in body.get("messages") or []:
        role = message.get("role", "") if isinstance(message, Mapping) else ""
        parts.append(f"<|{role}|>\n{message_text(message)}")
    return "\n".join(parts)


class PromptCache:
    """Which prompt prefixes the stand-in has processed, and how much of a new one they cover.

    Args:
        units: How prompts are split into units (token ids with a tokenizer; else
            :func:`char_units`).
        min_tokens: The shortest prefix cached (OpenAI: 1,024).
        block: The step of cached prefix lengths past ``min_tokens`` (OpenAI: 128).
        max_entries: Digests kept, the least recently used forgotten first (a provider's cache
            evicts too).
    """

    def __init__(
        self,
        units: Units = char_units,
        *,
        min_tokens: int = 1024,
        block: int = 128,
        max_entries: int = 200_000,
    ) -> None:
        if min_tokens < 1 or block < 1 or max_entries < 1:
            raise ValueError("min_tokens, block and max_entries must be >= 1")
        self._units = units
        self.min_tokens = min_tokens
        self.block = block
        self._max_entries = max_entries
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def _boundaries(self, units: Sequence[object]) -> list[tuple[int, bytes]]:
        """(length, digest) of each cacheable prefix of ``units``, shortest first."""
        digest = hashlib.blake2b(digest_size=16)
        found: list[tuple[int, bytes]] = []
        start = 0
        end = self.min_tokens
        while end <= len(units):
            digest.update(repr(units[start:end]).encode("utf-8", "surrogatepass"))
            found.append((end, digest.copy().digest()))
            start, end = end, end + self.block
        return found

    def serve(self, body: Mapping[str, Any], prompt_tokens: int) -> int:
        """``cached_tokens`` of an answered request, then remember its prefixes.

        Called once per answered request (on the server's event loop, so calls never overlap).
        """
        cached = 0
        for length, key in self._boundaries(self._units(prompt_text(body))):
            if key in self._seen:
                cached = length
                self._seen.move_to_end(key)
            else:
                self._seen[key] = None
        while len(self._seen) > self._max_entries:
            self._seen.popitem(last=False)
        return min(cached, prompt_tokens)
