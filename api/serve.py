"""Run the service under uvicorn (``bonusjudge serve``; its options are parsed in ``cli.serve``).

With one worker the app object is built here. With several, uvicorn starts each worker from the
import string ``api.app:app_from_env`` (a factory), which reads the settings from the environment
and ``BONUSJUDGE_SETTINGS_FILE``; if that variable is not set, this module writes the settings to
a private file (mode 0600, in the data folder) and points it there, so every worker serves the
same configuration. Jobs are shared through the SQLite database, with leases, so any number of
workers is safe.

Without an API key the service refuses to listen beyond the loopback interface: an open grading
service spends the operator's judge budget for anyone who finds it.

uvicorn closes idle keep-alive connections after ``KEEP_ALIVE_SECONDS`` and refuses a request
line plus headers larger than ``MAX_HEADER_BYTES``, but it has no timeout for reading the headers
of a request (nor its body): a client sending a byte every few seconds holds a connection open.
Exposed beyond a trusted network, run it behind a proxy that times out slow clients (README,
"Deploying behind a proxy").
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from judge.config import Settings

log = logging.getLogger("bonusjudge.api")

APP_FACTORY = "api.app:app_from_env"
"""Import string uvicorn uses to build the app in each worker process."""

SETTINGS_ENV = "BONUSJUDGE_SETTINGS_FILE"

KEEP_ALIVE_SECONDS = 5
"""How long uvicorn keeps an idle connection open after a response."""

MAX_HEADER_BYTES = 16 * 1024
"""Largest request line plus headers uvicorn's h11 parser buffers before refusing the request."""


def uvicorn_options() -> dict[str, Any]:
    """The connection limits passed to ``uvicorn.run``, set explicitly so they cannot drift.

    ``http="h11"``: ``h11_max_incomplete_event_size`` applies to the h11 parser only (httptools,
    when installed, would be chosen by ``auto`` and ignore it).
    """
    return {
        "http": "h11",
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


def check_bind(settings: Settings, host: str) -> None:
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


def with_local_llm(settings: Settings) -> Settings:
    """Start the packaged Gemma 3 270M server and return ``settings`` judging with it.

    The server is a managed child process, stopped with the service. Its judge uses llama.cpp's
    grammar-constrained JSON (``json_object_schema``) and 2 items at once (it is small and slow).
    """
    from judge.local_llm import start_local_llm

    local = start_local_llm()
    judge = settings.judge.model_copy(
        update={
            "model": local.model,
            "api_base": local.api_base,
            "mode": "json_object_schema",
            "concurrency": 2,
        }
    )
    return settings.model_copy(update={"judge": judge})


def write_settings_file(settings: Settings) -> Path:
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
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    log_level: str = "info",
) -> None:
    """Run the service until interrupted.

    Args:
        settings: Validated service settings (``judge.config.load_settings``).
        host: Interface to bind; anything but loopback needs an API key configured.
        port: TCP port.
        workers: uvicorn worker processes (each runs jobs; leases keep them apart).
        log_level: uvicorn's log level.

    Raises:
        ConfigError: a non-loopback host without API keys (field ``host``), or workers < 1
            (field ``workers``).
    """
    import uvicorn

    if workers < 1:
        raise ConfigError("workers must be at least 1", field="workers")
    check_bind(settings, host)
    if not settings.api_keys:
        log.warning("no API key configured: serving on loopback only")
    if workers == 1:
        from api.app import create_app

        uvicorn.run(
            create_app(settings), host=host, port=port, log_level=log_level, **uvicorn_options()
        )
        return
    if not os.environ.get(SETTINGS_ENV):
        os.environ[SETTINGS_ENV] = str(write_settings_file(settings))
    uvicorn.run(
        APP_FACTORY, factory=True, host=host, port=port, workers=workers, log_level=log_level,
        **uvicorn_options(),
    )
