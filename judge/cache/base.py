"""What every cache backend shares: the interface, the value format and the failure bookkeeping.

``Cache`` is the interface the engine holds (``judge.engine.Grader``, ``judge.calls.Caller``,
``judge.metrics.runner.MetricsRunner``): synchronous ``get``/``set`` for synchronous callers and
``aget``/``aset`` that the engine awaits on its event loop. Values are JSON text made by
``encode_value`` and read by ``decode_value`` in every backend, so an entry means the same thing
in a folder and in Redis.

``CacheBase`` holds the counters and the failure rule of every backend: a failing read is a
miss, a failing write is dropped, both are counted in ``errors`` and logged at most once per
``LOG_INTERVAL`` seconds (a broken cache fails every call; one line a minute says so).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("bonusjudge.cache")

LOG_INTERVAL = 60.0
"""Seconds between two logged cache errors: a broken cache fails every call, one line says so."""


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

    Subclasses set ``location`` and call ``_failed`` for each failed operation and ``_counted``
    for each read.
    """

    directory: Path | None = None

    def __init__(self, location: str) -> None:
        self._location = location
        self.stats = CacheStats()
        self.errors = 0
        """Cache opens, reads and writes that failed since it was made (grading went on)."""
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
