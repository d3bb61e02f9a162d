"""Run bonusjudge the way users do, in tests and benchmarks: a fresh interpreter per command.

``run_cli`` runs ``bonusjudge ARGS`` in a subprocess (new interpreter, the caller's cache
folder), ``run_python`` a snippet in one, and ``ServiceProcess`` starts ``bonusjudge serve`` on a
free loopback port and stops it with SIGINT, as an operator would. Nothing here imports the
service: the command line is the contract.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Self

from core.processes import checkout_pythonpath, free_port, wait_until_answers
from standins.lifecycle import StartStop


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI subprocess: offline, no settings file, ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BONUSJUDGE_")}
    env.update(
        {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1",
         "TRANSFORMERS_OFFLINE": "1"}
    )
    env.update(extra or {})
    return env


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``bonusjudge ARGS`` in a fresh interpreter and return what it did (never raises)."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True, text=True, timeout=timeout, env=cli_env(env), check=False,
    )


def run_python(
    code: str,
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in a fresh, offline interpreter and return what it did.

    What a cold process sees, which no test in the pytest process can: nothing imported, loaded
    or cached yet. The environment is :func:`cli_env`'s, ``env`` on top.
    """
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, env=cli_env(env), cwd=cwd, check=False,
    )


class ServiceProcess(StartStop):
    """``bonusjudge serve ARGS`` on a free port, started and stopped as an operator would.

    Args:
        args: Options after ``serve`` (the port is added).
        workdir: Folder for the log file.
        env: Extra environment variables (e.g. ``BONUSJUDGE_MAX_BONUS_POINTS``).
        ready: Wait for ``/readyz`` (True) or only ``/healthz`` (False).
        timeout: Seconds to wait for it to come up.
        code: Another checkout to run instead of this one (a benchmark's "before" run): the
            service starts there, with its light client first on the import path.
    """

    def __init__(
        self,
        args: Sequence[str],
        workdir: Path,
        *,
        env: Mapping[str, str] | None = None,
        ready: bool = True,
        timeout: float = 120.0,
        code: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"serve-{self.port}.log"
        self._cmd = [sys.executable, "-m", "cli", "serve", "--port", str(self.port), *args]
        self._env = cli_env(env)
        self._cwd = code
        if code is not None:
            self._env["PYTHONPATH"] = checkout_pythonpath(code)
        self._ready = ready
        self._timeout = timeout
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        """Start it and wait until it answers.

        Raises:
            RuntimeError: it exited or did not answer in time (with the end of its log).
        """
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child writes to it until it stops
        self.proc = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT,
                                     env=self._env, cwd=self._cwd)
        proc = self.proc
        path = "/readyz" if self._ready else "/healthz"
        if wait_until_answers(
            self.url + path, timeout=self._timeout, alive=lambda: proc.poll() is None
        ):
            return self
        if proc.poll() is not None:
            raise RuntimeError(f"bonusjudge serve exited: {self.log()[-2000:]}")
        self.stop()
        raise RuntimeError(f"bonusjudge serve did not come up: {self.log()[-2000:]}")

    def log(self) -> str:
        """What the service printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """SIGINT, then SIGKILL if it does not exit within 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@contextlib.contextmanager
def sqlite_write_lock(database: Path, seconds: float) -> Iterator[None]:
    """Another process holding ``database``'s write lock (``BEGIN EXCLUSIVE``) for ``seconds``.

    What an operator's backup tool or a second program does to a cache or job store in use: the
    body runs while the lock is held, and the holder is waited for on the way out.

    Raises:
        RuntimeError: the holder did not take the lock.
    """
    code = (
        "import sqlite3, sys, time\n"
        "con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n"
        "con.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "con.rollback()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(database), str(seconds)],
                              stdout=subprocess.PIPE, text=True, env=cli_env())
    try:
        if holder.stdout is None or holder.stdout.readline().strip() != "locked":
            raise RuntimeError(f"could not lock {database}")
        yield
    finally:
        holder.wait(seconds + 60)


def filled_disk_cache(folder: Path, entries: int = 3_000) -> Path:
    """A cache folder as earlier runs leave it (about 1.5 MB of entries); its ``cache.db``.

    The entries are checkpointed into ``cache.db`` by diskcache's defaults. The keys are hex
    digests like the cache's own, so every lookup of a graded item walks the index to a leaf page
    of its own: a process that reads pages past a truncation reads many.
    """
    import diskcache

    earlier = diskcache.Cache(str(folder))
    with earlier.transact():
        for n in range(entries):
            earlier.set(hashlib.sha256(str(n).encode()).hexdigest(), "x" * 300)
    earlier.close()
    return folder / "cache.db"
