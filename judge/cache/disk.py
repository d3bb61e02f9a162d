"""The on-disk cache backend: a diskcache folder (the default).

diskcache is SQLite-backed and safe for several processes sharing one folder on one machine;
replicas on several machines share a Redis server instead (``judge.cache.redis_cache``).

A cache is disposable: a failing read is a miss and a failing write is dropped (counted in
``JudgeCache.errors`` and logged at most once a minute), a database that is damaged, found so when
opened or while in use, is moved aside (``cache.db.corrupt-<time>-<pid>``) for an empty one, and
when even that fails grading runs uncached. Grading never stops because of the cache:

* SQLite reads the file with ``read``, never through a memory map (diskcache maps the first
  64 MB by default): a mapped page past the end of a file someone truncated is a SIGBUS that
  kills the process, where a read past the end is an error this module handles.
* For the same reason the database keeps a rollback journal (``journal_mode=delete``), not
  diskcache's write-ahead log: WAL mode always maps ``cache.db-shm`` (its shared index, which
  no setting reads with ``read``), and truncating it under a live process was a SIGBUS too. The
  cost: a reader waits while a write commits (microseconds; one read and one write thread per
  process, below), so under a read-write race about a third of WAL's calls per second (5.8k reads
  and 550 writes a second against 16k and 1.7k, two threads of one process), far more than
  judge calls need. ``synchronous=off``: the journal is not fsynced per write (7.8 ms a write on
  this machine's disk, against 0.3 ms); a process crash still leaves a sound database, and the
  damage an OS crash or power loss may cause is found and moved aside as any other.
* Callers on an event loop (``aget``/``aset``) never run SQLite on it: their calls run on two
  threads of the cache's own (reads, writes), and the loop waits at most ``timeout`` for each.
  Another process holding ``cache.db``'s lock makes a call fail after ``timeout`` (SQLite's busy
  timeout is the same), and then calls skip the folder for ``cooldown`` seconds, as the Redis
  cache skips an unreachable server (``judge.cache.base``): misses and dropped writes, until a
  trial call finds the lock gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from judge.cache.base import DEFAULT_COOLDOWN, CacheBase, encode_value

log = logging.getLogger("bonusjudge.cache")

T = TypeVar("T")

_CULL_EVERY = 1_000
"""Writes between two evictions (entries a writer adds past the size limit before one: a few MB)."""

_CORRUPT_CODES = frozenset({11, 26})
"""SQLite's primary result codes for a damaged file: SQLITE_CORRUPT and SQLITE_NOTADB."""

_JOURNALS = ("-journal", "-wal", "-shm")
"""SQLite's files beside ``cache.db``: the rollback journal, and the write-ahead log and its
shared index that folders made before the rollback journal (diskcache's default) still have."""

_LOCKED_CODES = frozenset({5, 6})
"""SQLite's primary result codes for a lock another connection holds: SQLITE_BUSY, SQLITE_LOCKED."""

LaneName = Literal["read", "write"]
"""Which of the cache's two threads runs a call for an event loop: reads, or writes and evictions.

One thread each: a call takes tens of microseconds, mostly under the GIL, so more threads only
add switches; writers of one process never wait for each other's SQLite lock (four did, in
SQLite's busy-wait, past a second under load); and reads wait only while a write commits."""

_Outcome = tuple[Any, BaseException | None]
"""A call's value, or what it raised."""

_Job = tuple[Callable[[], Any], "asyncio.AbstractEventLoop | None", "asyncio.Future[Any] | None"]
"""A call, and the loop and future its caller waits on (None for a call nobody waits for)."""


class _Lane:
    """One thread that runs calls in the order given, everything queued meanwhile in one go.

    Each result goes back to its event loop in one callback per batch. A thread switch waits for
    the GIL while the loop runs (up to the 5 ms switch interval), so a thread per call, as an
    executor does, cost the warm re-grade twice its time; a batch pays two switches for all its
    calls. A call whose caller stopped waiting (cancelled) before it ran is skipped.

    Args:
        name: The thread's name.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def run(self, call: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``call``; the running loop's future of its value."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((call, loop, future))
        return future

    def post(self, call: Callable[[], object]) -> None:
        """Queue ``call``, for nobody to wait on (it handles its own failure)."""
        self._queue.put((call, None, None))

    def stop(self) -> None:
        """Run what is queued, then end the thread; returns when it has ended."""
        self.end()
        self._thread.join()

    def end(self) -> None:
        """Run what is queued, then end the thread, without waiting for it (a finalizer's)."""
        self._queue.put(None)

    def _work(self) -> None:
        while True:
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    batch.append(self._queue.get_nowait())
            last = None in batch
            self._run_batch(batch)
            # No reference to a job may outlive its batch: a job's call is bound to its cache,
            # and an idle thread holding one would keep a dropped cache (and itself) alive.
            del batch
            if last:
                return

    @staticmethod
    def _run_batch(batch: list[_Job | None]) -> None:
        """Run ``batch``'s calls in order, then settle each loop's callers in one callback."""
        settled: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], _Outcome]]]
        settled = defaultdict(list)
        for job in batch:
            if job is None:
                continue
            call, loop, future = job
            if future is not None and future.cancelled():
                continue  # its caller stopped waiting (a benign race: it may run anyway)
            outcome: _Outcome
            try:
                outcome = (call(), None)
            except Exception as exc:
                outcome = (None, exc)
            if loop is not None and future is not None:
                settled[loop].append((future, outcome))
        for loop, results in settled.items():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_settle, results)


