"""The light client as a harness installs it: own environment, own requirements, real service.

``pip install ./client`` into an empty virtual environment must bring httpx and pydantic (and
the two small pure-Python helpers tenacity and tqdm), nothing of the server's stack; the package
must import there without the engine; and it must grade against a real ``bonusjudge serve``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.helpers.processes import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]

ALLOWED = {
    # the client and what it asks for
    "bonusjudge-client", "httpx", "pydantic", "tenacity", "tqdm",
    # what those bring
    "anyio", "certifi", "h11", "httpcore", "idna", "sniffio", "pydantic-core",
    "annotated-types", "typing-extensions", "typing-inspection", "exceptiongroup",
    # what a venv starts with
    "pip", "setuptools", "wheel",
}
"""Every distribution an environment may hold after ``pip install ./client``."""

HEAVY = ("torch", "litellm", "fastapi", "starlette", "sqlalchemy", "numpy", "transformers",
         "instructor", "diskcache", "judge", "api", "core", "rubrics")
"""Modules that must not be imported (or importable) where only the light client is."""


def _python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


@pytest.fixture(scope="module")
def light_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty virtual environment with ``pip install ./client`` (not editable) in it."""
    env_dir = tmp_path_factory.mktemp("light") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    done = subprocess.run(
        [str(_python(env_dir)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         str(ROOT / "client")],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return env_dir


def _run(env_dir: Path, code: str, timeout: float = 120) -> str:
    # -I: isolated, so neither the working directory (this repository) nor PYTHONPATH can lend
    # the engine to the client's interpreter.
    done = subprocess.run(
        [str(_python(env_dir)), "-I", "-c", code],
        capture_output=True, text=True, timeout=timeout, check=False, cwd="/",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.process
def test_installs_alone_with_httpx_and_pydantic(light_env: Path) -> None:
    listed = subprocess.run(
        [str(_python(light_env)), "-m", "pip", "list", "--format=json",
         "--disable-pip-version-check"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    names = {entry["name"].lower().replace("_", "-") for entry in json.loads(listed.stdout)}
    assert {"bonusjudge-client", "httpx", "pydantic"} <= names
    assert names <= ALLOWED, f"installed beyond the allowed set: {sorted(names - ALLOWED)}"


@pytest.mark.process
def test_imports_without_the_engine(light_env: Path) -> None:
    out = _run(light_env, (
        "import importlib.util, sys\n"
        "from bonusjudge_client import AsyncJudgeClient, GradeRequest, GradeResult, JudgeClient\n"
        f"heavy = {HEAVY!r}\n"
        "print([m for m in heavy if m in sys.modules or importlib.util.find_spec(m)])\n"
    ))
    assert out.strip() == "[]"


@pytest.mark.process
def test_grades_against_a_running_service(light_env: Path, tmp_path: Path) -> None:
    items = [
        {"id": "wickham", "question": "What does Elizabeth come to believe about Wickham?",
         "reference": "She realises that Wickham lied to her about Darcy.",
         "bonus_points": ["Elizabeth realises Wickham lied to her"],
         "response": "She realises that Wickham lied to her about Darcy."},
        {"id": "empty", "question": "What does Elizabeth come to believe about Wickham?",
         "reference": "She realises that Wickham lied to her about Darcy.",
         "bonus_points": ["Elizabeth realises Wickham lied to her"],
         "response": "The weather in Hertfordshire was fine."},
    ]
    args = ["--metrics", "coverage,rouge_l", "--cache-dir", str(tmp_path / "cache")]
    with ServiceProcess(args, tmp_path, env={"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}) \
            as service:
        out = _run(light_env, (
            "import json, sys\n"
            "from bonusjudge_client import AsyncJudgeClient, JudgeClient\n"
            f"items = json.loads({json.dumps(json.dumps(items))})\n"
            f"with JudgeClient({service.url!r}) as client:\n"
            "    results = client.grade_many(items, progress=False)\n"
            "import asyncio\n"
            "async def one():\n"
            f"    async with AsyncJudgeClient({service.url!r}) as client:\n"
            "        return await client.grade(items[0])\n"
            "again = asyncio.run(one())\n"
            "print(json.dumps([[r.id, r.status, r.coverage.coverage, r.rouge_l.f1] "
            "for r in results] + [again.coverage.coverage]))\n"
        ), timeout=300)
    rows = json.loads(out)
    assert [row[:2] for row in rows[:2]] == [["wickham", "scored"], ["empty", "scored"]]
    assert rows[0][2] == 1.0 and rows[1][2] == 0.0, rows
    assert rows[0][3] == pytest.approx(1.0) and rows[1][3] < 0.3, rows
    assert rows[2] == 1.0


def test_the_service_and_the_client_share_one_model() -> None:
    # One implementation: what the engine returns is the class the client parses into.
    from bonusjudge_client import GradeRequest, Summary
    from judge.aggregate import Summary as EngineSummary
    from judge.config import JudgeOverrides

    assert EngineSummary is Summary
    assert JudgeOverrides.__module__ == "bonusjudge_client.wire.options"
    assert GradeRequest.__module__ == "bonusjudge_client.wire.grading"


@pytest.mark.process
def test_client_import_in_the_server_environment_stays_light() -> None:
    code = (
        "import sys, bonusjudge_client\n"
        "heavy = [m for m in ('fastapi', 'starlette', 'torch', 'litellm', 'judge', 'core') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == ""
