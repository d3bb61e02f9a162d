"""How much synchronous work one API key may have in the service at once (issue 31.1, 31.5).

A job's size is checked against the key's quotas when it is stored (``api.jobs.policy``); a
synchronous request is held in memory and in the grader's queue while its caller waits, so it is
limited while it is in flight instead; so is a job's upload while it is read and stored (issue
41.3: eight 16 MB uploads at once took a service to 1.39 GB):

* items: the items a key has in flight or waiting on ``/v1/grade`` and ``/v1/grade/batch``
  (``max_sync_items_per_key``); beyond it 429. The fair limiter (``judge.fairness``) decides whose
  item runs next; this decides how long one key's line may grow.
* bytes: the request bodies of the synchronous routes and the job uploads in flight, per key
  (``max_sync_bytes_per_key``, 429) and in all (``max_sync_bytes``, 503). A parsed body costs
  about twice its size in memory (12 batches of 18.9 MB took the service from 125 to 607 MB),
  so it is refused before it is read: from ``Content-Length``, or, for a chunked body, as it
  streams in. An upload is kept on disk and read a batch at a time (``api.jobs.staging``), yet
  its disk, its threads and the store's write lock are shared, so it counts the same.

Both answer with ``Retry-After`` and the error shape, naming the limit and its setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass, field

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import authenticate
from api.errors import (
    QuotaExceeded,
    RefusedWhileReading,
    Unauthorized,
    Unavailable,
    judge_error_response,
)
from api.settings import ServiceSettings

__all__ = [
    "HELD_BODY_PATHS",
    "SYNC_BODY_PATHS",
    "SYNC_RETRY_AFTER",
    "UPLOAD_PATHS",
    "Allowance",
    "SyncBodyLimit",
]

SYNC_RETRY_AFTER = 2
"""Seconds a caller over a synchronous-work limit is told to wait: about one judge round trip
frees a batch's worth of slots."""

SYNC_BODY_PATHS = frozenset(
    {"/v1/grade", "/v1/grade/batch", "/v1/bonus-points", "/v1/metrics", "/v1/mcq"}
)
"""The routes that work on their body while the caller waits."""

UPLOAD_PATHS = frozenset({"/v1/jobs", "/v1/mcq/jobs"})
"""The job submissions: their body is read, validated and stored while the caller waits (and
the job is held to the quotas once stored)."""

HELD_BODY_PATHS = SYNC_BODY_PATHS | UPLOAD_PATHS
"""The routes whose bodies are held in flight (``SyncBodyLimit``)."""

_SYNC_ADVICE = "retry when its earlier requests are answered, or submit a job (POST /v1/jobs)"
_UPLOAD_ADVICE = "retry when its earlier requests are answered"

UNAUTHENTICATED = "(unauthenticated)"
"""The one key every request without a valid API key is counted under (it gets a 401 later)."""


