"""The PostgreSQL the job-store tests and the cluster demo run (tests/helpers/postgres_server.py):
foreground mode until SIGTERM, a kept cluster reused, and a clear error when it cannot start."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from core.processes import free_port
from tests.helpers.postgres_server import postgres_server

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder the server can reach even as ``nobody`` (under root, pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="bonusjudge-pg-test-"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def serve(port: int, data: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.postgres_server", "--port", str(port),
         "--data", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )


def test_foreground_server_runs_until_sigterm_and_keeps_its_cluster(folder: Path) -> None:
    port = free_port()
    data = folder / "cluster"
    server = serve(port, data)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url == f"postgresql://postgres@127.0.0.1:{port}/postgres", server.stderr
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n int)")
            conn.execute("INSERT INTO kept VALUES (42)")
            address = conn.execute("SELECT inet_server_addr()::text").fetchone()
        assert address == ("127.0.0.1/32",)  # TCP on loopback, not a socket file
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
    finally:
        if server.poll() is None:
            server.kill()
    with socket.socket() as probe:  # the server went with it
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    again = serve(port, data)
    try:
        assert again.stdout is not None
        url = again.stdout.readline().strip()
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT n FROM kept").fetchone() == (42,)
        again.send_signal(signal.SIGINT)
        assert again.wait(60) == 0
    finally:
        if again.poll() is None:
            again.kill()


def test_a_server_that_cannot_start_says_why(folder: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = serve(port, folder / "cluster")
        _, stderr = server.communicate(timeout=120)
    assert server.returncode == 2
    assert "PostgreSQL exited at start" in stderr and "could not" in stderr, stderr


def test_the_context_manager_gives_a_password_protected_url_and_cleans_up() -> None:
    with postgres_server() as url:
        password = url.split(":")[2].split("@")[0]
        assert len(password) == 32
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
        refused = url.replace(f":{password}@", ":wrong@")
        try:
            psycopg.connect(refused).close()
        except psycopg.OperationalError as exc:
            assert "password authentication failed" in str(exc)
        else:
            raise AssertionError("a wrong password was accepted")
        port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
