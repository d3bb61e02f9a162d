"""The stand-in's books: counters, the request record and rejection messages, thread-safe.

Requests are answered on the server's event loop while tests read the books from their own
thread, so every read and write holds one lock, and :meth:`Ledger.stats` is a consistent snapshot.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from standins.openai_server.plan import FAULT_KINDS

WireFamily = Literal["openai", "anthropic", "gemini"]
"""The wire a request came in on: OpenAI's chat completions, Anthropic's Messages API or
Gemini's ``generateContent``."""


@dataclass(frozen=True)
class StandInStats:
    """A consistent snapshot of the server's counters.

    Attributes:
        requests: Generation requests received on every wire (including rejected and faulted
            ones): chat completions, Anthropic messages and Gemini ``generateContent`` calls.
        in_flight: Requests being handled at the time of the snapshot.
        max_in_flight: The most requests handled at once since start (or the last reset).
        outcomes: Requests by outcome: ``ok``, each :data:`FaultKind`, ``bad_request`` (a body
            the server rejected with 400: not JSON, malformed, or, when strict, carrying an
            undocumented field) and ``handler_error`` (the handler raised or ran out).
        prompt_tokens: Sum of ``usage.prompt_tokens`` sent.
        completion_tokens: Sum of ``usage.completion_tokens`` sent.
        cached_tokens: Sum of ``usage.prompt_tokens_details.cached_tokens`` sent (0 without
            the prompt cache).
        families: Of ``requests``, how many came in on each wire (:data:`WireFamily`), e.g.
            ``{"openai": 3, "anthropic": 2}``; a wire with no request is absent.

    Token sums are over every wire, each answer's counts read as the wire reports them
    (``input_tokens``/``output_tokens`` from Anthropic, ``promptTokenCount``/
    ``candidatesTokenCount`` from Gemini).
    """

    requests: int
    in_flight: int
    max_in_flight: int
    outcomes: dict[str, int]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    families: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> int:
        """Requests answered normally."""
        return self.outcomes.get("ok", 0)

    def cost(self, model: str) -> float:
        """What these counts cost at ``model``'s prices (litellm's cost map): the provider's bill.

        Cached prompt tokens are priced at the model's cache-read price (its prompt price where
        it has none); ``model`` is the map's name, e.g. ``gpt-4o-mini``.

        Raises:
            KeyError: litellm has no price for ``model``.
        """
        import litellm

        price = litellm.model_cost[model]
        prompt, cached = price["input_cost_per_token"], price.get("cache_read_input_token_cost")
        return float(
            (self.prompt_tokens - self.cached_tokens) * prompt
            + self.cached_tokens * (prompt if cached is None else cached)
            + self.completion_tokens * price["output_cost_per_token"]
        )

    @property
    def faults(self) -> int:
        """Requests that got an injected fault."""
        return sum(count for kind, count in self.outcomes.items() if kind in FAULT_KINDS)


class Ledger:
    """What the stand-in counts and records, for :class:`OpenAIStandIn`'s public accessors.

    Args:
        record_requests: How many of the latest request bodies to keep (0: none).
    """

    def __init__(self, record_requests: int) -> None:
        self._lock = threading.Lock()
        # (wire, body) pairs: the bodies are what tests read; the wire tells them apart.
        self._recorded: deque[tuple[WireFamily, dict[str, Any]]] = deque(
            maxlen=record_requests or None
        )
        self._record = record_requests > 0
        self._handler_errors: list[str] = []
        self._rejections: list[str] = []
        self._reset_counters()

    def _reset_counters(self) -> None:
        self._requests = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._outcomes: dict[str, int] = {}
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._cached_tokens = 0
        self._families: dict[str, int] = {}

    def stats(self) -> StandInStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            return StandInStats(
                requests=self._requests,
                in_flight=self._in_flight,
                max_in_flight=self._max_in_flight,
                outcomes=dict(self._outcomes),
                prompt_tokens=self._prompt_tokens,
                completion_tokens=self._completion_tokens,
                cached_tokens=self._cached_tokens,
                families=dict(self._families),
            )

    def reset_stats(self) -> None:
        """Zero the counters (requests in flight stay counted as in flight)."""
        with self._lock:
            in_flight = self._in_flight
            self._reset_counters()
            self._in_flight = in_flight
            self._max_in_flight = in_flight

    def requests(self) -> list[dict[str, Any]]:
        """The recorded request bodies, oldest first (a copy)."""
        with self._lock:
            return [body for _, body in self._recorded]

    def request_families(self) -> list[WireFamily]:
        """The wire of each recorded request, in the order of :meth:`requests`."""
        with self._lock:
            return [family for family, _ in self._recorded]

    def clear_requests(self) -> None:
        """Forget the recorded request bodies and the rejection messages."""
        with self._lock:
            self._recorded.clear()
            self._rejections.clear()

    def rejections(self) -> list[str]:
        """The messages of the HTTP 400 answers, oldest first (a copy)."""
        with self._lock:
            return list(self._rejections)

    def handler_errors(self) -> list[str]:
        """Messages of the exceptions the handler raised, oldest first (a copy)."""
        with self._lock:
            return list(self._handler_errors)

    @contextmanager
    def handling(self, family: WireFamily = "openai") -> Iterator[None]:
        """Count one generation request on ``family``'s wire, in flight while the block runs."""
        with self._lock:
            self._requests += 1
            self._families[family] = self._families.get(family, 0) + 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def record(self, body: Any, family: WireFamily = "openai") -> None:
        """Keep a request body and its wire (when recording, and when it is a JSON object)."""
        if self._record and isinstance(body, dict):
            with self._lock:
                self._recorded.append((family, body))

    def count(self, outcome: str) -> None:
        """Count one request's outcome (``ok``, a fault kind, ``bad_request``...)."""
        with self._lock:
            self._outcomes[outcome] = self._outcomes.get(outcome, 0) + 1

    def reject(self, message: str) -> None:
        """Note an HTTP 400 answer and its message."""
        with self._lock:
            self._rejections.append(message)
        self.count("bad_request")

    def handler_failed(self, message: str) -> None:
        """Note an exception the handler raised (the request got a 500)."""
        with self._lock:
            self._handler_errors.append(message)
        self.count("handler_error")

    def add_tokens(self, prompt: int, completion: int, cached: int = 0) -> None:
        """Add one answer's ``usage`` to the token totals (``cached``: of ``prompt``)."""
        with self._lock:
            self._prompt_tokens += prompt
            self._completion_tokens += completion
            self._cached_tokens += cached
