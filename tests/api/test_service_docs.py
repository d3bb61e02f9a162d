"""docs/service.md documents every route of the service, and its examples run as pasted.

The route table there is what users read to call the service; a route added or renamed in
``api/`` without its row (or a row left for a route that is gone) fails here. The page's shell
examples ("Every route, by example") are run in order, as a user pastes them, by bash against
``bonusjudge serve`` with its default embedded judge: each must exit 0 and print what the line
under it says.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from starlette.routing import Route

from tests.helpers.processes import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "service.md"
# `| GET | `/v1/jobs/{id}` | ...`; one row may list several paths (`/docs`, `/redoc`, ...).
ROW = re.compile(r"^\| (GET|POST|PUT|PATCH|DELETE) \| (`[^|]+`) \|", re.M)


def normalized(path: str) -> str:
    """A path with every parameter written `{id}`, as the docs write them (`{name:path}` too)."""
    path = re.sub(r"\{name(:path)?\}", "{name}", path)
    return re.sub(r"\{(job_id|report_id|rubric_id)\}", "{id}", path)


def documented() -> set[tuple[str, str]]:
    """The (method, path) pairs of the route table of docs/service.md."""
    pairs = set()
    for method, cell in ROW.findall(DOC.read_text(encoding="utf-8")):
        for path in re.findall(r"`([^`]+)`", cell):
            pairs.add((method, path))
    return pairs


def served(app: FastAPI) -> set[tuple[str, str]]:
    """The (method, path) pairs the app answers, HEAD aside.

    The routers' routes are read from the OpenAPI schema (FastAPI keeps included routers as
    private objects); the routes outside it (the API docs' pages) from the app's own list.
    """
    pairs = {
        (method.upper(), normalized(path))
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    for route in app.routes:
        if isinstance(route, Route):
            pairs |= {(method, normalized(route.path)) for method in route.methods or ()}
    return {(method, path) for method, path in pairs if method != "HEAD"}


def test_every_route_is_documented(make_app: Callable[..., FastAPI]) -> None:
    routes = served(make_app())
    assert len(routes) >= 25  # the app was read, not an empty router
    assert routes - documented() == set(), "routes missing from docs/service.md's table"


def test_no_documented_route_is_missing_from_the_service(
    make_app: Callable[..., FastAPI],
) -> None:
    assert documented() - served(make_app()) == set(), "docs/service.md lists routes not served"


# -- the examples, run as pasted ------------------------------------------------------------------

EXAMPLES = "## Every route, by example"
"""The section whose shell blocks run as pasted, in order, against ``bonusjudge serve``."""

DOC_ADDRESS = "B=localhost:8000"
"""Where the examples send their requests: replaced by the test service's address."""

REMARK = re.compile(r"\s{3,}\(.*\)$")
"""A remark after a sample (three spaces, then parentheses): what else may be printed."""


@dataclass
class Step:
    """One command of the examples and the line under it, when it shows what it prints.

    Attributes:
        command: The shell line as the page has it.
        sample: The comment line under it without its ``# `` (None: the command prints nothing
            worth showing, or its output is not shown).
    """

    command: str
    sample: str | None = None

    def expected(self) -> re.Pattern[str] | None:
        """What the command must print: the sample, each ``…`` standing for any text.

        A remark after the sample (``   (...)``) is left out; a sample that is only a remark
        says in words what happens, and is not matched. The rest is literal: the whole of one
        line of the output (a line of the Prometheus text, the first of the Markdown report),
        or all of it (``…`` spans the lines of an indented JSON answer).
        """
        if self.sample is None:
            return None
        sample = REMARK.sub("", self.sample)
        if sample.startswith("(") and sample.endswith(")"):
            return None
        parts = [re.escape(part) for part in sample.split("…")]
        return re.compile("(?ms)^" + ".*?".join(parts) + "$")


def example_steps(text: str) -> list[Step]:
    """The commands of the examples' ```bash blocks, in order, with the samples under them."""
    section = text[text.index(EXAMPLES):]
    section = section[:section.index("\n## ", len(EXAMPLES))]
    steps: list[Step] = []
    for block in re.findall(r"^```bash\n(.*?)^```", section, flags=re.S | re.M):
        for line in block.splitlines():
            if line.startswith("# "):
                assert steps and steps[-1].sample is None, f"a sample without a command: {line}"
                steps[-1].sample = line[2:]
            elif line.strip():
                steps.append(Step(line))
    return steps


def test_every_curl_example_of_the_page_is_in_the_section_that_runs() -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    with_curl = [block for block in blocks if "curl " in block]
    ran = "\n".join(step.command for step in example_steps(text))
    assert with_curl and all(
        line in ran for block in with_curl for line in block.splitlines()
        if line.strip() and not line.startswith("#")
    )


@pytest.mark.process
def test_the_examples_run_as_pasted_against_bonusjudge_serve(tmp_path: Path) -> None:
    # The calibration block cancelled its own run when pasted (its DELETE came before the
    # report requests), and no block set the $ID, $MID and $CID it used.
    steps = example_steps(DOC.read_text(encoding="utf-8"))
    assert steps[0].command.startswith(DOC_ADDRESS), steps[0]
    (tmp_path / "judge").symlink_to(ROOT / "judge")  # the MCQ upload's @judge/data/... path
    with ServiceProcess(["--cache-dir", str(tmp_path / "cache")], tmp_path,
                        env={"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}) as service:
        script = []
        for n, step in enumerate(steps):
            command = step.command.replace(DOC_ADDRESS, "B=" + service.url.removeprefix("http://"))
            script += [f"printf '\\n@@step {n}@@\\n'", command,
                       f"printf '\\n@@status {n} %s@@\\n' \"$?\""]
        (tmp_path / "examples.sh").write_text("\n".join(script) + "\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BONUSJUDGE_", "OPERATOR"))}
        ran = subprocess.run(["bash", "examples.sh"], cwd=tmp_path, env=env, timeout=300,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             check=False)
    printed = dict(re.findall(r"@@step (\d+)@@\n(.*?)\n@@status \1 ", ran.stdout, flags=re.S))
    statuses = dict(re.findall(r"@@status (\d+) (\d+)@@", ran.stdout))
    failures = []
    for n, step in enumerate(steps):
        output = printed.get(str(n), "").strip()
        expected = step.expected()
        if statuses.get(str(n)) != "0":
            failures.append(f"{step.command}\n  exited {statuses.get(str(n))}: {output[:600]}")
        elif expected is not None and not expected.search(output):
            failures.append(f"{step.command}\n  the page says: {step.sample}\n"
                            f"  it printed:    {output[:1500]}")
    assert not failures, "\n\n".join(failures) + f"\n\n({len(failures)} of {len(steps)})"
    assert len(statuses) == len(steps) > 30, ran.stdout[-3000:]  # every step ran
    assert (tmp_path / "scatter.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
