"""Tests never write into the user's home (issue 28).

A test run left ``llama-server-<port>.log`` in ``~/.cache/bonusjudge/logs``: the local LLM's log
went to the user cache folder whatever ``--cache-dir`` said. ``tests/conftest.py`` points the user
cache and config folders at a throwaway one for the whole session, and ``bonusjudge serve`` keeps
the log beside its own cache.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from pathlib import Path

import pytest

from judge.config import default_cache_dir
from judge.providers.local_llm import COMMAND_ENV
from tests.helpers.processes import ServiceProcess


def test_the_session_points_the_user_folders_at_a_throwaway_one() -> None:
    home = Path("~").expanduser().resolve()
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        folder = Path(os.environ[name]).resolve()
        assert folder.is_relative_to(Path(tempfile.gettempdir()).resolve()), name
        assert not folder.is_relative_to(home), name
    assert default_cache_dir().resolve().is_relative_to(Path(os.environ["XDG_CACHE_HOME"]))


@pytest.mark.process
def test_the_local_llm_log_goes_beside_the_service_cache(tmp_path: Path) -> None:
    # The llama.cpp server's place is taken by the stand-in judge, started by the same code.
    stand_in = shlex.join([sys.executable, "-m", "standins.openai_server", "--port",
                           "{port}"]).replace("'{port}'", "{port}")
    home, xdg, cache = tmp_path / "home", tmp_path / "xdg", tmp_path / "cache"
    home.mkdir()
    env = {COMMAND_ENV: stand_in, "HOME": str(home), "XDG_CACHE_HOME": str(xdg)}
    with ServiceProcess(["--local-llm", "--cache-dir", str(cache)], tmp_path, env=env):
        logs = sorted(path.name for path in (cache / "logs").glob("llama-server-*.log"))
        assert len(logs) == 1, logs
    assert list(home.iterdir()) == []
    assert not (xdg / "bonusjudge" / "logs").exists()
