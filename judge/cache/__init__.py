"""The cache of judge calls and metric values: a diskcache folder, or a Redis server replicas share.

Only successful, validated outputs are stored, as JSON text (never pickles), so a cached value
can be read by any later version that keeps the format. Keys (``judge.cache.keys``) cover
everything that changes a value and nothing else, and carry the cache format version.

Two backends hold the same keys and the same JSON text:

* ``JudgeCache`` (``judge.cache.disk``): a diskcache folder, SQLite-backed, safe for several
  processes on one machine. The default (``--cache-dir``, ``BONUSJUDGE_CACHE_DIR``).
* ``RedisCache`` (``judge.cache.redis_cache``): a Redis server, for replicas on several machines
  (``--cache-url``, ``BONUSJUDGE_CACHE_URL``); eviction is the server's ``maxmemory`` policy.

``open_cache(settings)`` picks one; every front end builds its cache with it. Both implement
``Cache``, the interface the engine holds: ``aget``/``aset`` on its event loop, ``get``/``set``
for synchronous callers.

A cache is disposable: a failing read is a miss and a failing write is dropped (counted in
``errors`` and logged at most once a minute); a folder that cannot be opened or a server that
cannot be reached leaves grading uncached, never stopped.
"""

from __future__ import annotations

from judge.cache.base import Cache, CacheStats, decode_value, encode_value
from judge.cache.disk import _CULL_EVERY as _CULL_EVERY
from judge.cache.disk import JudgeCache
from judge.cache.keys import (
    judge_call_key,
    matcher_key,
    metric_key,
    schema_hash,
    stable_hash,
)
from judge.cache.redis_cache import DEFAULT_PREFIX, RedisCache, redact_url
from judge.config import Settings

__all__ = [
    "DEFAULT_PREFIX",
    "Cache",
    "CacheStats",
    "JudgeCache",
    "RedisCache",
    "decode_value",
    "encode_value",
    "judge_call_key",
    "matcher_key",
    "metric_key",
    "open_cache",
    "redact_url",
    "schema_hash",
    "stable_hash",
]


def open_cache(settings: Settings, *, enabled: bool = True) -> Cache:
    """The cache these settings choose: Redis when ``cache_url`` is set, else the folder.

    Args:
        settings: ``cache_url`` (a shared Redis server) or ``cache_dir`` (a folder here).
        enabled: False for a run without a cache (``--no-cache``, ``judge.cache: false``):
            a disabled cache that stores and finds nothing.

    Returns:
        The cache. It never raises on use; an unreachable server or a folder that does not
        open is reported (logged, ``degraded``) and grading goes on uncached.

    Raises:
        ConfigError: ``cache_url`` cannot be read as a Redis URL (``field`` is ``cache_url``).
    """
    if not enabled:
        return JudgeCache(None)
    if settings.cache_url:
        return RedisCache(settings.cache_url)
    return JudgeCache(settings.cache_dir)
