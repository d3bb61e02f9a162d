"""The service's front door and its stop: answers at once, loads the app, stops cleanly.

Importing FastAPI, the engine and the job store takes about a second, and an encoder several
more. ``Launcher`` is a bare ASGI app (no FastAPI, no engine) that uvicorn serves from the first
moment: it answers ``/healthz`` at once, answers ``/readyz`` with 503 and what is still loading,
and meanwhile builds the real app in a worker thread and runs the real app's lifespan on the
event loop. From then on every request goes straight to the real app
(one attribute read and one call per request). A request that arrives while the app loads waits
for it, up to ``hold_seconds``, then gets 503 with ``Retry-After``; it never races the imports.

If building or starting the app fails, ``on_failure`` is told (``api.serve`` stops the server
and reports the error on one line), and every request meanwhile gets 503.

Shutdown is the lifespan's: the real app's shutdown runs (jobs drain, leases are released) once
uvicorn has stopped accepting and its in-flight requests are done. ``begin_stop`` lets the
process tell the real app as soon as a stop signal arrives, so job items wind down while the
last HTTP requests finish, within one grace period; ``abort`` is the second signal's path.

``GracefulServer`` is uvicorn's server with this service's signal handling: the first SIGTERM or
SIGINT stops it within the grace period and the process exits 0; a second one exits at once
(:func:`abort`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from typing import Any

import uvicorn

log = logging.getLogger("bonusjudge.api")

Scope = MutableMapping[str, Any]
"""An ASGI connection scope (Starlette's types, without importing Starlette)."""
Message = MutableMapping[str, Any]
"""An ASGI event."""
Receive = Callable[[], Awaitable[Message]]
"""The ASGI receive callable."""
Send = Callable[[Message], Awaitable[None]]
"""The ASGI send callable."""
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
"""An ASGI application."""

HOLD_SECONDS = 30.0
"""How long a request that arrives while the app loads waits for it before a 503."""

RETRY_AFTER_SECONDS = 2
"""``Retry-After`` of a request refused while loading or stopping."""

ABORT_SECONDS = 5.0
"""How long the immediate exit may spend releasing leases and stopping children."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop the service."""


class _Lifespan:
    """Drives an ASGI app's lifespan protocol from the outside (startup, then shutdown).

    Args:
        app: The app whose lifespan is run.
        state: The lifespan state dict uvicorn gave the launcher (shared, as uvicorn shares it
            with every request's scope).
    """

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self._app = app
        self._state = state
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._replies: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
                 "state": self._state}
        try:
            await self._app(scope, self._inbox.get, self._replies.put)
        finally:
            # An app that returns (or raises) instead of answering still ends the wait.
            await self._replies.put({"type": "lifespan.ended"})

    async def _ask(self, what: str) -> None:
        await self._inbox.put({"type": f"lifespan.{what}"})
        reply = await self._replies.get()
        if reply["type"] == f"lifespan.{what}.failed":
            raise RuntimeError(reply.get("message") or f"the app's {what} failed")
        if reply["type"] == "lifespan.ended" and self._task is not None and self._task.done():
            error = self._task.exception()
            if error is not None:
                raise error

    async def startup(self) -> None:
        """Run the app's startup; raises what it raised (or ``RuntimeError`` if it failed)."""
        self._task = asyncio.create_task(self._run(), name="bonusjudge-app-lifespan")
        try:
            await self._ask("startup")
        except BaseException:
            await asyncio.gather(self._task, return_exceptions=True)
            raise

    async def shutdown(self) -> None:
        """Run the app's shutdown and wait for its lifespan to end."""
        await self._ask("shutdown")
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


