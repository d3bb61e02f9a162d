"""A real PostgreSQL server for tests and demos: pgserver's binaries on a loopback TCP port.

The ``pgserver`` package (a dev extra) ships PostgreSQL's binaries; this module runs them
directly, ``initdb`` then ``postgres`` in the foreground of a child process, listening on
127.0.0.1 only (no Unix socket), and waits until it accepts connections. It is a server for
tests and demos on this machine: ``fsync`` is off, so a crash of the machine may lose its data.

::

    with postgres_server() as url:          # a new cluster in a temporary folder
        ...                                  # url = postgresql://postgres:<password>@127.0.0.1:<port>/postgres

    python -m tests.helpers.postgres_server --port 5433 --data /tmp/pg   # until SIGTERM or Ctrl-C

PostgreSQL refuses to run as root: under root the server runs as the unprivileged ``nobody``
account, which then owns its data folder. Of bonusjudge it imports only ``tests.helpers.processes``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import pwd
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from core.processes import free_port

__all__ = ["LocalPostgres", "binaries", "postgres_server"]

SUPERUSER = "postgres"
"""The cluster's superuser, the user of the URLs given out here."""

START_TIMEOUT_S = 60.0
"""How long ``start`` waits for the server to accept connections."""

_UNPRIVILEGED = "nobody"


def binaries() -> Path:
    """The folder of the PostgreSQL programs that the ``pgserver`` package ships.

    Raises:
        RuntimeError: ``pgserver`` is not installed (``pip install pgserver``; a dev extra).
    """
    spec = importlib.util.find_spec("pgserver")  # found, not imported: pgserver's import is slow
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "PostgreSQL for tests comes from the pgserver package, which is not installed: "
            "pip install 'bonusjudge[dev]' (or pip install pgserver)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (folder / "postgres").is_file():
        raise RuntimeError(f"pgserver is installed but has no PostgreSQL programs in {folder}")
    return folder