def _settle(results: list[tuple[asyncio.Future[Any], _Outcome]]) -> None:
    """Hand each waiting caller its call's value or error (on the caller's loop)."""
    for future, (value, error) in results:
        if future.done():
            continue  # timed out meanwhile
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


def _make_private(folder: Path) -> None:
    """Make the cache folder 0700 and diskcache's database files 0600, whatever the umask.

    Cached judge outputs quote the graded answers. diskcache creates its files with the umask's
    mode; the folder's mode keeps other users out of those created later (value files). An
    empty ``cache.db`` is made 0600 before diskcache opens it: SQLite gives its journal (and an
    older folder's -wal/-shm) its mode.
    """
    database = folder / "cache.db"
    if not database.exists():
        os.close(os.open(database, os.O_RDWR | os.O_CREAT, 0o600))
    journals = [database.with_name(database.name + extra) for extra in _JOURNALS]
    for path, mode in ((folder, 0o700), (database, 0o600), *((j, 0o600) for j in journals)):
        try:
            os.chmod(path, mode)
        except OSError:  # absent, or another user's folder: diskcache reports what matters
            continue


DISK_TIMEOUT = 5.0
"""Seconds a disk cache call may wait, queueing on its thread included.

Longer than a Redis call's (``DEFAULT_TIMEOUT``): the calls of a burst (64 items finishing at
once) queue on one thread, and on a loaded machine a burst of local writes can take past 1 s,
which would count as a failure and skip the cache for a cool-down. Off the event loop, a wait
delays only the call that waits, never the service; a lock held past it still degrades to
uncached.
"""


