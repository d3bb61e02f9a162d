"""The shared cache backend: a Redis server that several ``bonusjudge serve`` replicas share.

Entries are the same as on disk: the key is ``judge_call_key`` / ``metric_key`` (which carry the
cache format version) behind a prefix (``bonusjudge:`` by default, so a shared server can hold
other data), the value the same JSON text (``encode_value``), stored as UTF-8. Nothing expires:
eviction is the server's own ``maxmemory`` policy (we recommend ``allkeys-lru``; with the default
``noeviction`` a full server refuses writes, which are then dropped and counted).

The engine awaits ``aget``/``aset`` on redis-py's asyncio client. A ``redis.asyncio`` client and
its connection pool belong to the event loop they were first used on (its connections are that
loop's streams, its lock that loop's lock), and the engine runs loops in several places: the
service's one loop, ``asyncio.run`` once per batch in the calibration runner, loops in threads. So
each event loop gets a client of its own, made on first use, with a pool of at most
``_POOL_SIZE`` connections (more calls at once wait for one), and a small keeper task on that
loop closes it when the loop's runner cancels the loop's tasks at its end (``asyncio.run``,
``asyncio.Runner``, uvicorn and pytest-asyncio all do), or when ``close``/``aclose`` is called.
(A loop closed by hand without cancelling its tasks leaves its client to the garbage collector.)
Synchronous callers (``get``/``set``, the readiness probe, ``len``, ``volume``) use one
thread-safe synchronous client.

Failures are those of the disk cache: Redis down or too slow is a miss or a dropped write,
counted in ``errors`` and logged at most once a minute; grading goes on and nothing raises. No
call waits longer than ``timeout`` (default 1 s; the URL's ``socket_timeout`` parameter sets it):
it bounds connecting and each answer, and on the event loop the whole operation. After a
failure that says the server is unreachable (refused, reset, timed out) the circuit every backend
shares (``judge.cache.base``) opens: for ``cooldown`` seconds (default 5) calls skip Redis at
once (counted in ``skipped``), then one call tries again, and an answer closes the circuit. A
dead Redis so costs one timeout per cooldown, not one per judge call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from core.errors import ConfigError
from judge.cache.base import DEFAULT_COOLDOWN, DEFAULT_TIMEOUT, CacheBase, encode_value

if TYPE_CHECKING:
    import redis
    import redis.asyncio

log = logging.getLogger("bonusjudge.cache")

T = TypeVar("T")

DEFAULT_PREFIX = "bonusjudge:"
"""What every key of ours starts with on a shared server."""

_PROBE = "__probe__"
"""The readiness probe's key (behind the prefix; expires after a minute; not an entry)."""

_SCAN_BATCH = 1_000
"""Keys per SCAN step when counting entries (SCAN, never KEYS: it would block the server)."""

_POOL_SIZE = 64
"""Connections per event loop. More concurrent calls wait for one (a call takes ~0.1 ms):
redis-py's default pool instead fails the 101st call at once."""

@dataclass
class _LoopClient:
    """The asyncio client of one event loop and the task that closes it with the loop."""

    client: redis.asyncio.Redis
    keeper: asyncio.Task[None]


