"""The on-disk cache backend: a diskcache folder (the default).

diskcache is SQLite-backed and safe for several processes sharing one folder on one machine;
replicas on several machines share a Redis server instead (``judge.cache.redis_cache``).

A cache is disposable: a failing read is a miss and a failing write is dropped (counted in
``JudgeCache.errors`` and logged at most once a minute), a database that is damaged when opened is
moved aside (``cache.db.corrupt-<time>-<pid>``) for an empty one, and when even that fails grading
runs uncached. Grading never stops because of the cache.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from judge.cache.base import CacheBase, encode_value

log = logging.getLogger("bonusjudge.cache")

_CULL_EVERY = 1_000
"""Writes between two evictions (entries a writer adds past the size limit before one: a few MB)."""

_CORRUPT_CODES = frozenset({11, 26})
"""SQLite's primary result codes for a damaged file: SQLITE_CORRUPT and SQLITE_NOTADB."""


def _make_private(folder: Path) -> None:
    """Make the cache folder 0700 and diskcache's database files 0600, whatever the umask.

    Cached judge outputs quote the graded answers. diskcache creates its files with the umask's
    mode; the folder's mode keeps other users out of those created later (value files). An
    empty ``cache.db`` is made 0600 before diskcache opens it: SQLite gives -wal/-shm its mode.
    """
    database = folder / "cache.db"
    if not database.exists():
        os.close(os.open(database, os.O_RDWR | os.O_CREAT, 0o600))
    for path, mode in ((folder, 0o700), (database, 0o600),
                       (folder / "cache.db-wal", 0o600), (folder / "cache.db-shm", 0o600)):
        try:
            os.chmod(path, mode)
        except OSError:  # absent, or another user's folder: diskcache reports what matters
            continue


class JudgeCache(CacheBase):
    """A diskcache folder holding judge outputs and metric values as JSON text.

    Args:
        directory: The cache folder (created if missing). None disables caching entirely.
        size_limit: Evict least-recently-stored entries beyond this many bytes.
    """

    def __init__(self, directory: str | Path | None, *, size_limit: int = 4 * 2**30) -> None:
        super().__init__(str(directory) if directory is not None else "(no cache)")
        self.directory = Path(directory) if directory is not None else None
        self.moved_aside: Path | None = None
        """Where a database found damaged when opening was moved, if one was."""
        self._cache: Any = None
        self._size_limit = size_limit
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._cache = self._open()
            except Exception as exc:  # sqlite, permissions, full disk: a cache is disposable
                self._cache = self._recover(exc)
            if self._cache is not None:  # an uncached run has no files of its own to protect
                _make_private(self.directory)

    def _open(self) -> Any:
        """The diskcache database in ``self.directory`` (raises what diskcache raises)."""
        import diskcache

        assert self.directory is not None
        _make_private(self.directory)
        # eviction "least-recently-stored" avoids a write on every read (LRU would). cull_limit=0:
        # diskcache's check for expired and excess entries on every write is a quarter of a
        # write's CPU; ``set`` culls every _CULL_EVERY writes instead.
        return diskcache.Cache(
            str(self.directory),
            size_limit=self._size_limit,
            eviction_policy="least-recently-stored",
            cull_limit=0,
        )

    def _recover(self, exc: Exception) -> Any:
        """A fresh database after ``exc`` stopped the folder opening, or None to run uncached.

        A damaged database is moved aside (kept for a post-mortem, never deleted) and an empty
        one made. Other failures (permissions, a full disk, a file-size limit) are not the file's
        fault, so nothing is moved: grading runs uncached. Never raises.

        Args:
            exc: What opening the folder raised.

        Returns:
            The new diskcache database, or None.
        """
        assert self.directory is not None
        self.errors += 1
        if _is_corrupt(exc):
            try:
                self.moved_aside = _move_aside(self.directory / "cache.db")
                log.warning(
                    "cache database in %s is damaged (%s); moved aside to %s, starting empty",
                    self.directory, exc, self.moved_aside,
                )
                return self._open()
            except Exception as again:  # the folder is read-only, the disk full, ...
                exc = again
                self.errors += 1
        log.warning(
            "cannot open cache folder %s (%s: %s); grading goes on uncached",
            self.directory, type(exc).__name__, exc,
        )
        return None

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
        except Exception as exc:  # a damaged entry or file is a miss, never a crash
            self._failed("read", exc)
            raw = None
        return self._counted(raw)

    def set(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key`` (dropped, and counted, if that fails)."""
        if self._cache is None:
            return
        blob = encode_value(value)
        try:
            self._cache.set(key, blob)
        except Exception as exc:  # a full disk or a damaged file: the result is already paid for
            self._failed("write", exc)
            return
        if self._stored() % _CULL_EVERY == 0:
            try:
                self._cache.cull()  # drop expired entries, then evict down to the size limit
            except Exception as exc:
                self._failed("cull", exc)

    async def aget(self, key: str) -> Any | None:
        """``get`` for the engine's event loop.

        A local SQLite read takes tens of microseconds: cheaper in the loop than a thread hop.
        """
        return self.get(key)

    async def aset(self, key: str, value: Any) -> None:
        """``set`` for the engine's event loop (a local write, done in the loop like ``aget``)."""
        self.set(key, value)

    def writable(self) -> bool:
        """Whether a probe value can be written and read back (readiness check)."""
        if self._cache is None:
            return False
        try:
            self._cache.set("__probe__", "1", expire=60)
            return bool(self._cache.get("__probe__") == "1")
        except Exception as exc:
            self._failed("probe", exc)
            return False

    def volume(self) -> int:
        """Bytes the cache occupies on disk (0 when disabled or unreadable)."""
        if self._cache is None:
            return 0
        try:
            return int(self._cache.volume())
        except Exception as exc:
            self._failed("read", exc)
            return 0

    def __len__(self) -> int:
        """Entries in the folder (0 when disabled or unreadable)."""
        if self._cache is None:
            return 0
        try:
            return len(self._cache)
        except Exception as exc:
            self._failed("read", exc)
            return 0

    def close(self) -> None:
        """Close the underlying database (a failure is counted, never raised)."""
        if self._cache is not None:
            try:
                self._cache.close()
            except Exception as exc:
                self._failed("close", exc)

    async def aclose(self) -> None:
        """``close`` for callers on an event loop."""
        self.close()


def _is_corrupt(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the SQLite file itself is damaged."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sqlite3.DatabaseError):
            code = getattr(seen, "sqlite_errorcode", None)
            if code is not None and code & 0xFF in _CORRUPT_CODES:
                return True
            text = str(seen).lower()
            if "malformed" in text or "not a database" in text:
                return True
        seen = seen.__cause__ or seen.__context__
    return False


def _move_aside(database: Path) -> Path:
    """Rename ``database`` and its -wal/-shm files to ``<name>.corrupt-<UTC time>-<pid>``.

    The pid keeps two processes that find the same damage in the same second from overwriting
    each other's copy. The journal files go along: SQLite would replay a stale -wal into the new
    database.

    Args:
        database: The damaged ``cache.db``.

    Returns:
        The new path of the database.
    """
    suffix = f".corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
    target = database.with_name(database.name + suffix)
    database.rename(target)
    for extra in ("-wal", "-shm"):
        journal = database.with_name(database.name + extra)
        if journal.exists():
            journal.rename(journal.with_name(journal.name + suffix))
    return target