class Launcher:
    """An ASGI app that answers health checks at once and serves ``build()``'s app once built.

    Args:
        build: Builds the real app; called once, in a worker thread (it imports and opens what
            the app needs). Its exceptions are reported to ``on_failure``.
        on_failure: Called with the exception when building or starting the app fails (on the
            event loop); the process should stop.
        preload: Started in a daemon thread as soon as the server listens, beside the build:
            the slow loads the app will need anyway (an encoder), so they overlap the build
            instead of following it. Its errors are the app's to report when it loads the same
            thing; here they are only logged.
        hold_seconds: How long a request waits for the app before a 503.
        loading: What building the app loads, for ``/readyz`` (shown as ``loading: ...``).
    """

    def __init__(
        self,
        build: Callable[[], ASGIApp],
        *,
        on_failure: Callable[[BaseException], None] | None = None,
        preload: Callable[[], None] | None = None,
        hold_seconds: float = HOLD_SECONDS,
        loading: str = "the service (FastAPI, the grading engine, the job store)",
    ) -> None:
        self._build = build
        self._on_failure = on_failure
        self._preload = preload
        self.hold_seconds = hold_seconds
        self.app: ASGIApp | None = None
        self.error: BaseException | None = None
        self.phase = f"loading: {loading}"
        self._started = time.monotonic()
        self._ready = asyncio.Event()
        self._gone = asyncio.Event()
        self._stopping = False
        self._loader: asyncio.Task[None] | None = None
        self._lifespan: _Lifespan | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._abort_lock = threading.Lock()

    # -- requests --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection: straight to the app once it is up."""
        app = self.app
        if app is not None:
            await app(scope, receive, send)
            return
        kind = scope["type"]
        if kind == "lifespan":
            await self._serve_lifespan(scope, receive, send)
            return
        if kind != "http":
            if await self._wait_for_app() and self.app is not None:
                await self.app(scope, receive, send)
            return  # a websocket refused before acceptance is closed by the server
        path = scope.get("path", "")
        if path == "/healthz":
            await _json(send, 200, {"status": "ok"})
        elif path == "/readyz":
            await _json(send, 503, self.readiness())
        elif await self._wait_for_app() and self.app is not None:
            await self.app(scope, receive, send)
        else:
            await self._refuse(send)

    def readiness(self) -> dict[str, Any]:
        """The ``/readyz`` body while the app is not serving (the shape of ``Readiness``)."""
        if self.error is not None:
            detail = f"failed to start: {type(self.error).__name__}: {self.error}"[:300]
        elif self._stopping:
            detail = "stopping"
        else:
            detail = f"{self.phase} ({time.monotonic() - self._started:.1f} s so far)"
        return {"ready": False, "checks": {"service": {"ok": False, "detail": detail}},
                "degraded": False}

    async def _wait_for_app(self) -> bool:
        """Wait until the app serves (True) or will not (False), at most ``hold_seconds``."""
        if self._ready.is_set():
            return True
        if self._gone.is_set():
            return False
        ready = asyncio.ensure_future(self._ready.wait())
        gone = asyncio.ensure_future(self._gone.wait())
        try:
            await asyncio.wait({ready, gone}, timeout=self.hold_seconds,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            gone.cancel()
        return self._ready.is_set()

    async def _refuse(self, send: Send) -> None:
        if self.error is not None:
            message = "the service failed to start; see its log"
        elif self._stopping:
            message = "the service is stopping"
        else:
            message = (f"the service is still starting ({self.phase}); GET /readyz answers 200 "
                       "once it serves")
        body = {"error": {"type": "unavailable", "message": message, "field": None}}
        await _json(send, 503, body, headers=[(b"retry-after", str(RETRY_AFTER_SECONDS).encode())])

    # -- life cycle --------------------------------------------------------------------------------

    async def _serve_lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope.setdefault("state", {})
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._loop = asyncio.get_running_loop()
                if self._preload is not None:
                    threading.Thread(target=self._run_preload, name="bonusjudge-preload",
                                     daemon=True).start()
                self._loader = asyncio.create_task(self._load(state), name="bonusjudge-load")
                # Answered before the app exists: uvicorn starts listening now.
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    await self._shutdown()
                except BaseException as exc:  # reported to uvicorn, which logs it
                    await send({"type": "lifespan.shutdown.failed", "message": repr(exc)})
                    raise
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _run_preload(self) -> None:
        assert self._preload is not None
        try:
            self._preload()
        except Exception as exc:  # the app's own warm-up reports it where it matters
            log.warning("preloading failed: %s: %s", type(exc).__name__, exc)

    async def _load(self, state: dict[str, Any]) -> None:
        started = time.monotonic()
        try:
            app = await asyncio.to_thread(self._build)
            if self._stopping:
                return  # stopped while loading: never start what would be stopped at once
            self.phase = "starting: the job worker and the warm-up"
            lifespan = _Lifespan(app, state)
            await lifespan.startup()
            # Out of the collector's reach before the first request (see ``freeze_heap``).
            gc.collect()
            gc.freeze()
            self._lifespan = lifespan
            self.app = app
            self._ready.set()
            log.info("service loaded in %.2f s", time.monotonic() - started)
        except Exception as exc:
            self.error = exc
            self._gone.set()
            log.error("the service failed to start: %s: %s", type(exc).__name__, exc)
            if self._on_failure is not None:
                self._on_failure(exc)

    async def _shutdown(self) -> None:
        self._stopping = True
        if self._loader is not None:
            await self._loader  # the build thread cannot be interrupted; it takes a second
        self._gone.set()
        if self._lifespan is not None:
            await self._lifespan.shutdown()

    def begin_stop(self) -> None:
        """A stop signal arrived: tell the app now (thread-safe; a no-op before it serves).

        The app's ``state.jobs`` (a ``JobManager``), when it has one, stops feeding job items
        at once, so they drain while uvicorn lets the last HTTP requests finish.
        """
        loop, app = self._loop, self.app
        jobs = getattr(getattr(app, "state", None), "jobs", None)
        begin = getattr(jobs, "begin_stop", None)
        if loop is not None and begin is not None and not loop.is_closed():
            loop.call_soon_threadsafe(begin)

    def abort(self) -> None:
        """The immediate exit's last words (any thread): hand back every job lease now.

        Runs the app's ``state.jobs.abandon()``, synchronous and quick; items in flight are lost
        and graded again by whichever process takes the jobs over (results already stored are
        kept, and an item is never stored twice).
        """
        with self._abort_lock:
            jobs = getattr(getattr(self.app, "state", None), "jobs", None)
            abandon = getattr(jobs, "abandon", None)
            if abandon is not None:
                abandon()


class GracefulServer(uvicorn.Server):
    """uvicorn's server with this service's stop: a bounded drain, then exit 0; again: at once.

    uvicorn's own handler re-raises the stop signal once it has shut down, so the process ends
    killed by SIGTERM (no exit status, no ``atexit``: a child process it started lives on) or
    with a ``KeyboardInterrupt``; and it ignores a second SIGTERM. Here a stop signal ends the
    serve loop and the process exits 0 after the drain, and a second one (either) exits at once.

    Args:
        config: The uvicorn configuration (its ``timeout_graceful_shutdown`` is the grace).
        launcher: The app's launcher, told when the stop begins and on the immediate exit.
        grace: The grace period, for the log line.
        on_abort: Called on the immediate exit, after the leases are released (kill children).
    """

    def __init__(
        self, config: uvicorn.Config, *, launcher: Launcher, grace: float,
        on_abort: Sequence[Callable[[], None]] = (),
    ) -> None:
        super().__init__(config)
        self.launcher = launcher
        self.grace = grace
        self.on_abort = tuple(on_abort)
        self.signalled: int | None = None
        self.aborting = False

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Handle SIGINT and SIGTERM while serving; restore the previous handlers after.

        Unlike uvicorn's, nothing is re-raised at the end: a stop by signal is how this service
        normally ends.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: Any) -> None:
        """The signal handler: begin the graceful stop, or, the second time, exit at once."""
        if self.aborting:
            return
        if self.signalled is not None:
            self.aborting = True
            abort(sig, [self.launcher.abort, *self.on_abort])
            return
        self.signalled = sig
        self.should_exit = True
        log.warning(
            "%s: stopping; in-flight requests and job items have %g s to finish (send the "
            "signal again to exit at once)", signal.Signals(sig).name, self.grace,
        )
        self.launcher.begin_stop()


