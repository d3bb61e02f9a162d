"""The one circuit breaker, for the engine and the Redis cache.

``CircuitBreaker``: the closed / open / half-open machine with a doubling cool-down. The engine's
breaker (``judge.retry.CircuitBreaker``) builds on it, and the Redis cache uses one that opens at
the first unreachable answer and never lengthens its cool-down, so a change of policy is made
once.

The backoff formula (``full_jitter``) and the ``Retry-After`` parser (``parse_retry_after``) that
go with it are the light client's, :mod:`bonusjudge_client.backoff`: the engine
(``judge.retry``, ``judge.providers.base``) and the service's client (``bonusjudge_client.retry``)
import them from there.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Literal

Admission = Literal["closed", "probe"]
"""Why a call was let through: the breaker is closed, or it is the half-open probe."""


@dataclass
class CircuitBreaker:
    """Pauses calls to a service that keeps failing, and lets them resume when it recovers.

    After ``threshold`` consecutive failures it opens: calls are held back (see ``retry_in``).
    After the cool-down one probe call is let through (half-open); its success closes the
    breaker, its failure re-opens it with the cool-down doubled (up to ``max_cooldown``), so a
    long outage is probed ever more gently. Thread-safe.

    Args:
        threshold: Consecutive failures that open the breaker.
        cooldown: Seconds the breaker first stays open before a probe is allowed.
        max_cooldown: Upper bound of the doubled cool-down (equal to ``cooldown``: no doubling).
    """

    threshold: int = 20
    cooldown: float = 5.0
    max_cooldown: float = 60.0
    state: str = "closed"
    consecutive_failures: int = 0
    opened_count: int = 0
    _opened_at: float = 0.0
    _outage_started: float | None = None
    _current_cooldown: float = 0.0
    _probing: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def is_open(self) -> bool:
        """Whether calls are held back (or a probe is deciding)."""
        return self.state != "closed"

    def admit(self) -> Admission | None:
        """Why a call may go ahead now, or None while the breaker holds it back."""
        with self._lock:
            if self.state == "closed":
                return "closed"
            return "probe" if self._take_probe() else None

    def allow(self) -> bool:
        """Whether a call may go ahead now (False while open, and while a probe is out)."""
        return self.admit() is not None

    def _take_probe(self) -> bool:
        """An open breaker's half-open probe, if one is due and not out (lock held)."""
        if self.state == "open" and self._remaining() <= 0:
            self.state = "half_open"
            self._probing = False
        if self.state == "half_open" and not self._probing:
            self._probing = True
            return True
        return False

    def retry_in(self) -> float:
        """Seconds until a call may be tried again (0 when closed or a probe is due)."""
        with self._lock:
            if self.state == "closed":
                return 0.0
            if self.state == "half_open":
                # A probe is out: its answer decides; look again soon.
                return 0.0 if not self._probing else min(1.0, self._current_cooldown)
            return max(0.0, self._remaining())

    def open_for(self) -> float:
        """Seconds since the current outage began (0 when the breaker is closed)."""
        with self._lock:
            if self._outage_started is None:
                return 0.0
            return time.monotonic() - self._outage_started

    def _remaining(self) -> float:
        return self._current_cooldown - (time.monotonic() - self._opened_at)

    def release_probe(self) -> None:
        """A probe ended without an answer (cancelled): let another call probe."""
        with self._lock:
            self._probing = False

    def record_success(self) -> None:
        """A call was answered: close the breaker and end the outage."""
        with self._lock:
            self._answered()

    def _answered(self) -> None:
        """Close the breaker (lock held)."""
        self.consecutive_failures = 0
        self.state = "closed"
        self._probing = False
        self._outage_started = None
        self._current_cooldown = 0.0

    def record_failure(self) -> None:
        """A call failed: count it, and open at the threshold (or re-open after a probe)."""
        with self._lock:
            self._failed()

    def _failed(self) -> None:
        """Count a failure (lock held)."""
        self.consecutive_failures += 1
        if self.state == "half_open" or (
            self.state == "closed" and self.consecutive_failures >= self.threshold
        ):
            now = time.monotonic()
            if self.state == "closed":
                self.opened_count += 1
                self._outage_started = now
                self._current_cooldown = self.cooldown
            else:  # a failed probe: wait longer before the next one
                self._current_cooldown = min(self.max_cooldown, 2 * self._current_cooldown)
            self.state = "open"
            self._opened_at = now
            self._probing = False

    def snapshot(self) -> dict[str, object]:
        """State for reports and metrics."""
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> dict[str, object]:
        """``snapshot``'s fields (lock held)."""
        return {
            "state": self.state,
            "consecutive_failures": self.consecutive_failures,
            "opened_count": self.opened_count,
        }
