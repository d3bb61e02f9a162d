"""The on-disk cache of judge calls and metric values (diskcache).

A judge call's key covers everything that changes the judge's output (model, base URL, sampling
settings, structured-output mode, rendered messages, rubric id + version + hash, response-schema
hash, cache format version) and nothing else: timeouts, retries and concurrency are left out, so
changing them still hits (style.md practice 5). Only successful, validated outputs are stored, as
JSON (never pickles), so a cached value can be read by any later version that keeps the format.
diskcache is SQLite-backed and safe for several processes sharing one folder.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from judge.config import CACHE_FORMAT_VERSION
from judge.errors import CacheError


def stable_hash(payload: Any) -> str:
    """sha256 hex digest of ``payload`` as canonical JSON (sorted keys, no ASCII escaping)."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@lru_cache(maxsize=256)
def schema_hash(response_model: type[Any] | None) -> str | None:
    """Hash of a pydantic response model's JSON schema (None for plain-text calls).

    Memoised per model class: generating a JSON schema costs ~5 ms and every judge call asks.
    """
    if response_model is None:
        return None
    return stable_hash(response_model.model_json_schema())[:16]


def judge_call_key(
    *,
    output_fields: dict[str, Any],
    messages: list[dict[str, str]],
    rubric: dict[str, Any],
    response_schema: str | None,
) -> str:
    """The cache key of one judge call.

    Args:
        output_fields: ``JudgeConfig.output_fields()``: model, base URL, mode, sampling.
        messages: The rendered messages, exactly as sent.
        rubric: Rubric id, version and content hash.
        response_schema: ``schema_hash`` of the response model, or None for text output.
    """
    return stable_hash(
        {
            "kind": "judge-call",
            "format": CACHE_FORMAT_VERSION,
            "config": output_fields,
            "messages": messages,
            "rubric": rubric,
            "schema": response_schema,
        }
    )


def metric_key(metric: str, params: dict[str, Any], response: str, reference: str) -> str:
    """The cache key of one metric value (e.g. BERTScore with its encoder and layer)."""
    return stable_hash(
        {
            "kind": "metric",
            "format": CACHE_FORMAT_VERSION,
            "metric": metric,
            "params": params,
            "response": response,
            "reference": reference,
        }
    )


@dataclass
class CacheStats:
    """Hits and misses counted since the cache was opened (this process only)."""

    hits: int = 0
    misses: int = 0
    writes: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes}


class JudgeCache:
    """A diskcache folder holding judge outputs and metric values as JSON text.

    Args:
        directory: The cache folder (created if missing). None disables caching entirely.
        size_limit: Evict least-recently-stored entries beyond this many bytes.
    """

    def __init__(self, directory: str | Path | None, *, size_limit: int = 4 * 2**30) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._cache: Any = None
        if self.directory is not None:
            import diskcache

            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                # eviction "least-recently-stored" avoids a write on every read (LRU would).
                self._cache = diskcache.Cache(
                    str(self.directory),
                    size_limit=size_limit,
                    eviction_policy="least-recently-stored",
                )
            except Exception as exc:  # sqlite, permissions, full disk
                raise CacheError(f"cannot open cache folder {self.directory}: {exc}") from exc

    @property
    def enabled(self) -> bool:
        """Whether a cache folder is in use."""
        return self._cache is not None

    def get(self, key: str) -> Any | None:
        """The JSON value stored under ``key``, or None (counted as a hit or a miss)."""
        if self._cache is None:
            return None
        try:
            raw = self._cache.get(key)
        except Exception:
            raw = None  # a damaged entry is a miss, never a crash
        with self._lock:
            if raw is None:
                self.stats.misses += 1
                return None
            self.stats.hits += 1
        try:
            return json.loads(raw)
        except (TypeError, json.JSONDecodeError):
            return None

    def set(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key``."""
        if self._cache is None:
            return
        blob = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        try:
            self._cache.set(key, blob)
        except Exception as exc:
            raise CacheError(f"cannot write to cache folder {self.directory}: {exc}") from exc
        with self._lock:
            self.stats.writes += 1

    def writable(self) -> bool:
        """Whether a probe value can be written and read back (readiness check)."""
        if self._cache is None:
            return False
        try:
            self._cache.set("__probe__", "1", expire=60)
            return bool(self._cache.get("__probe__") == "1")
        except Exception:
            return False

    def volume(self) -> int:
        """Bytes the cache occupies on disk (0 when disabled)."""
        return int(self._cache.volume()) if self._cache is not None else 0

    def __len__(self) -> int:
        return len(self._cache) if self._cache is not None else 0

    def close(self) -> None:
        """Close the underlying database."""
        if self._cache is not None:
            self._cache.close()