@dataclass(eq=False)
class Allowance:
    """Units of work (items, bytes) each key holds, within a per-key and an overall limit.

    Args:
        unit: What is counted, for the messages (``items``, ``bytes``).
        per_key: Most units one key may hold.
        key_setting: The setting of ``per_key``, named in the 429.
        total: Most units all keys together may hold (None: no overall limit).
        total_setting: The setting of ``total``, named in the 503.
        retry_after: ``Retry-After`` of a refusal, in seconds.
    """

    unit: str
    per_key: int
    key_setting: str
    _: KW_ONLY
    total: int | None = None
    total_setting: str = ""
    retry_after: float = SYNC_RETRY_AFTER
    # What each key holds, and all keys together; counters, not settings.
    _held: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _all: int = field(default=0, init=False, repr=False)

    @classmethod
    def items(cls, settings: ServiceSettings) -> Allowance:
        """Items in flight or waiting on the synchronous grading routes, per key."""
        return cls("items", settings.max_sync_items_per_key, "max_sync_items_per_key")

    @classmethod
    def body_bytes(cls, settings: ServiceSettings) -> Allowance:
        """Bytes of synchronous request bodies in flight, per key and in all."""
        return cls(
            "bytes", settings.max_sync_bytes_per_key, "max_sync_bytes_per_key",
            total=settings.max_sync_bytes, total_setting="max_sync_bytes",
        )

    def held(self, key: str | None = None) -> int:
        """Units ``key`` holds now, or all keys together when ``key`` is None."""
        return self._all if key is None else self._held.get(key, 0)

    def take(self, key: str, amount: int, *, advice: str = _SYNC_ADVICE) -> None:
        """Hold ``amount`` more units for ``key``, or refuse without holding any.

        ``advice`` ends the 429's message: what the caller can do.

        Raises:
            QuotaExceeded: (429) the key would hold more than ``per_key``.
            Unavailable: (503) all keys together would hold more than ``total``.
        """
        held = self._held.get(key, 0)
        if held + amount > self.per_key:
            raise QuotaExceeded(
                f"too much synchronous work in flight: at most {self.per_key} {self.unit} per "
                f"API key (setting {self.key_setting}, BONUSJUDGE_{self.key_setting.upper()}); "
                f"this key has {held} in flight and the request adds {amount}; {advice}",
                retry_after=self.retry_after,
            )
        if self.total is not None and self._all + amount > self.total:
            raise Unavailable(
                f"the service is busy: at most {self.total} {self.unit} of synchronous requests "
                f"in flight (setting {self.total_setting}, "
                f"BONUSJUDGE_{self.total_setting.upper()}); retry shortly",
                retry_after=self.retry_after,
            )
        self._held[key] = held + amount
        self._all += amount

    def give_back(self, key: str, amount: int) -> None:
        """Release ``amount`` units ``key`` holds (a key holding none is forgotten)."""
        left = self._held.get(key, 0) - amount
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)
        self._all -= amount

    @contextmanager
    def holding(self, key: str, amount: int) -> Iterator[None]:
        """Hold ``amount`` units for ``key`` for the body of a ``with`` (refused as ``take``)."""
        self.take(key, amount)
        try:
            yield
        finally:
            self.give_back(key, amount)


class SyncBodyLimit:
    """Holds the bodies of synchronous requests and job uploads against the byte allowance.

    The caller is the key the request presents (as ``api.auth.authenticate`` reads it; without a
    valid one, all such requests share one key). A body is held from the start of the request to
    the end of its answer, since the parsed request (an upload's files) lives that long.

    Args:
        app: The wrapped app.
        settings: The API keys.
        allowance: The bytes held, and their limits (``Allowance.body_bytes(settings)``).
        paths: The routes whose bodies are held (POST only).
    """

    def __init__(
        self,
        app: ASGIApp,
        settings: ServiceSettings,
        allowance: Allowance,
        paths: frozenset[str] = HELD_BODY_PATHS,
    ) -> None:
        self.app = app
        self.settings = settings
        self.allowance = allowance
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        path = _route_path(scope)
        if scope["type"] != "http" or scope["method"] != "POST" or path not in self.paths:
            await self.app(scope, receive, send)
            return
        key = self._caller(scope)
        advice = _UPLOAD_ADVICE if path in UPLOAD_PATHS else _SYNC_ADVICE
        declared = content_length(scope)
        held = 0
        try:
            if declared is not None:
                # Before a byte of the body is read: a refused body never costs memory.
                try:
                    self.allowance.take(key, declared, advice=advice)
                except (QuotaExceeded, Unavailable) as exc:
                    await judge_error_response(exc)(scope, receive, send)
                    return
                held = declared
                await self.app(scope, receive, send)
                return

            async def counted_receive() -> Message:
                nonlocal held
                message = await receive()
                size = len(message.get("body", b"")) if message["type"] == "http.request" else 0
                if size:
                    try:
                        self.allowance.take(key, size, advice=advice)
                    except (QuotaExceeded, Unavailable) as exc:
                        raise RefusedWhileReading(exc) from exc
                    held += size
                return message

            await self.app(scope, counted_receive, send)
        finally:
            if held:
                self.allowance.give_back(key, held)

    def _caller(self, scope: Scope) -> str:
        try:
            return authenticate(Request(scope), self.settings)
        except Unauthorized:
            return UNAUTHENTICATED


def content_length(scope: Scope) -> int | None:
    """The request's declared ``Content-Length``, or None when absent or not a count."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None
            return length if length >= 0 else None
    return None


def _route_path(scope: Scope) -> str:
    """The request's path inside the app (without the prefix of a proxy's ``root_path``)."""
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", ""))
    return path[len(root):] if root and path.startswith(root) else path
