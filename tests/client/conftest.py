"""What the harness tests share: the harness environments, a scripted service, the items.

Each harness test runs a real harness (inspect_ai, lm-evaluation-harness, promptfoo) from the
environment ``scripts/harness-envs.sh`` builds under ``.harness/``, against ``bonusjudge serve``
started as an operator starts it. The service's judge is the stand-in OpenAI-compatible server
answering in the paper's text format (``--rubric chartom-paper``), scripted by what the prompt
says, so coverage, defects and an unscored item are known in advance, whatever the harness's
model answered (lm-evaluation-harness's ``dummy`` model answers "lol" to everything):

* every judged response covers bonus point 1;
* an item whose prompt contains ``(wrong)`` has a defect;
* an item whose prompt contains ``UNGRADABLE`` gets a reply that does not parse: coverage and
  defects unscored (``parse_failure``).

``marked_items`` are the bundled CharToM-QA lines with the second question marked ungradable and
the third wrong; ``summary_of`` grades items through the same service with the project's own
client and aggregator, so a harness's figures are checked against what the service computes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from bonusjudge_client import GradeResult, JudgeClient, Summary
from judge.aggregate import Aggregator
from judge.io import chartom_to_request
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / os.environ.get("HARNESS_DIR", ".harness")
"""Where scripts/harness-envs.sh builds the environments (``HARNESS_DIR`` moves both)."""
BUNDLED_ITEMS = ROOT / "judge" / "data" / "examples_chartom.jsonl"

UNGRADABLE = "UNGRADABLE"
"""A response holding this gets judge replies that do not parse."""

WRONG = "(wrong)"
"""A response holding this has a defect."""


def paper_judge(body: dict[str, Any]) -> str:
    """The stand-in judge's reply to one chat-completions body (see the module docstring)."""
    text = " ".join(str(message.get("content")) for message in body["messages"])
    if UNGRADABLE in text:
        return "I cannot tell."
    if "[Bonus Points]" in text:  # the paper's coverage prompt
        return "[Included Bonus Points]: 1"
    return "[Defect]: The response misreads the plot." if WRONG in text else "[Defect]: None"


def _harness_path(env: str, *parts: str) -> Path:
    """A path inside the harness environment ``env``; fails the test when it is not built."""
    path = HARNESS.joinpath(env, *parts)
    if not path.exists():
        pytest.fail(
            f"{path} is missing: build the harness environments with "
            "scripts/harness-envs.sh (scripts/test.sh does it before pytest)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """``bonusjudge serve`` judging with the scripted stand-in, coverage and defects."""
    workdir = tmp_path_factory.mktemp("service")
    with (
        OpenAIStandIn(handler=paper_judge) as judge,
        ServiceProcess(
            ["--model", "openai/standin", "--api-base", judge.base_url, "--rubric",
             "chartom-paper", "--metrics", "coverage,defects", "--cache-dir",
             str(workdir / "cache")],
            workdir,
        ) as served,
    ):
        yield served


@pytest.fixture
def harness() -> Callable[..., Path]:
    """``harness(env, *parts)``: a path in ``.harness/env``; fails naming the build script."""
    return _harness_path


@pytest.fixture
def marked_items() -> list[dict[str, Any]]:
    """The bundled CharToM-QA lines (English and Chinese, answers included), the second one
    marked ungradable and the third one wrong."""
    lines = BUNDLED_ITEMS.read_text(encoding="utf-8").splitlines()
    items = [json.loads(line) for line in lines if line.strip()]
    items[1]["question"] += f" {UNGRADABLE}"
    items[2]["question"] += f" {WRONG}"
    return items


@pytest.fixture
def write_jsonl() -> Callable[[Path, Sequence[Mapping[str, Any]]], Path]:
    """``write_jsonl(path, items)``: the items as JSONL at ``path``, returned."""

    def write(path: Path, items: Sequence[Mapping[str, Any]]) -> Path:
        text = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def results_of(
    service: ServiceProcess,
) -> Callable[[Sequence[Mapping[str, Any]]], list[GradeResult]]:
    """``results_of(items)``: the service's grades of CharToM lines with their ``response``."""

    def grade(items: Sequence[Mapping[str, Any]]) -> list[GradeResult]:
        with JudgeClient(service.url) as client:
            requests = [chartom_to_request(dict(item)) for item in items]
            return client.grade_many(requests, progress=False)

    return grade


@pytest.fixture
def summary_of(
    results_of: Callable[[Sequence[Mapping[str, Any]]], list[GradeResult]],
) -> Callable[[Sequence[Mapping[str, Any]]], Summary]:
    """``summary_of(items)``: the service's summary of CharToM lines with their ``response``."""
    return lambda items: Aggregator().extend(results_of(items)).summary()
