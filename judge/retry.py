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

from bonusjudge_client.backoff import full_jitter
from core.retry import Admission
from core.retry import CircuitBreaker as _Breaker


def backoff_delay(
    attempt: int,
    *,
    base: float = 0.5,
    cap: float = 30.0,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    Full jitter (``bonusjudge_client.backoff.full_jitter``): uniform in
    ``[0, min(cap, base * 2**(attempt-1))]``, floored at ``retry_after`` when the provider gave
    one (but never beyond ``cap`` plus that floor).
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


PROBE_SOURCE = "(probe)"
"""The source of the service's own probe requests (the one-token preflight request), no caller.

Not a key digest (those are hex), so it never names a caller.
"""


@dataclass
class _Source:
    """One caller's recent record with the provider (lock of the breaker held).

    Attributes:
        streak: Its calls that failed in a row.
        streak_started: When the first of them failed (monotonic).
        answered_at: When a call of it was last answered (monotonic), or None.
        failing: Whether its last call failed.
        isolated: Its own breaker while its calls fail and others' are answered, or None.
    """

    streak: int = 0
    streak_started: float = 0.0
    answered_at: float | None = None
    failing: bool = False
    isolated: _Breaker | None = None


@dataclass
class CircuitBreaker(_Breaker):
    """Pauses calls to a provider that keeps failing, and lets them resume when it recovers.

    The shared machine (``core.retry.CircuitBreaker``): after ``threshold`` consecutive failures
    it opens and calls wait (see ``retry_in``) instead of reaching the provider; after the
    cool-down one probe call is let through (half-open); its success closes the breaker and
    every waiting call goes on, its failure re-opens it with the cool-down doubled (up to
    ``max_cooldown``). An outage is a pause, never a verdict: callers decide how long they wait
    (``open_for``).

    It tells an outage from one caller's failing items. Every record and admission names its
    *source*, the caller the call is made for (the service's API-key digest; None for the one
    caller of the CLI). Failures open the breaker for everyone only when nothing shows the
    provider up: when another source's last call was answered, since the failing source's run
    of failures began or within the last ``window`` seconds, the provider is up and those
    failures follow that source's items (content the provider fails on). Then only that source
    pauses, on a breaker of its own (opened at ``threshold`` failures in a row, probed by its own
    calls, closed by its first answered call), and the others go on. A real outage fails every
    source's calls (or the only active one's) and opens the shared breaker as before; its end
    lifts every source's pause too. While the shared breaker is open, a call of a source none of
    whose calls has failed may probe it at once (the outage may be the only active caller's
    items). The service's own probe requests (``PROBE_SOURCE``) show the provider up only when
    answered after a source's failures began.

    ``answered`` counts every answered call, so a caller can tell whether the provider answered
    other calls between two failures of one (``judge.calls``: such a call stops retrying).

    A provider that answers 401/403 is up (the breaker closes) but refuses the credentials: no
    call can succeed until it accepts them again. ``refused_status`` keeps that status until a
    call is answered otherwise.

    Args:
        threshold: Consecutive failures that open the breaker.
        cooldown: Seconds the breaker first stays open before a probe is allowed.
        max_cooldown: Upper bound of the doubled cool-down.
        recheck: Seconds between probes (``claim_probe``) of a provider that refused the
            credentials.
        window: Seconds another source's answered call keeps showing the provider up.
    """

    recheck: float = 30.0
    window: float = 60.0
    refused_status: int | None = None
    answered: int = 0
    _refused_at: float = 0.0
    _rechecking: bool = False
    _fresh_probe: bool = False
    _fresh_source: str | None = None
    _sources: dict[str | None, _Source] = field(default_factory=dict, repr=False)

    # -- admission -----------------------------------------------------------------------------

    def admit(self, source: str | None = None) -> Admission | None:
        """Why a call of ``source`` may go ahead now, or None while it is held back.

        Held while the shared breaker is open (but for its probe) and while ``source`` is
        paused on its own breaker (but for its own probe, once its cool-down has passed).
        """
        with self._lock:
            own = self._sources.get(source)
            isolated = own.isolated if own is not None else None
            if isolated is not None and isolated.admit() is None:
                return None
            if self.state == "closed":
                return "probe" if isolated is not None else "closed"
            if self._take_probe() or self._take_fresh_probe(source, own):
                return "probe"
            if isolated is not None:
                isolated.release_probe()  # the shared breaker holds it back after all
            return None

    def _take_fresh_probe(self, source: str | None, own: _Source | None) -> bool:
        """An open breaker's probe for a source none of whose calls has failed (lock held).

        The outage may be one caller's items (the only caller active when it opened): a call
        of another caller shows at once whether the provider answers, rather than after the
        cool-down, when the failing caller's own items would take the probe and fail it. Its
        failure re-opens the breaker without lengthening the cool-down.
        """
        if self.state != "open" or self._probing or (own is not None and own.failing):
            return False
        self.state = "half_open"
        self._probing = True
        self._fresh_probe = True
        self._fresh_source = source
        return True

    def probing_for(self, source: str | None) -> bool:
        """Whether a fresh probe of ``source`` is out: its other calls wait for its answer.

        A request of that caller is deciding whether the provider answers; its sibling calls
        (the same item's other judge tasks) wait for it rather than give up at once.
        """
        with self._lock:
            return (
                self.state == "half_open" and self._fresh_probe and self._fresh_source == source
            )

    def _fresh_probe_due(self, source: str | None) -> bool:
        """Whether a call of ``source`` would be let through as a fresh probe now (lock held)."""
        own = self._sources.get(source)
        return self.state == "open" and not self._probing and not (own and own.failing)

    def allow(self, source: str | None = None) -> bool:
        """Whether a call of ``source`` may go ahead now (see ``admit``)."""
        return self.admit(source) is not None

    def holds(self, source: str | None = None) -> bool:
        """Whether calls of ``source`` are paused: an outage, or its own pause."""
        with self._lock:
            own = self._sources.get(source)
            return self.state != "closed" or (own is not None and own.isolated is not None)

    def retry_in(self, source: str | None = None) -> float:
        """Seconds until a call of ``source`` may be tried again (0: now, or once a probe ends)."""
        shared = super().retry_in()
        with self._lock:
            if self._fresh_probe_due(source):
                shared = 0.0
            own = self._sources.get(source)
            isolated = own.isolated if own is not None else None
        return max(shared, isolated.retry_in()) if isolated is not None else shared

    def open_for(self, source: str | None = None) -> float:
        """Seconds since calls of ``source`` were first held back (0 while they are not)."""
        shared = super().open_for()
        with self._lock:
            own = self._sources.get(source)
            isolated = own.isolated if own is not None else None
        return max(shared, isolated.open_for()) if isolated is not None else shared

    def isolated(self) -> list[str | None]:
        """The sources paused on their own breaker now."""
        with self._lock:
            return [key for key, own in self._sources.items() if own.isolated is not None]

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

    def release_probe(self, source: str | None = None) -> None:
        """A probe ended without an answer (cancelled): let another call probe."""
        with self._lock:
            if self._fresh_probe and self.state == "half_open":
                self.state = "open"  # a fresh probe never waited out the cool-down
            self._probing = False
            self._fresh_probe = False
            self._rechecking = False
            own = self._sources.get(source)
            if own is not None and own.isolated is not None:
                own.isolated.release_probe()

    # -- outcomes ------------------------------------------------------------------------------

    def record_success(self, source: str | None = None) -> None:
        """A call of ``source`` was answered: close the breaker, end the outage and a refusal."""
        with self._lock:
            self._answered_by(source)
            self.refused_status = None

    def record_refusal(self, status: int, source: str | None = None) -> None:
        """The provider refused the credentials (``status`` 401 or 403) on a call of ``source``.

        It answered, so an outage ends as on a success; the refusal is kept until a call is
        answered otherwise.
        """
        with self._lock:
            self._answered_by(source)
            self.refused_status = status
            self._refused_at = time.monotonic()

    def record_failure(self, source: str | None = None) -> None:
        """A call of ``source`` failed: an outage, or a failure that follows its own items.

        Counted towards the shared breaker (which opens at the threshold, or re-opens after a
        failed probe) unless another source shows the provider up; then ``source`` alone is
        paused once ``threshold`` of its calls have failed in a row.
        """
        with self._lock:
            self._rechecking = False
            now = time.monotonic()
            own = self._source(source)
            if not own.failing:
                own.streak, own.streak_started = 0, now
            own.streak += 1
            own.failing = True
            if self.state == "half_open" and self._fresh_probe:
                # A fresh source's probe failed: the outage is everyone's; same cool-down.
                self.state, self._probing, self._fresh_probe = "open", False, False
                self.consecutive_failures += 1
                return
            if own.isolated is not None:
                own.isolated.record_failure()  # its own probe failed: a longer pause
                if self.state != "half_open":
                    self.consecutive_failures += 1
                    return
            if self.state == "closed" and self._shows_up(source, own, now):
                self.consecutive_failures += 1
                if own.streak >= self.threshold and own.isolated is None:
                    own.isolated = _Breaker(
                        threshold=1, cooldown=self.cooldown, max_cooldown=self.max_cooldown
                    )
                    own.isolated.record_failure()
                return
            self._failed()

    def _source(self, source: str | None) -> _Source:
        """``source``'s record, made on first use (lock held)."""
        own = self._sources.get(source)
        if own is None:
            own = self._sources[source] = _Source()
        return own

    def _answered_by(self, source: str | None) -> None:
        """A call of ``source`` was answered (lock held)."""
        outage = self.state != "closed"
        self._answered()
        self.answered += 1
        own = self._source(source)
        own.streak, own.failing, own.answered_at, own.isolated = 0, False, time.monotonic(), None
        if outage:
            # The provider is back: whatever paused a source during the outage may have been it.
            for other in self._sources.values():
                other.isolated = None

    def _shows_up(self, source: str | None, own: _Source, now: float) -> bool:
        """Whether another source's calls show the provider up despite ``own``'s failures."""
        for key, other in self._sources.items():
            if key == source or other.failing or other.answered_at is None:
                continue
            if other.isolated is not None:
                continue
            if other.answered_at >= own.streak_started:
                return True
            if key != PROBE_SOURCE and now - other.answered_at <= self.window:
                return True
        return False

    def _answered(self) -> None:
        """Close the breaker and end a re-check (lock held)."""
        super()._answered()
        self._rechecking = False
        self._fresh_probe = False

    def _snapshot(self) -> dict[str, object]:
        """The shared machine's state, the refusal kept and the sources paused (lock held)."""
        paused = sum(1 for own in self._sources.values() if own.isolated is not None)
        return {
            **super()._snapshot(),
            "refused_status": self.refused_status,
            "paused_callers": paused,
        }