class LocalPostgres:
    """One PostgreSQL cluster in ``data_dir``, run as a child process on 127.0.0.1.

    ``start`` creates the cluster when the folder has none (``initdb``), starts the server and
    returns once it accepts connections; ``stop`` shuts it down (fast shutdown, then a kill).
    Usable as a context manager.

    Args:
        data_dir: The cluster's folder (created; reused when it holds a cluster already).
        port: The TCP port; a free one when None.
        password: The superuser's password when the cluster is created (password
            authentication); None trusts every connection from this machine.
    """

    def __init__(
        self, data_dir: Path, *, port: int | None = None, password: str | None = None
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.port = port if port is not None else free_port()
        self.password = password
        self._pick_port = port is None
        self._bin = binaries()
        self._user = pwd.getpwnam(_UNPRIVILEGED) if os.geteuid() == 0 else None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-postgres.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``postgresql://postgres[:password]@127.0.0.1:<port>/postgres``."""
        secret = f":{self.password}" if self.password else ""
        return f"postgresql://{SUPERUSER}{secret}@127.0.0.1:{self.port}/postgres"

    def _run_as(self) -> dict[str, Any]:
        """``subprocess`` arguments that drop root for the unprivileged account."""
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _env(self) -> dict[str, str]:
        # No PG* variable of the caller's may point the programs elsewhere; the C locale
        # exists everywhere.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update({"LC_ALL": "C", "LANG": "C"})
        return env

    def _prepare_folder(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)  # PostgreSQL refuses a data folder others can read
        if self._user is not None:
            os.chown(self.data_dir, self._user.pw_uid, self._user.pw_gid)
            parent = self.data_dir.parent
            while parent != parent.parent:
                if not parent.stat().st_mode & 0o001:
                    raise RuntimeError(
                        f"PostgreSQL runs as {_UNPRIVILEGED!r} under root, and cannot reach "
                        f"{self.data_dir}: {parent} is not searchable by others (chmod o+x it, "
                        "or choose a data folder under /tmp)"
                    )
                parent = parent.parent

    def _initdb(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        args = [str(self._bin / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER,
                "--encoding=UTF8", "--locale=C", "--no-sync"]
        with tempfile.TemporaryDirectory(prefix="bonusjudge-initdb-") as scratch:
            if self.password is not None:
                os.chmod(scratch, 0o711)
                secret = Path(scratch) / "password"
                secret.write_text(self.password + "\n")
                if self._user is not None:
                    os.chown(secret, self._user.pw_uid, self._user.pw_gid)
                args += ["--auth=scram-sha-256", f"--pwfile={secret}"]
            else:
                args += ["--auth=trust"]
            done = subprocess.run(args, capture_output=True, text=True, env=self._env(),
                                  check=False, timeout=120, **self._run_as())
        if done.returncode != 0:
            raise RuntimeError(
                f"initdb failed in {self.data_dir} (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-2000:]}"
            )

    def _ready(self) -> bool:
        probe = subprocess.run(
            [str(self._bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port),
             "-U", SUPERUSER, "-d", "postgres", "-t", "2"],
            capture_output=True, env=self._env(), check=False,
        )
        return probe.returncode == 0

    def _launch(self) -> subprocess.Popen[bytes]:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the server writes to it until it stops
        try:
            return subprocess.Popen(
                [str(self._bin / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
                 "-c", "max_connections=200", "-c", "fsync=off",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self._env(), start_new_session=True, **self._run_as(),
            )
        finally:
            log.close()  # the child has its own descriptor

    def _processes(self) -> list[int]:
        """The server's processes: the postmaster, then every process it started (Linux)."""
        if self.process is None or self.process.poll() is not None:
            return []
        postmaster = self.process.pid
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                # "pid (comm) state ppid ...": the command may hold spaces, not a ")".
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            if int(fields[1]) == postmaster:
                children.append(int(stat.parent.name))
        return [postmaster, *children]

    def pause(self) -> None:
        """Freeze the server (SIGSTOP to the postmaster and every backend): a host paused.

        Connections stay open and nothing answers, new ones included. Each backend leads a
        process group of its own, so the signal goes to each process; the postmaster first, so
        that it starts no other meanwhile.
        """
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGSTOP)
        for pid in self._processes()[1:]:  # read once the postmaster can fork no more
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server go on (SIGCONT to the same processes)."""
        for pid in self._processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def log(self) -> str:
        """What the server wrote to its log so far (the last 4000 characters)."""
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def start(self) -> Self:
        """Create the cluster if needed, start the server, wait until it accepts connections.

        Raises:
            RuntimeError: pgserver is missing, initdb failed, or the server exited or did not
                accept connections within ``START_TIMEOUT_S`` (with the end of its log).
        """
        self._prepare_folder()
        self._initdb()
        for attempt in range(3):
            self.process = self._launch()
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and self.process.poll() is None:
                if self._ready():
                    return self
                time.sleep(0.1)
            if self.process.poll() is None:
                self.stop()
                raise RuntimeError(
                    f"PostgreSQL did not accept connections on 127.0.0.1:{self.port} within "
                    f"{START_TIMEOUT_S:.0f} s; its log:\n{self.log()}"
                )
            log = self.log()
            # A port taken between choosing and binding it: choose again (when it was ours).
            if self._pick_port and "Address already in use" in log and attempt < 2:
                self.port = free_port()
                continue
            raise RuntimeError(
                f"PostgreSQL exited at start (code {self.process.returncode}); its log:\n{log}"
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the server down (SIGINT: fast shutdown), killing it after ``timeout`` seconds."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextmanager
def postgres_server(*, port: int | None = None, password: str | None = None) -> Iterator[str]:
    """A new PostgreSQL cluster in a temporary folder, for the block: yields its URL.

    The superuser gets a random password unless ``password`` is given; the folder and the
    server are gone when the block ends.

    Raises:
        RuntimeError: the server cannot start (see ``LocalPostgres.start``).
    """
    with tempfile.TemporaryDirectory(prefix="bonusjudge-pg-") as scratch:
        os.chmod(scratch, 0o711)  # the unprivileged server account (under root) reaches its data
        secret = password if password is not None else secrets.token_hex(16)
        with LocalPostgres(Path(scratch) / "data", port=port, password=secret) as server:
            yield server.url


def main(argv: Sequence[str] | None = None) -> int:
    """Run one PostgreSQL server in the foreground until SIGTERM or SIGINT; print its URL first."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.helpers.postgres_server",
        description="Run PostgreSQL (pgserver's binaries) on 127.0.0.1 until SIGTERM or Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=None, help="TCP port (default: a free one)")
    parser.add_argument("--data", type=Path, required=True,
                        help="the cluster's folder (created, or reused when it holds one)")
    parser.add_argument("--password", default=None,
                        help="the superuser's password when the cluster is created "
                             "(default: trust connections from this machine)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = LocalPostgres(args.data, port=args.port, password=args.password)
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        print(f"postgres_server: error: {exc}", file=sys.stderr)
        return 2
    print(server.url, flush=True)
    try:
        while not stop.is_set():
            if server.process is None or server.process.poll() is not None:
                print(f"postgres_server: error: PostgreSQL exited; its log:\n{server.log()}",
                      file=sys.stderr)
                return 1
            stop.wait(0.5)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