def abort(sig: int, last_words: Sequence[Callable[[], None]]) -> None:
    """Exit the process now with status 128 + ``sig``, after ``last_words`` (bounded).

    Runs them in a new thread: the signal may have interrupted the main thread anywhere (inside
    a database transaction, say), so nothing here may use what the main thread holds. A watchdog
    exits anyway after ``ABORT_SECONDS``.
    """
    status = 128 + sig
    log.warning("%s again: exiting now", signal.Signals(sig).name)

    def run() -> None:
        try:
            for step in last_words:
                try:
                    step()
                except Exception:
                    log.exception("immediate exit: %s failed", getattr(step, "__name__", step))
        finally:
            for handler in logging.getLogger().handlers:
                with contextlib.suppress(Exception):
                    handler.flush()
            os._exit(status)

    watchdog = threading.Timer(ABORT_SECONDS, os._exit, args=(status,))
    watchdog.daemon = True
    watchdog.start()
    threading.Thread(target=run, name="bonusjudge-abort", daemon=True).start()


async def _json(
    send: Send, status: int, body: dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    payload = json.dumps(body).encode()
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()), *(headers or [])],
    })
    await send({"type": "http.response.body", "body": payload})


__all__ = [
    "ABORT_SECONDS", "HOLD_SECONDS", "RETRY_AFTER_SECONDS", "STOP_SIGNALS", "GracefulServer",
    "Launcher", "abort",
]
