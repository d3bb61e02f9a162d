"""What every cache backend shares: the interface, the value format and the failure bookkeeping.

``Cache`` is the interface the engine holds (``judge.engine.Grader``, ``judge.calls.Caller``,
``judge.metrics.runner.MetricsRunner``): synchronous ``get``/``set`` for synchronous callers and
``aget``/``aset`` that the engine awaits on its event loop. Values are JSON text made by
``encode_value`` and read by ``decode_value`` in every backend, so an entry means the same thing
in a folder and in Redis.

``CacheBase`` holds the counters and the failure rule of every backend: a failing read is a
miss, a failing write is dropped, both are counted in ``errors`` and logged at most once per
``LOG_INTERVAL`` seconds (a broken cache fails every call; one line a minute says so). It also
holds the circuit both backends guard their calls with (``_attempt``): no call waits longer than
``timeout``, and after a call that says the store is unavailable (Redis unreachable or too slow,
a ``cache.db`` another process keeps locked) calls skip the store for ``cooldown`` seconds
(counted in ``skipped``), then one call tries again and an answer closes the circuit. A store
that is down so costs one timeout per cool-down, not one per judge call.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from core.retry import CircuitBreaker

log = logging.getLogger("bonusjudge.cache")

LOG_INTERVAL = 60.0
"""Seconds between two logged cache errors: a broken cache fails every call, one line says so."""

DEFAULT_TIMEOUT = 1.0
"""Seconds a cache operation may take before it counts as failed (and the store unavailable)."""

DEFAULT_COOLDOWN = 5.0
"""Seconds calls skip the store after a failure that says it is unavailable."""

Ticket = Literal["closed", "probe", "forced"]
"""Why a call was let through: the circuit is closed, it is the one trial, or a forced probe."""


def _circuit(cooldown: float) -> CircuitBreaker:
    """Closed (use the store) or open (skip it) for ``cooldown`` s after it was unavailable.

    The shared breaker (``core.retry.CircuitBreaker``) with the cache's settings: it opens at
    the first failure that says the store is unavailable and its cool-down never grows. When the
    cool-down has passed, one call (the probe) is let through while the others still skip; its
    answer closes the circuit, its failure opens it again. Shared by every thread and event loop
    of the cache: they all use the same store.
    """
    return CircuitBreaker(threshold=1, cooldown=cooldown, max_cooldown=cooldown)


def encode_value(value: Any) -> str:
    """The JSON text a value is stored as, in every backend (compact, non-ASCII kept as is)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def decode_value(raw: str | bytes) -> Any | None:
    """The value of stored JSON text, or None when it does not parse (never raises)."""
    try:
        return json.loads(raw)
    except (TypeError, ValueError):  # ValueError: bad JSON, or bytes that are not UTF-8
        return None


@dataclass
class CacheStats:
    """Hits and misses counted since the cache was opened (this process only)."""

    hits: int = 0
    misses: int = 0
    writes: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes}


