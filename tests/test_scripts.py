"""``scripts/demo.sh`` and ``scripts/setup.sh`` as users run them (issue 28).

Each script is copied into a bare tree under ``tmp_path`` beside stand-ins for what it calls (a
``setup.sh`` that only says it ran, a ``.venv/bin/python`` that prints what pip prints), so the
tests check the scripts' own behaviour in a few seconds, with nothing installed and the real
``.venv`` untouched.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def tree_with(tmp_path: Path, script: str) -> Path:
    """A bare tree holding a copy of ``scripts/<script>``; returns the copy."""
    copy = tmp_path / "repo" / "scripts" / script
    copy.parent.mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / script, copy)
    return copy


def run(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, **env}, check=False,
    )


def printed(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


# -- demo.sh --------------------------------------------------------------------------------------


def demo_with_stub_setup(tmp_path: Path) -> Path:
    demo = tree_with(tmp_path, "demo.sh")
    executable(demo.parent / "setup.sh", "#!/usr/bin/env bash\necho STUB-SETUP-RAN\nexit 1\n")
    return demo


def test_demo_with_its_port_taken_says_how_to_pick_another(tmp_path: Path) -> None:
    # It exited 1 after the install, with the service's log and no word on BONUSJUDGE_PORT.
    demo = demo_with_stub_setup(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run(demo, {"BONUSJUDGE_PORT": str(port)})
    assert done.returncode == 1
    assert printed(done) == [
        f"port {port} on 127.0.0.1 is in use; pick another: "
        f"BONUSJUDGE_PORT={port % 65535 + 1} scripts/demo.sh"
    ]  # at once: nothing installed for a demo that cannot run


def test_demo_refuses_a_port_that_is_no_number(tmp_path: Path) -> None:
    done = run(demo_with_stub_setup(tmp_path), {"BONUSJUDGE_PORT": "http"})
    assert done.returncode == 1
    assert printed(done) == ["BONUSJUDGE_PORT must be a port number (1-65535), got 'http'"]


def test_demo_on_a_free_port_goes_on_to_the_install(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run(demo_with_stub_setup(tmp_path), {"BONUSJUDGE_PORT": str(port)})
    assert done.returncode == 1  # the stand-in setup.sh fails
    assert "STUB-SETUP-RAN" in done.stdout and "install failed" in done.stdout


# -- setup.sh -------------------------------------------------------------------------------------

FAKE_PIP = """#!/usr/bin/env bash
# What `python -m pip install ...` prints, more or less (pkg-N: N arguments); FAIL_PIP fails it.
echo "WARNING: Location 'file:///x' is ignored"
echo "Collecting pkg-$#"
echo "  Using cached pkg-$#.whl"
echo "Installing collected packages: pkg-$#"
echo "Successfully installed pkg-$#"
if [ -n "${FAIL_PIP:-}" ]; then echo "ERROR: no matching distribution"; exit 3; fi
"""


def setup_tree(tmp_path: Path) -> Path:
    setup = tree_with(tmp_path, "setup.sh")
    repo = setup.parent.parent
    (repo / "constraints.txt").write_text("")
    (repo / "pyproject.toml").write_text("")
    executable(repo / ".venv" / "bin" / "python", FAKE_PIP)
    return setup


def test_setup_says_it_installs_and_shows_pip_progress(tmp_path: Path) -> None:
    # It was silent for minutes (pip -q) when scripts/test.sh installed.
    setup = setup_tree(tmp_path)
    done = run(setup, {}, "dev")
    assert done.returncode == 0, done.stderr
    lines = printed(done)
    assert lines[0] == (
        "setup: installing bonusjudge[dev] into .venv with the pinned versions (the first run "
        "takes a few minutes; pip's log: .venv/setup.log)"
    )
    assert lines[1:-1] == [
        "Collecting pkg-7", "Installing collected packages: pkg-7",  # --upgrade pip
        "Collecting pkg-8", "Installing collected packages: pkg-8",  # torch
        # the light client (-e ./client) and the project, in one pip run
        "Collecting pkg-11", "Installing collected packages: pkg-11",
    ]
    assert lines[-1].startswith("setup: installed in ")
    log = (setup.parent.parent / ".venv" / "setup.log").read_text()
    assert log.count("WARNING: Location") == 3 and log.count("Using cached") == 3
    # Up to date: nothing installed, nothing printed.
    again = run(setup, {}, "dev")
    assert again.returncode == 0 and printed(again) == []


def test_setup_shows_the_end_of_pips_log_when_it_fails(tmp_path: Path) -> None:
    setup = setup_tree(tmp_path)
    log = tmp_path / "logs" / "setup.log"
    done = run(setup, {"FAIL_PIP": "1", "BONUSJUDGE_SETUP_LOG": str(log)})
    assert done.returncode == 1
    assert f"setup: pip install failed; the end of {log}:" in done.stderr
    assert "ERROR: no matching distribution" in done.stderr
    assert not (setup.parent.parent / ".venv" / ".bonusjudge-installed").exists()


# -- test-fast.sh ---------------------------------------------------------------------------------

# Logs its name, its arguments, HF_HUB_OFFLINE (the script sets it) and whether
# PYTHONDONTWRITEBYTECODE is unset (the script unsets it), then exits CODE.
ARGS_LOGGER = (
    '#!/usr/bin/env bash\necho "$(basename "$0") $* ${{HF_HUB_OFFLINE:-}}'
    ' ${{PYTHONDONTWRITEBYTECODE-unset}}" >> "{log}"\n'
    "exit {code}\n"
)


def fast_tree(tmp_path: Path, ruff_code: int = 0, pytest_code: int = 0) -> tuple[Path, Path]:
    """A copy of ``test-fast.sh`` beside a ``.venv`` whose ruff and pytest log their arguments."""
    script = tree_with(tmp_path, "test-fast.sh")
    log = tmp_path / "calls.log"
    bin_dir = script.parent.parent / ".venv" / "bin"
    executable(bin_dir / "ruff", ARGS_LOGGER.format(log=log, code=ruff_code))
    executable(bin_dir / "pytest", ARGS_LOGGER.format(log=log, code=pytest_code))
    return script, log


def test_fast_loop_lints_then_runs_the_in_process_tests_with_the_callers_arguments(
    tmp_path: Path,
) -> None:
    script, log = fast_tree(tmp_path)
    done = run(
        script, {"HF_HUB_OFFLINE": "", "PYTHONDONTWRITEBYTECODE": "1"}, "tests/judge", "-k", "cache"
    )
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "ruff check . 1 unset",
        "pytest -n auto --dist worksteal -m not process -x -q --hypothesis-profile fast"
        " tests/judge -k cache 1 unset",
    ]


def test_fast_loop_passes_a_profile_the_caller_names_last(tmp_path: Path) -> None:
    # pytest keeps the last value of an option: the caller's profile wins over the loop's.
    script, log = fast_tree(tmp_path)
    assert run(script, {}, "--hypothesis-profile", "full").returncode == 0
    assert log.read_text().splitlines()[-1].endswith(
        "--hypothesis-profile fast --hypothesis-profile full 1 unset"
    )


def test_fast_loop_stops_at_lint_errors_and_passes_pytests_exit_code_on(tmp_path: Path) -> None:
    script, log = fast_tree(tmp_path, ruff_code=1)
    assert run(script, {}).returncode == 1
    assert log.read_text().splitlines() == ["ruff check . 1 unset"]
    script, log = fast_tree(tmp_path / "again", pytest_code=5)
    assert run(script, {}).returncode == 5


def test_fast_loop_without_a_venv_says_how_to_make_one(tmp_path: Path) -> None:
    script = tree_with(tmp_path, "test-fast.sh")
    done = run(script, {})
    assert done.returncode == 2
    assert printed(done) == ["test-fast.sh: no .venv/bin/pytest; run scripts/setup.sh dev first"]
