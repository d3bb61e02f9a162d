"""Running an aiohttp application on loopback, in a background thread or on the caller's loop.

:class:`LoopbackServer` is the stand-in's life cycle, kept apart from what it answers: binding
(loopback only, unless allowed), ``with`` (its own event loop in a daemon thread, usable from sync
code and from other loops) and ``async with`` (the caller's running loop), and a prompt shutdown
that releases requests still waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
from typing import Self

from aiohttp import web

from core.errors import ConfigError
from standins.lifecycle import StartStop


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LoopbackServer(StartStop):
    """The life cycle of a small aiohttp server; subclasses provide the application.

    Args:
        host: The address to bind; must be loopback unless ``allow_remote``.
        port: The port to bind; 0 picks a free one.
        allow_remote: Allow binding a non-loopback address.

    Raises:
        ConfigError: If the port is out of range or the host is not loopback.
    """

    def __init__(self, *, host: str, port: int, allow_remote: bool) -> None:
        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be in 0..65535, got {port}", field="port")
        if not allow_remote and not is_loopback(host):
            raise ConfigError(
                f"refusing to bind non-loopback host {host!r} without allow_remote", field="host"
            )
        self.host = host
        self._requested_port = port
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self._thread_done: asyncio.Event | None = None

    def _make_app(self) -> web.Application:
        """The application to serve (the subclass's routes)."""
        raise NotImplementedError

    @property
    def port(self) -> int:
        """The bound port.

        Raises:
            RuntimeError: If the server is not running.
        """
        if self._port is None:
            raise RuntimeError("the stand-in server is not running")
        return self._port

    @property
    def url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:8011``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``.../v1``), for ``api_base``/``base_url``."""
        return f"{self.url}/v1"

    async def _startup(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._requested_port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot bind {self.host}:{self._requested_port}: {exc}", field="port"
            ) from exc
        self._stopping = asyncio.Event()
        # No access log: at concurrency 128 its formatting shows up in benchmarks.
        runner = web.AppRunner(self._make_app(), access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        # A deep backlog so that a burst of hundreds of connections is not refused.
        site = web.SockSite(runner, sock, backlog=2048)
        await site.start()
        self._runner = runner
        self._port = int(sock.getsockname()[1])
        self._loop = asyncio.get_running_loop()

    async def _shutdown(self) -> None:
        if self._stopping is not None:
            # Releases requests held by latency or the timeout fault, so cleanup is quick.
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self._port = None

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up at once when the server shuts down."""
        if seconds <= 0:
            return
        stopping = self._stopping
        if stopping is None or stopping.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), seconds)

    def _refuse_if_running(self) -> None:
        if self._port is not None or self._thread is not None:
            raise RuntimeError("the stand-in server is already running")

    def start(self) -> Self:
        """Start the server in a background thread and wait until it accepts connections.

        Returns:
            The server itself.

        Raises:
            RuntimeError: If it is already running.
            ConfigError: If the port cannot be bound.
        """
        self._refuse_if_running()
        self._started.clear()
        self._startup_error = None
        self._thread = threading.Thread(
            target=self._thread_main, name="openai-standin", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise self._startup_error
        return self

    def _thread_main(self) -> None:
        async def serve() -> None:
            try:
                await self._startup()
            except BaseException as exc:
                self._startup_error = exc
                self._started.set()
                return
            self._thread_done = asyncio.Event()
            self._started.set()
            await self._thread_done.wait()
            await self._shutdown()

        asyncio.run(serve())

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the background server and wait for its thread (no-op if not running).

        Requests still waiting (latency, the ``timeout`` fault) are released and answered at once.

        Args:
            timeout: Seconds to wait for the thread to finish.

        Raises:
            RuntimeError: If the server thread is still running after ``timeout`` seconds.
        """
        thread, loop, done = self._thread, self._loop, self._thread_done
        if thread is None:
            return
        if loop is not None and done is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop may close between check and call
                loop.call_soon_threadsafe(done.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"the stand-in server did not stop within {timeout:g} s")
        self._thread = None
        self._loop = None
        self._thread_done = None

    async def astart(self) -> Self:
        """Start the server on the running event loop (returns and raises as :meth:`start`)."""
        self._refuse_if_running()
        await self._startup()
        return self

    async def aclose(self) -> None:
        """Stop a server started with :meth:`astart` (no-op if not running)."""
        if self._thread is not None:
            # Started in a thread: stopping blocks, so keep the caller's loop responsive.
            await asyncio.to_thread(self.stop)
            return
        await self._shutdown()
        self._loop = None

    async def __aenter__(self) -> Self:
        return await self.astart()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
