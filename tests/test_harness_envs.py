"""scripts/harness-envs.sh: an environment that cannot be built is an error, never a skip.

Building a real environment takes minutes (the harness tests use the ones it built); here, only
its refusals, which must stop the test command with the reason and the end of the log.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "harness-envs.sh"

pytestmark = pytest.mark.process


def run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The script with its environments under ``tmp_path``."""
    return subprocess.run(
        [str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "HARNESS_DIR": str(tmp_path / "harness"), **env}, check=False,
    )


def test_a_failed_install_exits_non_zero_with_the_end_of_its_log(tmp_path: Path) -> None:
    # A Python that cannot create the environment: the first step fails.
    done = run(tmp_path, "openapi", PYTHON="false")
    assert done.returncode == 1
    assert done.stderr.startswith(f"harness-envs: openapi: python -m venv failed; the end of "
                                  f"{tmp_path / 'harness'}/openapi.log:")
    assert not (tmp_path / "harness" / "openapi" / ".harness-stamp").exists()


def test_an_unknown_environment_is_refused(tmp_path: Path) -> None:
    done = run(tmp_path, "conda")
    assert done.returncode == 2
    assert "unknown environment conda (inspect, autoevals, lmeval, openapi, node)" in done.stderr
