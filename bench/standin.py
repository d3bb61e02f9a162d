"""The benchmarks' judge: :class:`standins.openai_server.OpenAIStandIn` in its own process.

The stand-in can run in a thread of the measuring process (``with OpenAIStandIn(...)``), but then
its JSON work and schema-instance generation share the measuring process's GIL and are charged
to bonusjudge, which a real provider never is. :class:`StandInProcess` runs the very same server
in a child process (``multiprocessing`` spawn) and proxies :meth:`stats` and :meth:`reset_stats`
over a pipe, so the figures measure our overhead and concurrency, not the stand-in's.

::

    with StandInProcess(latency=0.2) as srv:
        srv.base_url                 # "http://127.0.0.1:PORT/v1"
        srv.stats().max_in_flight

Also a command line (``python -m bench.standin --latency 0.2``) that prints the base URL and
serves until interrupted; it is the stand-in's own CLI.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, Self

from standins.lifecycle import StartStop
from standins.openai_server import OpenAIStandIn, StandInStats
from standins.openai_server import main as _standin_main

__all__ = ["StandInProcess", "main"]

_START_TIMEOUT_S = 60.0
"""How long the child may take to import and bind (the machine may be heavily loaded)."""


def _child(conn: Connection, options: dict[str, Any]) -> None:
    """Run the stand-in in this (child) process and answer commands from the parent."""
    try:
        server = OpenAIStandIn(**options).start()
    except BaseException as exc:  # report any start-up failure to the parent, then exit
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", server.base_url))
    try:
        while True:
            try:
                command = conn.recv()
            except EOFError:  # the parent died: stop serving
                break
            if command == "stats":
                conn.send(("stats", server.stats()))
            elif command == "reset":
                server.reset_stats()
                conn.send(("reset", None))
            elif command == "stop":
                break
            else:
                conn.send(("error", f"unknown command {command!r}"))
    finally:
        server.stop()
        conn.close()


class StandInProcess(StartStop):
    """An OpenAI-compatible stand-in judge in a child process.

    Args:
        latency: Seconds each chat completion takes (the provider's latency).
        **options: Any other :class:`OpenAIStandIn` keyword (``jitter``, ``faults``...);
            ``record_requests`` defaults to 0, since the benchmarks never read request bodies.

    Raises:
        RuntimeError: The child did not start (its error message is included).
    """

    def __init__(self, latency: float = 0.2, **options: Any) -> None:
        self.options: dict[str, Any] = {"latency": latency, "record_requests": 0, **options}
        self._process: Any = None
        self._conn: Connection | None = None
        self._base_url: str | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``http://127.0.0.1:PORT/v1``).

        Raises:
            RuntimeError: The server is not running.
        """
        if self._base_url is None:
            raise RuntimeError("the stand-in process is not running")
        return self._base_url

    @property
    def pid(self) -> int | None:
        """The child's process id (None when not running)."""
        return None if self._process is None else int(self._process.pid)

    def start(self) -> Self:
        """Start the child and wait until the server accepts connections.

        Returns:
            The server itself.

        Raises:
            RuntimeError: Already running, or the child failed to start.
        """
        if self._process is not None:
            raise RuntimeError("the stand-in process is already running")
        context = mp.get_context("spawn")  # no fork: the parent may hold threads and sockets
        parent, child = context.Pipe()
        process = context.Process(
            target=_child, args=(child, self.options), name="bench-standin", daemon=True
        )
        process.start()
        child.close()
        if not parent.poll(_START_TIMEOUT_S):
            process.kill()
            raise RuntimeError(f"the stand-in process did not start in {_START_TIMEOUT_S:g} s")
        try:
            kind, value = parent.recv()
        except EOFError:
            process.join(5)
            raise RuntimeError(
                f"the stand-in process exited during start-up (exit code {process.exitcode}); "
                "a script that starts it must guard its entry with `if __name__ == '__main__':` "
                "(multiprocessing spawn re-imports the main module)"
            ) from None
        if kind != "ready":
            process.join(5)
            raise RuntimeError(f"the stand-in process failed to start: {value}")
        self._process, self._conn, self._base_url = process, parent, str(value)
        return self

    def _ask(self, command: str) -> Any:
        if self._conn is None:
            raise RuntimeError("the stand-in process is not running")
        self._conn.send(command)
        kind, value = self._conn.recv()
        if kind == "error":
            raise RuntimeError(f"stand-in process: {value}")
        return value

    def stats(self) -> StandInStats:
        """A snapshot of the server's counters (requests, most in flight, outcomes)."""
        value = self._ask("stats")
        if not isinstance(value, StandInStats):
            raise RuntimeError(f"stand-in process sent {type(value).__name__}, not stats")
        return value

    def reset_stats(self) -> None:
        """Zero the server's counters."""
        self._ask("reset")

    def stop(self) -> None:
        """Stop the child (no-op when not running)."""
        process, conn = self._process, self._conn
        if process is None:
            return
        try:
            if conn is not None:
                conn.send("stop")
        except (BrokenPipeError, OSError):
            pass  # the child is already gone
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join(5)
        if conn is not None:
            conn.close()
        self._process = self._conn = self._base_url = None


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the stand-in from the command line (``python -m bench.standin --latency 0.2``).

    Args:
        argv: Arguments without the program name; see ``python -m standins.openai_server -h``.

    Returns:
        The process exit status.
    """
    return _standin_main(argv)


if __name__ == "__main__":
    sys.exit(main())
