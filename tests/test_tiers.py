"""The test tiers (issue 42.4): a plain ``pytest`` runs the unit tier; ``--run-process`` (what
scripts/test.sh passes) or ``-m process`` adds the tests that start processes and servers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]


def collected(*args: str) -> tuple[int, int]:
    """(selected, deselected) of a collect-only run of this file and test_scripts.py."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-o", "addopts=--import-mode=importlib", "-p",
         "no:randomly", "--collect-only", "-q", "tests/test_scripts.py", "tests/test_tiers.py",
         *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    last = done.stdout.strip().splitlines()[-1]
    if last.startswith("no tests collected"):
        none = re.search(r"\((\d+) deselected\)", last)
        return 0, int(none.group(1)) if none else 0
    match = re.match(r"(?:(\d+)/)?(\d+) tests? collected(?: \((\d+) deselected\))?", last)
    assert match, done.stdout + done.stderr
    total = int(match.group(2))
    return int(match.group(1) or total), int(match.group(3) or 0)


def test_a_plain_pytest_leaves_the_process_tier_out_and_the_flag_runs_it() -> None:
    selected, deselected = collected()
    assert selected == 0 and deselected > 5  # both files are process tests
    everything, none = collected("--run-process")
    assert (everything, none) == (deselected, 0)
    assert collected("-m", "process") == (everything, 0)
    assert collected("-m", "not process")[0] == 0
