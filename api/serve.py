"""Run the service under uvicorn (``bonusjudge serve``; its options are parsed in ``cli.serve``).

**Start-up.** uvicorn serves an :class:`api.launcher.Launcher` from its first moment: ``/healthz``
answers while FastAPI, the engine and the job store are still importing in a thread, ``/readyz``
says what is still loading, and a request that arrives meanwhile waits for the app (see
``api.launcher``). A failure to build or start the app stops the server and is reported on one
line, as any other configuration error.

**Workers.** With one worker, the app is built in this process. With several, this process
binds the socket and supervises worker processes (``multiprocessing`` spawn); each builds its app
from ``api.app:app_from_env``, which reads the settings from the environment and
``BONUSJUDGE_SETTINGS_FILE``; if that variable is not set, this module writes the settings to a
private file (mode 0600, in the data folder) and points it there, so every worker serves the
same configuration. Jobs are shared through the jobs database, with leases, so any number of
workers is safe. A worker that dies is replaced; one that fails to start stops the service.

**Stopping.** SIGTERM or SIGINT stops the service cleanly, within ``grace`` seconds: it stops
accepting connections, lets in-flight requests finish, stops claiming jobs and lets the job items
in flight finish and be stored, releases its job leases (the next process resumes the jobs at
once), stops the local LLM server if it started one, and exits 0. A second signal exits at once
(status 128 + the signal): leases are released all the same, child processes are killed, nothing
is drained. The supervisor of several workers passes each signal on to every worker (they run in
their own process group, so a Ctrl-C reaches them once, through it) and waits for them; worker
processes and the local LLM server die with the service even if it is killed outright (Linux's
parent-death signal).

Without an API key the service refuses to listen beyond the loopback interface: an open grading
service spends the operator's judge budget for anyone who finds it.

uvicorn closes idle keep-alive connections after ``KEEP_ALIVE_SECONDS`` and refuses a request
line plus headers larger than ``MAX_HEADER_BYTES``, but it has no timeout for reading the headers
of a request (nor its body): a client sending a byte every few seconds holds a connection open.
Exposed beyond a trusted network, run it behind a proxy that times out slow clients (README,
"Deploying behind a proxy").
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api.settings import ServiceSettings
from core.errors import ConfigError

if TYPE_CHECKING:
    import multiprocessing.process
    import socket

    import uvicorn

    from api.launcher import ASGIApp, GracefulServer
    from judge.providers.local_llm import LocalLLM

log = logging.getLogger("bonusjudge.api")

APP_FACTORY = "api.app:app_from_env"
"""The factory each worker process builds its app with (settings from the environment)."""

SETTINGS_ENV = "BONUSJUDGE_SETTINGS_FILE"

KEEP_ALIVE_SECONDS = 5
"""How long uvicorn keeps an idle connection open after a response."""

MAX_HEADER_BYTES = 16 * 1024
"""Largest request line plus headers uvicorn's h11 parser buffers before refusing the request."""

GRACE_SECONDS = 20.0
"""Default grace period of a stop: in-flight requests and job items have this long to finish.

Within a container platform's usual 30 s between its SIGTERM and its SIGKILL, with room for the
process to exit after the drain."""

WORKER_START_FAILURE = 3
"""Exit status of a worker whose app failed to build or start (uvicorn's own code for it)."""


HTTP_PROTOCOL = "api.http_protocol:ErrorShapeH11Protocol"
"""uvicorn's h11 protocol answering an unparsable request with the error shape (import path)."""


def uvicorn_options() -> dict[str, Any]:
    """The connection limits passed to uvicorn, set explicitly so they cannot drift.

    ``http``: uvicorn's h11 protocol, whose 400 for a request it cannot parse (a negative
    ``Content-Length``, say) is the service's error body (``api.http_protocol``; named by its
    import path, so this module imports no uvicorn before serving).
    ``h11_max_incomplete_event_size`` applies to the h11 parser only (httptools, when installed,
    would be chosen by ``auto`` and ignore it; it too answers such a request in plain text before
    the app sees it). The event loop is uvicorn's ``auto``: uvloop, a dependency, where it
    installs (not on Windows), else asyncio's.
    """
    return {
        "http": HTTP_PROTOCOL,
        "timeout_keep_alive": KEEP_ALIVE_SECONDS,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds the loopback interface only (``localhost``, 127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def check_bind(settings: ServiceSettings, host: str) -> None:
    """Refuse to expose an unauthenticated service.

    Raises:
        ConfigError: (field ``host``) a non-loopback host with no API key configured.
    """
    if not settings.api_keys and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r} without an API key: configure api_keys "
            "(BONUSJUDGE_API_KEYS, digests from `bonusjudge hash-key KEY`) or bind 127.0.0.1",
            field="host",
        )


