"""Shared pieces of the benchmarks: the workload, the machine's state, memory probes, JSON output.

Every benchmark section is a module with a ``main(argv)`` that prints a table and, with
``--json PATH``, writes its figures for :mod:`bench.run_all`, which runs each section in its own
interpreter so that imports, caches and peak memory never leak from one section to the next.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_WORKLOAD",
    "EXAMPLES",
    "ROOT",
    "WORKLOAD_ENV",
    "BenchError",
    "Timer",
    "dir_size_mb",
    "load_requests",
    "log",
    "machine",
    "older_checkout",
    "parse_section_args",
    "peak_rss_mb",
    "percentile",
    "print_table",
    "proc_peak_rss_mb",
    "process_tree",
    "quiet_litellm",
    "section_parser",
    "set_bench_env",
    "workload_path",
    "write_json",
]

WORKLOAD_ENV = "BONUSJUDGE_BENCH_WORKLOAD"
"""Environment variable naming the workload JSONL (CharToM item format)."""

DEFAULT_WORKLOAD = Path("/work/shared/bench/chartom_like_1035.jsonl")
"""The 1,035-item workload used when ``BONUSJUDGE_BENCH_WORKLOAD`` is not set."""

ROOT = Path(__file__).resolve().parents[1]
"""The checkout the benchmarks run from (the repository's root)."""

EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"
"""The 10 bundled CharToM examples (the sample ``bonusjudge grade`` ships with)."""


class BenchError(RuntimeError):
    """A benchmark could not run (missing workload, a server that did not start...)."""


def set_bench_env() -> None:
    """Set the run environment: litellm's local cost map, no model hub, quiet tokenizers."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def quiet_litellm() -> None:
    """Stop litellm printing its help banner (a print per error would skew the timings)."""
    import litellm

    litellm.suppress_debug_info = True


def workload_path() -> Path:
    """The workload file: ``$BONUSJUDGE_BENCH_WORKLOAD`` or :data:`DEFAULT_WORKLOAD`.

    Raises:
        BenchError: The file does not exist.
    """
    path = Path(os.environ.get(WORKLOAD_ENV) or DEFAULT_WORKLOAD)
    if not path.is_file():
        raise BenchError(f"workload not found: {path} (set {WORKLOAD_ENV} to a CharToM JSONL file)")
    return path


def load_requests(
    path: Path | None = None, *, limit: int | None = None, repeat: int = 1
) -> list[tuple[str, Any]]:
    """The workload as ``(item_id, GradeRequest)`` pairs, read with the product's own reader.

    Args:
        path: The JSONL file (default: :func:`workload_path`).
        limit: Keep only the first ``limit`` items (before repeating).
        repeat: Copies of the workload. Copy ``k >= 1`` gets new ids (``<id>~k``) and a response
            ending in `` (copy k)``, so that its judge calls have new cache keys: a repeat must
            cost what a new item costs, not be a cache hit.

    Raises:
        BenchError: A line of the workload is invalid (named by its line number), or ``repeat``
            is below 1.
    """
    from core.jsonl import BadLine
    from judge.io import read_items

    if repeat < 1:
        raise BenchError(f"repeat must be at least 1, got {repeat}")
    source = path or workload_path()
    base: list[tuple[str, Any]] = []
    for entry in read_items(source):
        if isinstance(entry, BadLine):
            raise BenchError(f"{source}: {entry}")
        base.append(entry)
        if limit is not None and len(base) >= limit:
            break
    out = list(base)
    for copy in range(1, repeat):
        for item_id, request in base:
            changed = request.model_copy(
                update={"id": None, "response": f"{request.response} (copy {copy})"}
            )
            out.append((f"{item_id}~{copy}", changed))
    return out


def machine() -> dict[str, Any]:
    """Where and under what load the figures were taken (cores, load average, versions)."""
    load1, load5, load15 = os.getloadavg()
    return {
        "cores": os.cpu_count(),
        "load_avg": [round(load1, 2), round(load5, 2), round(load15, 2)],
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def proc_peak_rss_mb(pid: int) -> float | None:
    """Peak resident memory (``VmHWM``) of a live process, in MiB; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its live descendants (from ``/proc/*/task/*/children``)."""
    out: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        out.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            stack.extend(int(child) for child in children)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear interpolation (numpy's default).

    Raises:
        BenchError: ``values`` is empty.
    """
    if not values:
        raise BenchError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class Timer:
    """Wall and CPU time of a block: ``with Timer() as t: ...; t.wall, t.cpu``."""

    wall = 0.0
    cpu = 0.0

    def __enter__(self) -> Timer:
        self._start = (time.perf_counter(), time.process_time())
        return self

    def __exit__(self, *exc: object) -> None:
        wall0, cpu0 = self._start
        self.wall = time.perf_counter() - wall0
        self.cpu = time.process_time() - cpu0


def dir_size_mb(path: Path) -> float:
    """Bytes under ``path`` (recursively), in MiB."""
    return sum(f.stat().st_size for f in _files(path)) / 2**20


def _files(path: Path) -> Iterator[Path]:
    for child in path.rglob("*"):
        if child.is_file():
            yield child


@contextmanager
def older_checkout(rev: str, work: Path) -> Iterator[Path]:
    """A detached ``git worktree`` of commit ``rev`` at ``work / "before"``, removed on exit.

    For the sections that measure an older commit against this checkout in the same run (the
    same machine and load for both). The worktree is removed with ``--force`` even when the
    section fails, so a failed run leaves no registered worktree behind.

    Raises:
        subprocess.CalledProcessError: git could not check ``rev`` out.
    """
    old = work / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), rev],
                   check=True, capture_output=True)
    try:
        yield old
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                       check=False, capture_output=True)


