"""The light client as a harness meets it: install size and import time in its own environment.

Builds (or reuses, with ``--venv DIR``) a virtual environment holding only ``pip install
./client``, then times imports in fresh interpreters of it, each ``-I`` (isolated: this
repository is not on the path). The baseline, measured in the same run, is ``import pydantic,
httpx``: what any client on these two libraries pays before a line of its own; the goal of issue
30 is an import under 0.3 s.

    .venv/bin/python -m bench.client_import [--runs 15] [--venv DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "baseline: import pydantic, httpx": "import pydantic, httpx",
    # pydantic loads its validators' machinery with the first model defined, not at import: the
    # floor of any client that parses answers into pydantic models.
    "floor: the same + one pydantic model defined": (
        "import pydantic, httpx\nclass M(pydantic.BaseModel):\n    x: int"
    ),
    "import bonusjudge_client": "import bonusjudge_client",
    "from bonusjudge_client import JudgeClient, GradeRequest": (
        "from bonusjudge_client import JudgeClient, GradeRequest"
    ),
}
"""What is timed: a label and the statement."""

VENV_TOOLS = {"pip", "setuptools", "wheel"}
"""Distributions every venv starts with: not the client's footprint."""


def build(env_dir: Path) -> Path:
    """A venv at ``env_dir`` with ./client installed (not editable); its python."""
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         str(ROOT / "client")],
        check=True, timeout=900,
    )
    return python


def footprint(python: Path) -> tuple[list[str], float]:
    """The installed distributions (venv tools aside) and their size on disk in MB."""
    code = (
        "import importlib.metadata as m, json, pathlib\n"
        "out = []\n"
        "for d in m.distributions():\n"
        "    size = sum(pathlib.Path(d.locate_file(f)).stat().st_size for f in d.files or []\n"
        "               if pathlib.Path(d.locate_file(f)).is_file())\n"
        "    out.append([d.metadata['Name'], d.version, size])\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    rows = [row for row in json.loads(done.stdout) if row[0].lower() not in VENV_TOOLS]
    names = sorted(f"{name} {version}" for name, version, _ in rows)
    return names, sum(size for _, _, size in rows) / 1e6


def time_import(python: Path, statement: str) -> float:
    """Seconds ``statement`` takes in a fresh isolated interpreter (timed inside it)."""
    code = (
        "import time\n"
        "t = time.perf_counter()\n"
        f"{statement}\n"
        "print(time.perf_counter() - t)\n"
    )
    done = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    return float(done.stdout)


def main(argv: list[str] | None = None) -> None:
    """Print the footprint and the import-time table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="Interpreters per case.")
    parser.add_argument("--venv", type=Path, help="Reuse (or create) this venv.")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        env_dir = args.venv or Path(scratch) / "light"
        python = env_dir / "bin" / "python"
        if not python.exists():
            python = build(env_dir)
        names, megabytes = footprint(python)
        print(f"light client environment: {len(names)} distributions, {megabytes:.1f} MB "
              "(pip/setuptools aside)")
        print("  " + ", ".join(names))
        # Interleaved, so a change of machine load touches every case alike.
        times: dict[str, list[float]] = {label: [] for label in CASES}
        for _ in range(args.runs):
            for label, statement in CASES.items():
                times[label].append(time_import(python, statement))
        base = statistics.median(times[next(iter(CASES))])
        version = sys.version.split()[0]
        print(f"\nimport time, {args.runs} fresh interpreters per case (python {version})")
        print(f"| {'case':<56} | median s | min s | x baseline |")
        print(f"|{'-' * 58}|----------|-------|------------|")
        for label, values in times.items():
            median = statistics.median(values)
            print(f"| {label:<56} | {median:8.3f} | {min(values):5.3f} | {median / base:10.2f} |")


if __name__ == "__main__":
    main()