def check_port_free(host: str, port: int) -> None:
    """Refuse a port another process listens on, before loading anything.

    Raises:
        ConfigError: (``port``) binding it fails.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"port: cannot listen on {host}:{port}: {exc.strerror or exc}", field="port"
            ) from None


def local_llm_settings(settings: ServiceSettings, local: LocalLLM) -> ServiceSettings:
    """``settings`` judging with the local LLM server ``local``.

    Its judge uses llama.cpp's grammar-constrained JSON (``json_object_schema``) and 2 items at
    once (the packaged model is small and slow).
    """
    judge = settings.judge.model_copy(
        update={
            "model": local.model,
            "api_base": local.api_base,
            "mode": "json_object_schema",
            "concurrency": 2,
        }
    )
    return settings.model_copy(update={"judge": judge})


def write_settings_file(settings: ServiceSettings) -> Path:
    """Write ``settings`` for worker processes to a 0600 file in the data folder; its path."""
    folder = settings.resolved_data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # the service's data: this user only, whatever the umask
    path = folder / "serve-settings.json"
    dump = settings.model_dump(mode="json")
    if settings.judge.api_key is not None:
        # The workers need the real provider key; the file is readable by this user only.
        dump["judge"]["api_key"] = settings.judge.api_key.get_secret_value()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(dump, handle)
    os.chmod(path, 0o600)
    return path


def serve(
    settings: ServiceSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    log_level: str = "info",
    local_llm: bool = False,
    grace: float = GRACE_SECONDS,
) -> int:
    """Run the service until a stop signal; the exit status (0 after a clean stop).

    Args:
        settings: Validated service settings (``judge.config.load_settings``).
        host: Interface to bind; anything but loopback needs an API key configured.
        port: TCP port.
        workers: Worker processes (each runs jobs; leases keep them apart).
        log_level: uvicorn's log level.
        local_llm: Start the packaged local LLM (``judge.providers.local_llm``) as the judge,
            a child process stopped with the service.
        grace: Seconds in-flight requests and job items have to finish once a stop signal
            arrives.

    Raises:
        ConfigError: a non-loopback host without API keys (field ``host``), workers < 1
            (``workers``), a grace below 0 (``grace``), a local LLM that cannot start
            (``local_llm``), or an app that failed to build or start (its own field).
    """
    if workers < 1:
        raise ConfigError("workers must be at least 1", field="workers")
    if grace < 0:
        raise ConfigError("grace must be at least 0 seconds", field="grace")
    check_bind(settings, host)
    if not settings.api_keys:
        log.warning("no API key configured: serving on loopback only")
    elif settings.resolved_cache_scope() == "shared":
        # The operator chose it; say once what it gives away (docs/service.md, the cache).
        log.warning("cache_scope shared with API keys: a key can tell which items another key "
                    "graded (its answers come faster, without tokens or cost)")
    children: list[LocalLLM] = []
    try:
        if local_llm:
            from judge.providers.local_llm import start_local_llm

            # Its log beside the service's cache (``--cache-dir``), not in the user's default one.
            local = start_local_llm(log_dir=settings.cache_dir / "logs")
            children.append(local)
            settings = local_llm_settings(settings, local)
        kill_children = [child.kill for child in children]
        if workers == 1:
            return _serve_here(settings, host, port, log_level, grace, kill_children)
        return _supervise(settings, host, port, workers, log_level, grace, kill_children)
    finally:
        # After the service has drained: its last judge calls may need the local server.
        for child in children:
            child.stop()


# -- one process ----------------------------------------------------------------------------


def _config(app: ASGIApp, host: str, port: int, log_level: str, grace: float) -> uvicorn.Config:
    import uvicorn

    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on",
        # Whole seconds, as uvicorn types it (it is a wait_for timeout).
        timeout_graceful_shutdown=math.ceil(grace), **uvicorn_options(),
    )


def _serve_here(
    settings: ServiceSettings, host: str, port: int, log_level: str, grace: float,
    on_abort: Sequence[Callable[[], None]],
) -> int:
    """Serve in this process (one worker)."""

    def build() -> ASGIApp:
        from api.app import create_app

        return create_app(settings, drain_timeout=grace)

    def preload() -> None:
        from judge.loading import warm_up

        warm_up(settings.judge)

    server, failure = _launch(build, host, port, log_level, grace, on_abort, preload)
    server.run()
    if failure:
        raise failure[0]
    return 0


def _launch(
    build: Callable[[], ASGIApp], host: str, port: int, log_level: str, grace: float,
    on_abort: Sequence[Callable[[], None]], preload: Callable[[], None] | None = None,
) -> tuple[GracefulServer, list[BaseException]]:
    """A server for the app ``build`` makes, and the list its start-up failure will be put in."""
    from api.launcher import GracefulServer, Launcher

    failure: list[BaseException] = []

    def failed(exc: BaseException) -> None:
        failure.append(exc)
        server.should_exit = True

    launcher = Launcher(build, on_failure=failed, preload=preload)
    server = GracefulServer(_config(launcher, host, port, log_level, grace), launcher=launcher,
                            grace=grace, on_abort=on_abort)
    return server, failure


# -- several worker processes ---------------------------------------------------------------


def _supervise(
    settings: ServiceSettings, host: str, port: int, workers: int, log_level: str, grace: float,
    on_abort: Sequence[Callable[[], None]],
) -> int:
    """Bind the socket, run ``workers`` worker processes and pass stop signals on to them."""
    import multiprocessing

    from api.launcher import ABORT_SECONDS, STOP_SIGNALS

    if not os.environ.get(SETTINGS_ENV):
        os.environ[SETTINGS_ENV] = str(write_settings_file(settings))
    sock = _config(APP_FACTORY, host, port, log_level, grace).bind_socket()  # type: ignore[arg-type]
    context = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads
    options = {"host": host, "port": port, "log_level": log_level, "grace": grace,
               "parent": os.getpid(), "root_level": logging.getLogger().getEffectiveLevel()}

    def start_worker() -> multiprocessing.process.BaseProcess:
        process = context.Process(target=_worker_main, args=(sock, options),
                                  name="bonusjudge-worker")
        process.start()
        return process

    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda sig, _: received.append(sig))
                for sig in STOP_SIGNALS}
    processes: list[multiprocessing.process.BaseProcess] = []
    try:
        processes = [start_worker() for _ in range(workers)]
        log.info("supervising %d worker processes (pids %s)", workers,
                 ", ".join(str(p.pid) for p in processes))
        while not received:
            time.sleep(0.1)
            for index, process in enumerate(processes):
                if process.exitcode is None:
                    continue
                if process.exitcode == WORKER_START_FAILURE:
                    _signal_all(processes, signal.SIGTERM)
                    _reap(processes, grace + ABORT_SECONDS)
                    raise ConfigError(
                        "a worker process failed to start the service; see the log above",
                        field="workers",
                    )
                log.error("worker %s exited with status %s; starting another", process.pid,
                          process.exitcode)
                processes[index] = start_worker()
        first = received[0]
        log.warning("%s: stopping %d workers; in-flight requests and job items have %g s to "
                    "finish (send the signal again to exit at once)",
                    signal.Signals(first).name, workers, grace)
        _signal_all(processes, signal.SIGTERM)
        deadline = time.monotonic() + grace + ABORT_SECONDS
        while any(p.exitcode is None for p in processes) and time.monotonic() < deadline:
            if len(received) > 1:
                # Again: the workers exit at once (their own second signal), and so do we.
                log.warning("%s again: exiting now", signal.Signals(received[1]).name)
                _signal_all(processes, signal.SIGTERM)
                _reap(processes, ABORT_SECONDS)
                for step in on_abort:
                    with contextlib.suppress(Exception):
                        step()
                return 128 + received[1]
            time.sleep(0.05)
        _reap(processes, 0.0)
        return 0
    finally:
        _reap(processes, 0.0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()


def _signal_all(processes: Sequence[multiprocessing.process.BaseProcess], sig: int) -> None:
    for process in processes:
        if process.exitcode is None and process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, sig)


def _reap(processes: Sequence[multiprocessing.process.BaseProcess], timeout: float) -> None:
    """Wait up to ``timeout`` seconds for the workers to end, then kill what is left."""
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.exitcode is None:
            log.error("worker %s did not stop in time: killing it", process.pid)
            process.kill()
            process.join(5)


def _worker_main(sock: socket.socket, options: dict[str, Any]) -> None:
    """One worker process: serve the app from the environment's settings on ``sock``."""
    import sys

    from judge.providers.local_llm import die_with_parent

    # Its own process group: a Ctrl-C reaches the supervisor only, which passes it on once.
    os.setpgid(0, 0)
    die_with_parent(options["parent"])
    # The supervisor's logging choice (the command line's --verbose), not the library default.
    logging.basicConfig(level=options["root_level"], format="%(levelname)s %(name)s: %(message)s")

    def build() -> ASGIApp:
        from api.app import create_app
        from api.settings import load_service_settings

        return create_app(load_service_settings(), drain_timeout=options["grace"])

    def preload() -> None:
        from api.settings import load_service_settings
        from judge.loading import warm_up

        warm_up(load_service_settings().judge)

    server, failure = _launch(build, options["host"], options["port"], options["log_level"],
                              options["grace"], (), preload)
    server.run(sockets=[sock])
    if failure:
        sys.exit(WORKER_START_FAILURE)
