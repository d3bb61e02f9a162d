"""Retrying provider errors without a retry storm: backoff with jitter, a per-run budget, a breaker.

* ``backoff_delay``: exponential backoff with "full jitter" (a uniform draw up to the exponential
  bound), so many concurrent items that fail together do not retry in lockstep; a provider's
  ``Retry-After`` is honoured as a floor.
* ``RetryBudget``: a cap on retries for a whole run, so a provider that fails for everyone costs
  at most that many extra calls, not ``items x retries``.
* ``CircuitBreaker``: after ``threshold`` consecutive failures it opens and calls fail fast with
  the reason ``circuit_open`` for ``cooldown`` seconds; then one probe call is let through
  (half-open) and its outcome closes or re-opens the breaker.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field


def backoff_delay(
    attempt: int,
    *,
    base: float = 0.5,
    cap: float = 30.0,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    Full jitter: uniform in ``[0, min(cap, base * 2**(attempt-1))]``, floored at ``retry_after``
    when the provider gave one (but never beyond ``cap`` plus that floor).
    """
    bound = min(cap, base * (2 ** max(0, attempt - 1)))
    delay = (rng or random).uniform(0, bound)
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap))
    return delay


@dataclass
class RetryBudget:
    """How many retries a run may spend in all (thread-safe).

    Args:
        limit: Retries allowed; None means unlimited (per-call limits still apply).
    """

    limit: int | None = None
    spent: int = 0
    refused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self) -> bool:
        """Spend one retry if any is left; False when the budget is exhausted."""
        with self._lock:
            if self.limit is not None and self.spent >= self.limit:
                self.refused += 1
                return False
            self.spent += 1
            return True


@dataclass
class CircuitBreaker:
    """Stops calling a provider that keeps failing, and reports it.

    Args:
        threshold: Consecutive failures that open the breaker.
        cooldown: Seconds the breaker stays open before one probe call is allowed.
    """

    threshold: int = 20
    cooldown: float = 30.0
    state: str = "closed"
    consecutive_failures: int = 0
    opened_count: int = 0
    _opened_at: float = 0.0
    _probing: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def allow(self) -> bool:
        """Whether a call may go ahead now (False while open)."""
        with self._lock:
            if self.state == "closed":
                return True
            if self.state == "open" and time.monotonic() - self._opened_at >= self.cooldown:
                self.state = "half_open"
                self._probing = False
            if self.state == "half_open" and not self._probing:
                self._probing = True
                return True
            return False

    def record_success(self) -> None:
        """A call succeeded: close the breaker."""
        with self._lock:
            self.consecutive_failures = 0
            self.state = "closed"
            self._probing = False

    def record_failure(self) -> None:
        """A call failed (after its own retries): count it, and open at the threshold."""
        with self._lock:
            self.consecutive_failures += 1
            if self.state == "half_open" or (
                self.state == "closed" and self.consecutive_failures >= self.threshold
            ):
                if self.state != "open":
                    self.opened_count += 1
                self.state = "open"
                self._opened_at = time.monotonic()
                self._probing = False

    def snapshot(self) -> dict[str, object]:
        """State for reports and metrics."""
        with self._lock:
            return {
                "state": self.state,
                "consecutive_failures": self.consecutive_failures,
                "opened_count": self.opened_count,
            }