def section_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The command line of the section ``python -m MODULE``, with its ``--json PATH`` option.

    Args:
        module: The section's module (``bench.layers``).
        doc: The section's description (its module docstring).
    """
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    parser.add_argument("--json", help="write the figures here (for bench.run_all)")
    return parser


def parse_section_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, *, litellm: bool = False
) -> argparse.Namespace:
    """Parse a section's command line and set its run environment (:func:`set_bench_env`).

    Args:
        parser: The section's parser (from :func:`section_parser`).
        argv: Its arguments (None: the process's).
        litellm: The section calls litellm in this process: :func:`quiet_litellm` too (not done
            otherwise, since importing litellm costs seconds and memory the figures would show).
    """
    args = parser.parse_args(argv)
    set_bench_env()
    if litellm:
        quiet_litellm()
    return args


Column = tuple[str, str | Callable[[Mapping[str, Any]], Any], str]
"""A fixed-width column of :func:`print_table`: its header, its cell (the row's key, or a
function of the row) and the format spec of the cell (``">10,"``: right-aligned in 10, with
thousands separators); the header takes the spec's alignment and width."""


def print_table(
    title: str,
    columns: Sequence[Column],
    rows: Iterable[Mapping[str, Any]],
    *,
    load_before: Sequence[float] | None = None,
) -> None:
    """Print a section's fixed-width table under its title and the machine's load average.

    Args:
        title: What the table shows; ``; load average ...`` is appended (the figures of a
            loaded machine read differently).
        columns: The columns, left to right.
        rows: The rows, each a mapping the columns' keys index.
        load_before: The load average taken before the runs: the title then says
            ``before -> now``.
    """
    load = machine()["load_avg"]
    span = f"{list(load_before)} -> {load}" if load_before is not None else f"{load}"
    print(f"{title}; load average {span}")
    print("".join(f"{header:{_alignment(spec)}}" for header, _, spec in columns))
    for row in rows:
        print("".join(
            format(cell(row) if callable(cell) else row[cell], spec) for _, cell, spec in columns
        ))


def _alignment(spec: str) -> str:
    """The alignment and width of a format spec (``">10,"`` -> ``">10"``), for its header."""
    match = re.match(r"[<>^]?\d*", spec)
    return match.group() if match else ""


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    """Write a section's figures for :mod:`bench.run_all` (nothing when ``path`` is None).

    The figures are written with the :func:`machine` they were taken on.
    """
    if path is None:
        return
    figures = {**payload, "machine": machine()}
    Path(path).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


def log(message: str) -> None:
    """Progress on stderr, so that stdout carries only the tables."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