def redact_url(url: str) -> str:
    """``url`` without its password (in the user part or a ``password`` query parameter)."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            user, host = netloc.rsplit("@", 1)
            name, has_password, _ = user.partition(":")
            netloc = f"{name}:***@{host}" if has_password else f"{name}@{host}"
        query = urllib.parse.urlencode(
            [(k, "***" if k == "password" else v)
             for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)],
            safe="*",
        )
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        return f"{url.split('://', 1)[0]}://(unparsable URL)"


def _timeout_of(url: str) -> float | None:
    """The ``socket_timeout`` query parameter of ``url`` in seconds, if it has one.

    Raises:
        ConfigError: it is not a positive number.
    """
    try:
        values = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("socket_timeout")
    except ValueError:  # not a URL at all: redis-py's reading of it says why
        return None
    if not values:
        return None
    try:
        seconds = float(values[-1])
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ConfigError(
            f"invalid setting cache_url: socket_timeout must be a positive number of seconds "
            f"(got {values[-1]!r})",
            field="cache_url",
        )
    return seconds


def _glob_escape(text: str) -> str:
    """``text`` with Redis glob metacharacters escaped, for a literal prefix in ``MATCH``."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisCache(CacheBase):
    """Judge outputs and metric values in a Redis server, as JSON text under prefixed keys.

    Args:
        url: ``redis://[user:password@]host:port/db``, ``rediss://...`` (TLS) or
            ``unix:///path/to/socket?db=N``, as redis-py reads it.
        prefix: What every key starts with (keep it apart from other data on the server).
        timeout: Seconds an operation may take (default 1, or the URL's ``socket_timeout``).
        cooldown: Seconds calls skip Redis after it was found unreachable.
        check: Ping the server now, so an unreachable one is reported at start.

    Raises:
        ConfigError: the URL cannot be read (``field`` is ``cache_url``).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        timeout: float | None = None,
        cooldown: float = DEFAULT_COOLDOWN,
        check: bool = True,
    ) -> None:
        if not prefix:
            raise ConfigError("the Redis key prefix must not be empty", field="prefix")
        super().__init__(
            redact_url(url), timeout=timeout or _timeout_of(url) or DEFAULT_TIMEOUT,
            cooldown=cooldown,
        )
        import redis
        import redis.asyncio.retry
        import redis.backoff
        import redis.retry

        self.prefix = prefix
        self._url = url
        self._probe_key = prefix + _PROBE
        self._pattern = _glob_escape(prefix) + "*"
        # One retry, only for a connection found broken (the server restarted, an idle
        # connection was dropped): the next connection is a fresh one. A timeout is not retried,
        # so no call waits more than one timeout for an answer.
        common: dict[str, Any] = {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
        }
        retry_on = (redis.exceptions.ConnectionError,)
        self._async_options = {
            **common,
            "retry": redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 1, retry_on),
        }
        try:
            self._sync: redis.Redis = redis.Redis.from_url(
                url, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 1, retry_on), **common
            )
        except (ValueError, TypeError) as exc:  # redis-py's reading of the URL
            raise ConfigError(
                f"invalid setting cache_url: {exc} ({self.location})", field="cache_url"
            ) from exc
        self._loops: dict[asyncio.AbstractEventLoop, _LoopClient] = {}
        self._loops_lock = threading.Lock()
        if check:
            self._check_at_start()

    # -- state -----------------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Always True: an unreachable server is tried again every ``cooldown`` seconds."""
        return True

    @property
    def reachable(self) -> bool:
        """Whether the last attempt reached the server (False while the circuit is open)."""
        return not self._circuit.is_open

    def _check_at_start(self) -> None:
        """Ping the server once; an unreachable one is logged and counted, never raised.

        Raises:
            ConfigError: (``cache_url``) the server answered but refused the credentials: unlike
                an outage, that never mends by itself, and grading on uncached would pay for
                every judge call again, so it stops start-up.
        """
        import redis.exceptions

        try:
            self._sync.ping()
        except (redis.exceptions.AuthenticationError, redis.exceptions.NoPermissionError) as exc:
            raise ConfigError(
                f"invalid setting cache_url: the Redis server at {self.location} refused the "
                f"credentials ({type(exc).__name__}: {exc}); fix the user or password in the URL",
                field="cache_url",
            ) from exc
        except Exception as exc:
            self._done(exc)
            with self._lock:
                self.errors += 1
            self._hold_log()
            log.warning(
                "cannot reach the Redis cache at %s (%s: %s); grading goes on uncached and "
                "tries it again every %g s",
                self.location, type(exc).__name__, exc, self._circuit.cooldown,
            )
        else:
            self._done(None)

    def _key(self, key: str) -> str:
        return self.prefix + key

    # -- calls -------------------------------------------------------------------------------------

    def _is_outage(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the server is unreachable or too slow (as opposed to a refusal).

        A refused command (e.g. OOM under ``noeviction``) means the server answered: the circuit
        stays closed, and the next call tries again.
        """
        import redis.exceptions

        if isinstance(exc, redis.exceptions.MaxConnectionsError):
            return False  # our own pool is busy (a ConnectionError subclass): the server is fine
        return isinstance(
            exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError,
                  TimeoutError)
        )

    def _run(
        self, action: str, op: Callable[[redis.Redis], T], fallback: T, *, force: bool = False
    ) -> T:
        """``op`` on the synchronous client, or ``fallback`` when it fails or the circuit is open.

        Args:
            action: What the call does, for the log line (``read``, ``write``, ...).
            op: The call.
            fallback: What a failed or skipped call returns.
            force: Go to Redis even when the circuit is open (the readiness probe).
        """
        with self._attempt(action, force=force) as allowed:
            if allowed:
                return op(self._sync)
        return fallback

    async def _arun(
        self, action: str, op: Callable[[redis.asyncio.Redis], Awaitable[T]], fallback: T
    ) -> T:
        """``op`` on this event loop's client, or ``fallback`` when it fails or is skipped.

        The whole operation (taking a connection, connecting, the answer) is bounded by
        ``timeout``, so a server that hangs delays a call by at most that.
        """
        with self._attempt(action) as allowed:
            if allowed:
                async with asyncio.timeout(self.timeout):
                    return await op(self._client())
        return fallback

    def get(self, key: str) -> Any | None:
        """The JSON value stored under ``key``, or None (counted as a hit or a miss)."""
        return self._counted(self._run("read", lambda r: r.get(self._key(key)), None))

    def set(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key`` (dropped, and counted, if that fails)."""
        blob = encode_value(value).encode("utf-8")
        if self._run("write", lambda r: bool(r.set(self._key(key), blob)), False):
            self._stored()

    async def aget(self, key: str) -> Any | None:
        """``get`` on the running event loop's client."""
        return self._counted(await self._arun("read", lambda r: r.get(self._key(key)), None))

    async def aset(self, key: str, value: Any) -> None:
        """``set`` on the running event loop's client."""
        blob = encode_value(value).encode("utf-8")

        async def store(r: redis.asyncio.Redis) -> bool:
            return bool(await r.set(self._key(key), blob))

        if await self._arun("write", store, False):
            self._stored()

    def writable(self) -> bool:
        """Whether a probe value can be written and read back (readiness check).

        Tried even while the circuit is open, so readiness sees a recovered server at once
        (and its answer closes the circuit for every other call).
        """

        def probe(r: redis.Redis) -> bool:
            r.set(self._probe_key, b"1", ex=60)
            return bool(r.get(self._probe_key) == b"1")

        return self._run("probe", probe, False, force=True)

    def volume(self) -> int:
        """Bytes of memory the Redis server uses (``INFO memory``'s ``used_memory``).

        The whole server's: on a server that holds other data too, ours are a part of it.
        Counting per key would take one command per entry. 0 when unreachable.
        """
        return self._run("read", lambda r: int(r.info("memory")["used_memory"]), 0)

    def __len__(self) -> int:
        """Entries under our prefix (SCAN over the server's keys; 0 when unreachable)."""

        def count(r: redis.Redis) -> int:
            keys = r.scan_iter(match=self._pattern, count=_SCAN_BATCH)
            return sum(1 for key in keys if key != self._probe_key.encode("utf-8"))

        return self._run("read", count, 0)

    # -- one client per event loop ---------------------------------------------------------------

    def _client(self) -> redis.asyncio.Redis:
        """The running event loop's client, made (with its keeper task) on first use."""
        loop = asyncio.get_running_loop()
        with self._loops_lock:
            entry = self._loops.get(loop)
            if entry is not None:
                return entry.client
            # Loops that ended without cancelling their tasks (a hand-run loop) leave their
            # client behind: forget it; its sockets close when it is collected.
            for old in [old for old in self._loops if old.is_closed()]:
                del self._loops[old]
            import redis.asyncio

            # A blocking pool: past _POOL_SIZE calls in flight, a call waits for a connection
            # (within its timeout) rather than failing.
            pool = redis.asyncio.BlockingConnectionPool.from_url(
                self._url, max_connections=_POOL_SIZE, timeout=self.timeout,
                **self._async_options,
            )
            client = redis.asyncio.Redis.from_pool(pool)  # closing the client closes the pool
            keeper = loop.create_task(self._keep(loop, client), name="bonusjudge-redis-cache")
            self._loops[loop] = _LoopClient(client, keeper)
            return client

    async def _keep(self, loop: asyncio.AbstractEventLoop, client: redis.asyncio.Redis) -> None:
        """Wait until cancelled (the loop's end, or ``close``), then close ``client``."""
        try:
            await loop.create_future()
        finally:
            with self._loops_lock:
                entry = self._loops.get(loop)
                if entry is not None and entry.client is client:
                    del self._loops[loop]
            try:
                async with asyncio.timeout(self.timeout):
                    await client.aclose()
            except Exception as exc:
                log.debug("closing a Redis cache client failed: %s: %s", type(exc).__name__, exc)

    def _release(self, loop: asyncio.AbstractEventLoop, entry: _LoopClient) -> None:
        """Have ``entry``'s keeper close its client on its own loop."""
        if loop.is_closed():
            return  # its sockets close when it is collected
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            entry.keeper.cancel()
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(entry.keeper.cancel)

    def _take_clients(self) -> list[tuple[asyncio.AbstractEventLoop, _LoopClient]]:
        with self._loops_lock:
            entries = list(self._loops.items())
            self._loops.clear()
        return entries

    def close(self) -> None:
        """Close every connection: the synchronous client's now, each loop's on its loop.

        The cache stays usable: a later call opens a connection again.
        """
        for loop, entry in self._take_clients():
            self._release(loop, entry)
        try:
            self._sync.close()
        except Exception as exc:
            self._failed("close", exc)

    async def aclose(self) -> None:
        """``close``, waiting until the running loop's connections are closed."""
        loop = asyncio.get_running_loop()
        mine = []
        for other, entry in self._take_clients():
            if other is loop:
                entry.keeper.cancel()
                mine.append(entry.keeper)
            else:
                self._release(other, entry)
        if mine:
            await asyncio.wait(mine)
        try:
            self._sync.close()
        except Exception as exc:
            self._failed("close", exc)