class Cache(Protocol):
    """The judge-call and metric cache, as the engine and the service use it.

    Two backends implement it: ``judge.cache.JudgeCache`` (a diskcache folder, the default) and
    ``judge.cache.RedisCache`` (a Redis server several replicas share). ``open_cache`` picks one
    from the settings. No method raises: a failing read is a miss, a failing write is dropped.
    """

    stats: CacheStats
    """Hits, misses and writes since the cache was made."""
    errors: int
    """Cache operations that failed since the cache was made (grading went on uncached)."""
    directory: Path | None
    """The cache folder of an on-disk cache; None for a disabled or a Redis cache."""

    @property
    def location(self) -> str:
        """Where the entries live, for messages: the folder, or the URL without its password."""
        ...

    @property
    def enabled(self) -> bool:
        """Whether entries are read and stored at all."""
        ...

    @property
    def degraded(self) -> bool:
        """Whether the cache has failed since it was made."""
        ...

    def get(self, key: str) -> Any | None:
        """The value stored under ``key``, or None (synchronous callers)."""
        ...

    def set(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key`` (synchronous callers)."""
        ...

    async def aget(self, key: str) -> Any | None:
        """The value stored under ``key``, or None (callers on an event loop)."""
        ...

    async def aset(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key`` (callers on an event loop)."""
        ...

    def writable(self) -> bool:
        """Whether a probe value can be written and read back (readiness check)."""
        ...

    def volume(self) -> int:
        """Bytes the cache occupies (0 when disabled or unreadable)."""
        ...

    def __len__(self) -> int:
        """Entries in the cache (0 when disabled or unreadable)."""
        ...

    def close(self) -> None:
        """Release files and connections (a failure is counted, never raised)."""
        ...

    async def aclose(self) -> None:
        """``close`` for callers on an event loop."""
        ...


class CacheBase:
    """Counters and the rate-limited failure log every backend shares.

    Subclasses run each call to the store inside ``_attempt`` (or call ``_failed`` for a failed
    operation themselves), call ``_counted`` for each read, and say in ``_is_outage`` which
    failures mean the store is unavailable.

    Args:
        location: Where the entries live, for messages (never a password).
        timeout: Seconds an operation may take.
        cooldown: Seconds calls skip the store after it was found unavailable.
    """

    directory: Path | None = None

    def __init__(
        self, location: str, *, timeout: float = DEFAULT_TIMEOUT, cooldown: float = DEFAULT_COOLDOWN
    ) -> None:
        self._location = location
        self.stats = CacheStats()
        self.errors = 0
        """Cache opens, reads and writes that failed since it was made (grading went on)."""
        self.timeout = timeout
        """Seconds an operation may take before it counts as failed."""
        self.skipped = 0
        """Calls that skipped the store while its circuit was open (misses, dropped writes)."""
        self._circuit = _circuit(cooldown)
        self._lock = threading.Lock()
        self._next_log = 0.0
        self._unlogged = 0

    @property
    def location(self) -> str:
        """Where the entries live, for messages (never a password)."""
        return self._location

    @property
    def degraded(self) -> bool:
        """Whether the cache has failed since it was made (a cache that did not open included)."""
        return self.errors > 0

    def _failed(self, action: str, exc: BaseException) -> None:
        """Count a failed cache operation and log it, at most once per ``LOG_INTERVAL`` seconds.

        Args:
            action: What failed (``read``, ``write``, ...), for the log line.
            exc: What the operation raised.
        """
        now = time.monotonic()
        with self._lock:
            self.errors += 1
            if now < self._next_log:
                self._unlogged += 1
                return
            unlogged, self._unlogged = self._unlogged, 0
            self._next_log = now + LOG_INTERVAL
        more = f"; {unlogged} more cache error(s) since the last message" if unlogged else ""
        log.warning(
            "cache %s failed in %s (%s: %s); going on uncached%s",
            action, self._location, type(exc).__name__, exc, more,
        )

    def _is_outage(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the store is unavailable (opens the circuit), not a refusal.

        A call that ran out of its time is one; backends add their own (an unreachable server).
        """
        return isinstance(exc, TimeoutError)

    def _note(self, exc: BaseException) -> BaseException:
        """``exc``, with a message when it has none (asyncio's own timeout)."""
        if isinstance(exc, TimeoutError) and not str(exc):
            return TimeoutError(f"no answer within {self.timeout:g} s")
        return exc

    def _skip(self) -> None:
        with self._lock:
            self.skipped += 1

    def _done(self, error: BaseException | None) -> None:
        """Tell the circuit how a call that went to the store ended (``error``, or None: answered).

        Only a failure that says the store is unavailable counts: any other error was an answer.
        """
        if error is not None and self._is_outage(error):
            self._circuit.record_failure()
        else:
            self._circuit.record_success()

    @contextlib.contextmanager
    def _attempt(self, action: str, *, force: bool = False) -> Iterator[bool]:
        """Guard one call: yields whether it may go to the store; its failure is logged, not raised.

        The caller returns its fallback when the call was skipped (False) or failed (the error is
        swallowed here, counted and logged). A cancelled call (``BaseException``) goes on up and
        frees the trial for the next call.

        Args:
            action: What the call does, for the log line (``read``, ``write``, ...).
            force: Go to the store even when the circuit is open (the readiness probe).
        """
        ticket: Ticket | None = "forced" if force else self._circuit.admit()
        if ticket is None:
            self._skip()
            yield False
            return
        try:
            yield True
        except Exception as exc:  # a cache never stops grading
            self._done(exc)
            self._failed(action, self._note(exc))
        except BaseException:
            if ticket == "probe":  # cancelled: the next call may try instead
                self._circuit.release_probe()
            raise
        else:
            self._done(None)

    def _hold_log(self) -> None:
        """Count the next ``LOG_INTERVAL`` seconds of errors into one later line.

        For a failure a backend has just logged in its own words (e.g. at start).
        """
        with self._lock:
            self._next_log = time.monotonic() + LOG_INTERVAL

    def _counted(self, raw: str | bytes | None) -> Any | None:
        """Count a read as a hit or a miss and return its value (None for a miss).

        An entry that does not parse counts as a hit that reads as None, as it always has.
        """
        with self._lock:
            if raw is None:
                self.stats.misses += 1
                return None
            self.stats.hits += 1
        return decode_value(raw)

    def _stored(self) -> int:
        """Count a write; return the number of writes so far."""
        with self._lock:
            self.stats.writes += 1
            return self.stats.writes
