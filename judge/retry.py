"""Retrying provider errors without a retry storm: backoff with jitter, a per-run budget, a breaker.

* ``backoff_delay``: exponential backoff with "full jitter" (a uniform draw up to the exponential
  bound), so many concurrent items that fail together do not retry in lockstep; a provider's
  ``Retry-After`` is honoured as a floor.
* ``RetryBudget``: a cap on retries for a whole run, so a provider that fails for everyone costs
  at most that many extra calls, not ``items x retries``.
* ``CircuitBreaker``: after ``threshold`` consecutive failures it opens and calls *wait* for
  ``cooldown`` seconds; then one probe call is let through (half-open) and its outcome closes the
  breaker (the waiting calls go on) or re-opens it with a longer cool-down. ``judge.calls.Caller``
  keeps one per (model, base URL), so one failing judge never pauses another. It also remembers
  a provider that refused the credentials (401/403), which is up but cannot grade, so the
  service's ``/readyz`` can say so.

This is the one retry policy: ``judge.calls.Caller`` applies it to every judge call (the retry
loop itself runs on tenacity, with ``backoff_delay`` as its wait).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from core.retry import CircuitBreaker as _Breaker
from core.retry import full_jitter


def backoff_delay(
    attempt: int,
    *,
    base: float = 0.5,
    cap: float = 30.0,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    Full jitter (``core.retry.full_jitter``): uniform in ``[0, min(cap, base * 2**(attempt-1))]``,
    floored at ``retry_after`` when the provider gave one (but never beyond ``cap`` plus that
    floor).
    """
    delay = full_jitter(attempt, base=base, cap=cap, rng=rng)
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
class CircuitBreaker(_Breaker):
    """Pauses calls to a provider that keeps failing, and lets them resume when it recovers.

    The shared machine (``core.retry.CircuitBreaker``): after ``threshold`` consecutive failures
    it opens and calls wait (see ``retry_in``) instead of reaching the provider; after the
    cool-down one probe call is let through (half-open); its success closes the breaker and
    every waiting call goes on, its failure re-opens it with the cool-down doubled (up to
    ``max_cooldown``). An outage is a pause, never a verdict: callers decide how long they wait
    (``open_for``).

    A provider that answers 401/403 is up (the breaker closes) but refuses the credentials: no
    call can succeed until it accepts them again. ``refused_status`` keeps that status until a
    call is answered otherwise.

    Args:
        threshold: Consecutive failures that open the breaker.
        cooldown: Seconds the breaker first stays open before a probe is allowed.
        max_cooldown: Upper bound of the doubled cool-down.
        recheck: Seconds between probes (``claim_probe``) of a provider that refused the
            credentials.
    """

    recheck: float = 30.0
    refused_status: int | None = None
    _refused_at: float = 0.0
    _rechecking: bool = False

    def claim_probe(self) -> bool:
        """Claim a probe call of a provider in trouble, when one is due (one at a time).

        For a caller that makes no judge call of its own (the service's readiness, while no
        traffic comes): only an answer can tell the breaker the provider is back. Due when the
        breaker is open and its cool-down has passed (the half-open probe ``allow`` would let
        through), or when the provider refused the credentials ``recheck`` seconds ago or more.
        The probe's outcome must be recorded (``record_*``, or ``release_probe`` if cancelled).
        """
        with self._lock:
            if self.state != "closed":
                return self._take_probe()
            if (
                self.refused_status is not None
                and not self._rechecking
                and time.monotonic() - self._refused_at >= self.recheck
            ):
                self._rechecking = True
                return True
            return False

    def release_probe(self) -> None:
        """A probe ended without an answer (cancelled): let another call probe."""
        with self._lock:
            self._probing = False
            self._rechecking = False

    def record_success(self) -> None:
        """A call was answered: close the breaker, end the outage and forget a refusal."""
        with self._lock:
            self._answered()
            self.refused_status = None

    def record_refusal(self, status: int) -> None:
        """The provider refused the credentials (``status`` 401 or 403).

        It answered, so an outage ends as on a success; the refusal is kept until a call is
        answered otherwise.
        """
        with self._lock:
            self._answered()
            self.refused_status = status
            self._refused_at = time.monotonic()

    def _answered(self) -> None:
        """Close the breaker and end a re-check (lock held)."""
        super()._answered()
        self._rechecking = False

    def record_failure(self) -> None:
        """A call failed (after its own retries): count it, and open at the threshold."""
        with self._lock:
            self._rechecking = False
            self._failed()

    def _snapshot(self) -> dict[str, object]:
        """The shared machine's state and the refusal kept (lock held)."""
        return {**super()._snapshot(), "refused_status": self.refused_status}
