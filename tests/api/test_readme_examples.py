"""The README's and docs/clients.md's Python examples, run as a user runs them.

Both show the sync and the async client against ``bonusjudge serve``; their code blocks are run
unchanged (only the URL is the test service's) in a new interpreter, against ``bonusjudge serve``
started as an operator starts it, with the stand-in judge. An example that does not run (a
placeholder left in, a renamed method) fails here, not in a reader's terminal.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess, run_python

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLIENTS_DOC = ROOT / "docs" / "clients.md"
README_URL = "http://127.0.0.1:8000"


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_shows_sync_and_async_grade_many() -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    code = "\n".join(blocks)
    assert "JudgeClient(" in code and "AsyncJudgeClient(" in code
    assert ".grade_many(items)" in code and "await client.grade_many(items)" in code
    assert all(README_URL in block for block in blocks if "Client(" in block)


def client_blocks(path: Path) -> str:
    """The ```python blocks of ``path`` that use a client, as one script."""
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    return "\n".join(block for block in blocks if "Client(" in block)


@pytest.mark.process
def test_python_examples_run_against_a_real_service(tmp_path: Path) -> None:
    scripts = {doc: client_blocks(doc) for doc in (README, CLIENTS_DOC)}
    with (
        OpenAIStandIn() as judge,
        ServiceProcess(
            ["--model", "openai/standin", "--api-base", judge.base_url,
             "--metrics", "coverage,rouge_l", "--cache-dir", str(tmp_path / "cache")],
            tmp_path,
        ) as service,
    ):
        done = {
            doc: run_python(
                code.replace(README_URL, service.url),
                cwd=ROOT,
                env={"XDG_CACHE_HOME": str(tmp_path / "xdg")},
                timeout=300,
            )
            for doc, code in scripts.items()
        }
    for doc, run in done.items():
        assert run.returncode == 0, f"{doc.name}: {run.stderr[-3000:]}"
    lines = done[README].stdout.splitlines()
    # The sync example prints the first result's coverage; the async one each streamed result.
    assert 0.0 <= float(lines[0]) <= 1.0
    assert lines[1].startswith("0 ") and "levin-1" in lines[1]
    # docs/clients.md ends with a job's summary: its bpc_all.
    assert 0.0 <= float(done[CLIENTS_DOC].stdout.splitlines()[-1]) <= 1.0
