"""How a calibration run holds its report folder: a file lock, a daemon thread, a scratch folder.

Kept apart from the calibration service (``api.services.calibration``), which decides what a
run does; this module only gives it the process-level means: an exclusive lock so two replicas
never write one report, a daemon thread so a shutdown never waits for a long grading run, and
the run's scratch folder restored from the job store when another process takes the job over.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from api.jobs import JobStore
from core.errors import JudgeError

__all__ = ["LOCK_FILE", "in_daemon_thread", "scratch_folder", "try_lock"]

LOCK_FILE = ".lock"
"""The report folder's lock file (held with ``flock`` while a run writes there)."""

_T = TypeVar("_T")


def in_daemon_thread(work: Callable[[], _T], name: str) -> asyncio.Future[_T]:
    """Run ``work`` in a daemon thread; its outcome arrives as an asyncio future."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def deliver(setter: Callable[[], None]) -> None:
        if not future.done():
            setter()

    def target() -> None:
        try:
            value = work()
        except BaseException as exc:  # delivered to the awaiting task, which decides
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(deliver, lambda: future.set_exception(error))
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(deliver, lambda: future.set_result(value))

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


def try_lock(folder: Path) -> int | None:
    """An exclusive lock on the report folder (fd), or None when another run holds it."""
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def scratch_folder(
    store: JobStore, job_id: str, folder: Path, options: dict[str, Any], input_file: str
) -> None:
    """Create a run's scratch folder, with its uploaded set (from the store when not there).

    Raises:
        JudgeError: the run's uploaded set is not in the store (the job cannot run).
    """
    folder.mkdir(parents=True, exist_ok=True)
    if options["source"] != "upload" or (folder / input_file).is_file():
        return
    upload = store.read_file(job_id, input_file)
    if upload is None:
        raise JudgeError("the uploaded set of this calibration run is missing from the job store")
    partial = folder / f".{input_file}.part"
    partial.write_bytes(upload)
    partial.replace(folder / input_file)  # whole or absent, should this process die meanwhile