class JudgeCache(CacheBase):
    """A diskcache folder holding judge outputs and metric values as JSON text.

    Args:
        directory: The cache folder (created if missing). None disables caching entirely.
        size_limit: Evict least-recently-stored entries beyond this many bytes.
        timeout: Seconds a call may wait (for another process's lock, or on the event loop);
            default ``DISK_TIMEOUT``.
        cooldown: Seconds calls skip the folder after a call ran out of time.
    """

    def __init__(
        self,
        directory: str | Path | None,
        *,
        size_limit: int = 4 * 2**30,
        timeout: float = DISK_TIMEOUT,
        cooldown: float = DEFAULT_COOLDOWN,
    ) -> None:
        super().__init__(
            str(directory) if directory is not None else "(no cache)",
            timeout=timeout, cooldown=cooldown,
        )
        self.directory = Path(directory) if directory is not None else None
        self.moved_aside: Path | None = None
        """Where the last database found damaged (when opening or in use) was moved, if one was."""
        self._cache: Any = None
        self._size_limit = size_limit
        self._opened: tuple[int, int] | None = None  # (device, inode) of the cache.db in use
        self._swap = threading.Lock()  # held while a damaged database is replaced
        self._lanes: dict[LaneName, _Lane] = {}
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
        # write's CPU; ``set`` culls every _CULL_EVERY writes instead. sqlite_mmap_size=0: no
        # memory map (see the module's docstring); diskcache stores it in the database, so every
        # connection, each thread's included, reads without one. journal_mode=delete (a folder in
        # WAL mode is converted when opened) and synchronous=0: no -shm to map, no fsync per
        # write (the module's docstring). timeout: SQLite's busy timeout.
        cache = diskcache.Cache(
            str(self.directory),
            timeout=self.timeout,
            size_limit=self._size_limit,
            eviction_policy="least-recently-stored",
            cull_limit=0,
            sqlite_mmap_size=0,
            sqlite_journal_mode="delete",
            sqlite_synchronous=0,
        )
        self._opened = _identity(self.directory / "cache.db")
        return cache

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

    def _damaged(self, broken: Any, exc: Exception) -> None:
        """Replace ``broken``, the database in use, found damaged: moved aside, an empty one opened.

        Done once per damaged database, by the first call that finds the damage; calls meanwhile
        are misses. When the file at ``cache.db`` is no longer the one opened (another process
        sharing the folder replaced it, or it was removed), nothing is moved: the file there is
        opened. A database that cannot be made leaves grading uncached, as at start. Never raises.

        Args:
            broken: The diskcache database the damage was found in.
            exc: What the call raised.
        """
        assert self.directory is not None
        database = self.directory / "cache.db"
        with self._swap:
            if self._cache is not broken:
                return  # another call found the damage first
            self._cache = None
            _close_quietly(broken)  # this thread's connection; each lane closes its own
            with self._lock:
                lanes = list(self._lanes.values())
            for lane in lanes:
                lane.post(functools.partial(_close_quietly, broken))
            ours = _identity(database) == self._opened
            self._hold_log()  # the line below says it; the calls failing meanwhile are counted
            try:
                if ours:
                    self.moved_aside = _move_aside(database)
                self._cache = self._open()
            except Exception as again:  # the folder is read-only, the disk full, ...
                with self._lock:
                    self.errors += 1
                log.warning(
                    "cache database in %s was damaged while in use (%s), and no new one could be "
                    "made (%s: %s); grading goes on uncached",
                    self.directory, exc, type(again).__name__, again,
                )
                return
        done = f"moved aside to {self.moved_aside}" if ours else "another process replaced it"
        log.warning(
            "cache database in %s was damaged while in use (%s); %s, starting empty",
            self.directory, exc, done,
        )

    @property
    def enabled(self) -> bool:
        """Whether a cache folder is in use."""
        return self._cache is not None

    # -- calls -------------------------------------------------------------------------------------

    def _note(self, exc: BaseException) -> BaseException:
        """``exc``, with a message saying what a timeout on a folder means when it has none."""
        if isinstance(exc, TimeoutError) and not str(exc):
            return TimeoutError(
                f"no answer within {self.timeout:g} s: another process holds cache.db's lock, "
                "or the disk is that slow"
            )
        return exc

    def _call(self, op: Callable[[Any], T], fallback: T) -> T:
        """``op`` on the database in use, in the calling thread (``fallback`` when there is none).

        Raises:
            TimeoutError: another connection held the lock ``op`` needs past ``timeout``.
            Exception: what ``op`` raised otherwise; damage it found has replaced the database.
        """
        cache = self._cache
        if cache is None:
            return fallback
        try:
            return op(cache)
        except Exception as exc:
            if _is_locked(exc):
                raise TimeoutError(
                    f"cache.db stayed locked for {self.timeout:g} s (another process holds it)"
                ) from exc
            if _is_corrupt(exc):
                self._damaged(cache, exc)
            raise

    def _run(
        self, action: str, op: Callable[[Any], T], fallback: T, *, force: bool = False
    ) -> T:
        """``op`` in the calling thread, or ``fallback`` when it fails or the circuit is open.

        Args:
            action: What the call does, for the log line (``read``, ``write``, ...).
            op: The call, given the diskcache database.
            fallback: What a failed or skipped call returns.
            force: Go to the folder even when the circuit is open (the readiness probe).
        """
        with self._attempt(action, force=force) as allowed:
            if allowed:
                return self._call(op, fallback)
        return fallback

    async def _arun(self, lane: LaneName, op: Callable[[Any], T], fallback: T) -> T:
        """``op`` on the cache's ``lane`` thread, or ``fallback`` when it fails or is skipped.

        The event loop waits at most ``timeout`` (queueing included); a call still running then
        ends on its thread within SQLite's busy timeout, and its result is dropped.
        """
        with self._attempt(lane) as allowed:
            if allowed:
                async with asyncio.timeout(self.timeout):
                    return await self._lane(lane).run(functools.partial(self._call, op, fallback))
        return fallback

    def _lane(self, lane: LaneName) -> _Lane:
        """The thread that runs ``lane``'s calls, started on first use (again after ``close``)."""
        with self._lock:
            if lane not in self._lanes:
                started = self._lanes[lane] = _Lane(f"bonusjudge-cache-{lane}")
                # A cache dropped without close (a test's, a caller's) ends its threads when it
                # is collected, instead of leaving two idle threads per cache for the process.
                weakref.finalize(self, started.end)
            return self._lanes[lane]

    def _wrote(self, *, background: bool) -> None:
        """Count a stored entry; every ``_CULL_EVERY`` entries, evict down to the size limit.

        Args:
            background: Evict on the cache's write thread without waiting (callers on an event
                loop: eviction may take longer than a call may wait), else here.
        """
        if self._stored() % _CULL_EVERY:
            return
        if background:
            self._lane("write").post(functools.partial(self._run, "cull", _cull, None))
        else:
            self._run("cull", _cull, None)

    def get(self, key: str) -> Any | None:
        """The JSON value stored under ``key``, or None (counted as a hit or a miss)."""
        if self._cache is None:
            return None
        return self._counted(self._run("read", lambda c: c.get(key), None))

    def set(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key`` (dropped, and counted, if that fails)."""
        if self._cache is None:
            return
        blob = encode_value(value)
        if self._run("write", lambda c: bool(c.set(key, blob)), False):
            self._wrote(background=False)

    async def aget(self, key: str) -> Any | None:
        """``get`` for callers on an event loop.

        Run on the cache's read thread; the loop waits for it at most ``timeout``.
        """
        if self._cache is None:
            return None
        return self._counted(await self._arun("read", lambda c: c.get(key), None))

    async def aset(self, key: str, value: Any) -> None:
        """``set`` for callers on an event loop, as ``aget`` (on the cache's write thread)."""
        if self._cache is None:
            return
        blob = encode_value(value)
        if await self._arun("write", lambda c: bool(c.set(key, blob)), False):
            self._wrote(background=True)

    def writable(self) -> bool:
        """Whether a probe value can be written and read back (readiness check).

        Tried even while the circuit is open, so readiness sees a released lock at once (and its
        answer closes the circuit for every other call).
        """
        if self._cache is None:
            return False

        def probe(cache: Any) -> bool:
            cache.set("__probe__", "1", expire=60)
            return bool(cache.get("__probe__") == "1")

        return self._run("probe", probe, False, force=True)

    def volume(self) -> int:
        """Bytes the cache occupies on disk (0 when disabled or unreadable)."""
        return self._run("read", lambda c: int(c.volume()), 0)

    def __len__(self) -> int:
        """Entries in the folder (0 when disabled or unreadable)."""
        return self._run("read", lambda c: len(c), 0)

    def close(self) -> None:
        """Close the database's connections and stop the cache's threads (never raises).

        Each thread closes its own connection (diskcache keeps one per thread) after the calls
        queued before it, each within ``timeout``; a failure is counted. A later call starts
        them again.
        """
        with self._lock:
            lanes, self._lanes = list(self._lanes.values()), {}
        cache = self._cache
        for lane in lanes:
            if cache is not None:
                lane.post(functools.partial(self._disconnect, cache))
            lane.stop()
        if cache is not None:
            self._disconnect(cache)

    def _disconnect(self, cache: Any) -> None:
        """Close the calling thread's connection to ``cache`` (a failure is counted)."""
        try:
            cache.close()
        except Exception as exc:
            self._failed("close", exc)

    async def aclose(self) -> None:
        """``close`` for callers on an event loop (on a thread: it waits for calls under way)."""
        await asyncio.to_thread(self.close)


def _close_quietly(cache: Any) -> None:
    """Close the calling thread's connection to a damaged database; its failure tells nothing."""
    with contextlib.suppress(Exception):
        cache.close()


def _cull(cache: Any) -> None:
    """Drop expired entries, then evict down to the size limit."""
    cache.cull()


def _identity(database: Path) -> tuple[int, int] | None:
    """The (device, inode) of ``database``, or None when there is none."""
    try:
        stat = database.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _is_locked(exc: BaseException) -> bool:
    """Whether ``exc`` says another connection held a lock past SQLite's busy timeout."""
    import diskcache

    if isinstance(exc, diskcache.Timeout):  # diskcache's word for SQLite's "database is locked"
        return True
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return (code is not None and code & 0xFF in _LOCKED_CODES) or "locked" in str(exc)
    return False


def _is_corrupt(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the SQLite file itself is damaged.

    A database truncated to nothing is a valid empty one to SQLite: its loss shows as diskcache's
    tables missing ("no such table"), which only a damaged or replaced file explains.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sqlite3.DatabaseError):
            code = getattr(seen, "sqlite_errorcode", None)
            if code is not None and code & 0xFF in _CORRUPT_CODES:
                return True
            text = str(seen).lower()
            if "malformed" in text or "not a database" in text or "no such table" in text:
                return True
        seen = seen.__cause__ or seen.__context__
    return False


def _move_aside(database: Path) -> Path:
    """Rename ``database`` and its journal files to ``<name>.corrupt-<UTC time>-<pid>[-n]``.

    The pid keeps two processes that find the same damage in the same second from overwriting
    each other's copy, and ``-n`` a process's own earlier copy from that second (damage found in
    use can recur). The journal files go along: SQLite would replay a stale -wal or a hot
    -journal into the new database.

    Args:
        database: The damaged ``cache.db``.

    Returns:
        The new path of the database.
    """
    stem = f".corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
    suffix, n = stem, 1
    while database.with_name(database.name + suffix).exists():
        n += 1
        suffix = f"{stem}-{n}"
    target = database.with_name(database.name + suffix)
    database.rename(target)
    for extra in _JOURNALS:
        journal = database.with_name(database.name + extra)
        if journal.exists():
            journal.rename(journal.with_name(journal.name + suffix))
    return target
