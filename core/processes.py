"""Child processes: a free loopback port, waiting until one answers, another checkout's code.

Used by the local llama.cpp launcher (:mod:`judge.providers.local_llm`), the stand-in servers
(:mod:`standins`), the benchmarks and the tests: one copy of each, in the leaf package, so
production code never imports a test launcher for them.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx

__all__ = ["checkout_pythonpath", "free_port", "wait_until_answers"]


def checkout_pythonpath(code: Path) -> str:
    """The ``PYTHONPATH`` that runs the checkout ``code`` (a benchmark's "before" run).

    Its root, then its light client (``client/``; ``api/client/`` in a checkout from before
    issue 42 moved it): both come before the packages installed for this checkout (the editable
    ``bonusjudge``, ``bonusjudge-client``), so the child runs that checkout's code throughout.
    """
    client = code / "client"
    if not client.is_dir():
        client = code / "api" / "client"
    return os.pathsep.join([str(code), str(client)])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_answers(
    url: str,
    *,
    timeout: float,
    interval: float = 0.2,
    alive: Callable[[], bool] | None = None,
) -> bool:
    """Poll ``url`` with GET until it answers 200; False when ``timeout`` seconds pass first.

    For a server just started as a child process: until it listens, connections are refused
    (an ``httpx.HTTPError``, tried again), and it may die while starting, which ``alive`` tells
    (then this stops waiting at once rather than until the deadline).

    Args:
        url: The URL to GET (a health or model-list endpoint).
        timeout: Seconds to wait in all.
        interval: Seconds between attempts.
        alive: Whether the server can still come up (e.g. its process is running).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            return False
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(interval)
    return False
