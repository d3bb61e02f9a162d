"""Clients generated from the OpenAPI document grade through ``bonusjudge serve``, in two languages.

A harness in another language starts from ``/openapi.json``. Each generator runs as its user runs
it, from the environments ``scripts/harness-envs.sh`` builds: openapi-python-client with the
settings the repository ships (``docs/openapi-python-client.yaml``), openapi-typescript with
openapi-fetch under tsx (``examples/typescript/grade.ts``). Neither may print a warning (the
document once sent openapi-python-client a dangling ``$ref`` and JSON Lines it dropped, and
openapi-typescript refused it). Each client then grades 20 items through the batch route and
through a JSON job, and must get the grades the project's own client gets.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bonusjudge_client import GradeResult
from judge.io import chartom_to_request
from tests.helpers.processes import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "docs" / "openapi.json"

pytestmark = pytest.mark.process

Grades = dict[str, tuple[str | None, float | None]]
"""Item id -> (status, coverage): what the clients must agree on."""


@pytest.fixture
def items(marked_items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """20 grading requests: the bundled CharToM lines (one ungradable) and each answered again."""
    requests = [chartom_to_request(item).model_dump(mode="json", exclude_defaults=True)
                for item in marked_items]
    again = [{**request, "id": f"{request['id']}-again",
              "response": f"{request['response']} That is all."} for request in requests]
    return requests + again


@pytest.fixture
def expected(
    items: list[dict[str, Any]],
    results_of: Callable[[list[dict[str, Any]]], list[GradeResult]],
) -> Grades:
    """The grades the project's own client gets for ``items`` from the same service."""
    grades: Grades = {
        result.id or "": (result.status, result.coverage.coverage if result.coverage else None)
        for result in results_of(items)
    }
    assert len(grades) == 20
    assert sum(status == "unscored" for status, _ in grades.values()) == 2  # both ungradable
    return grades


def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a harness tool; its standard output and error, which must end in success."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def test_openapi_python_client_grades_a_batch_and_a_json_job(
    harness: Callable[..., Path],
    service: ServiceProcess,
    items: list[dict[str, Any]],
    expected: Grades,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    generator = harness("openapi", "bin", "openapi-python-client")
    # Its post-generation hooks run ruff, which the environment holds.
    env = {**os.environ, "PATH": f"{generator.parent}{os.pathsep}{os.environ['PATH']}"}
    output = run(
        [str(generator), "generate", "--path", str(CONTRACT), "--config",
         str(ROOT / "docs" / "openapi-python-client.yaml")],
        cwd=tmp_path, env=env,
    )
    project = tmp_path / "bonusjudge-openapi-client"
    assert output.strip().splitlines() == [f"Generating {project}"], output

    monkeypatch.syspath_prepend(str(project))

    def generated(name: str) -> Any:
        return importlib.import_module(f"bonusjudge_openapi_client.{name}")

    models = generated("models")
    client = generated("client").Client(base_url=service.url, raise_on_unexpected_status=True)
    grade_requests = [models.GradeRequest.from_dict(item) for item in items]

    batch = generated("api.grading.grade_batch").sync(
        client=client, body=models.BatchBody(items=grade_requests)
    )
    assert isinstance(batch, models.BatchResponse), batch
    assert grades_of(entry.to_dict() for entry in batch.results) == expected

    job = generated("api.jobs.submit_job").sync(
        client=client, body=models.JobBody(items=grade_requests)
    )
    assert isinstance(job, models.JobStatus), job
    deadline = time.monotonic() + 300
    while job.status in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.2)
        job = generated("api.jobs.get_job").sync(client=client, job_id=job.id)
    assert (job.status, job.total, job.invalid) == ("done", 20, 0)
    lines = generated("api.jobs.get_job_results").sync(client=client, job_id=job.id)
    # JSON Lines reach the client as raw bytes; each line is a BatchEntry of its models.
    entries = [models.BatchEntry.from_dict(json.loads(line))
               for line in lines.payload.read().decode().splitlines() if line.strip()]
    assert grades_of(entry.to_dict() for entry in entries) == expected


def test_openapi_typescript_client_grades_a_batch_and_a_json_job(
    harness: Callable[..., Path],
    service: ServiceProcess,
    items: list[dict[str, Any]],
    expected: Grades,
    write_jsonl: Callable[..., Path],
    tmp_path: Path,
) -> None:
    bin_dir = harness("node", "node_modules", ".bin")
    # The example as its header says to run it: types generated beside it from the served
    # document, openapi-fetch found in node_modules next to it.
    (tmp_path / "grade.ts").write_text(
        (ROOT / "examples" / "typescript" / "grade.ts").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    (tmp_path / "node_modules").symlink_to(bin_dir.parent)
    output = run(
        [str(harness("node", "node_modules", ".bin", "openapi-typescript")),
         f"{service.url}/openapi.json", "-o", "bonusjudge-api.d.ts"],
        cwd=tmp_path,
    )
    # A version line and a done line; a warning or an error would be a line of its own.
    assert [line for line in output.strip().splitlines()
            if not line.startswith(("✨ openapi-typescript", "🚀 "))] == [], output
    data = write_jsonl(tmp_path / "items.jsonl", items)
    printed = run([str(harness("node", "node_modules", ".bin", "tsx")), "grade.ts", service.url,
                   str(data)], cwd=tmp_path)
    graded = json.loads(printed.strip().splitlines()[-1])
    assert grades_of(graded["batch"], flat=True) == expected
    assert graded["job"]["status"] == "done"
    assert grades_of(graded["job"]["results"], flat=True) == expected


def grades_of(entries: Any, *, flat: bool = False) -> Grades:
    """Item id -> (status, coverage) of ``BatchEntry`` dicts, or of the example's flat rows."""
    grades: Grades = {}
    for entry in entries:
        if flat:
            grades[entry["id"]] = (entry["status"], entry["coverage"])
            continue
        result = entry.get("result") or {}
        grades[entry["id"]] = (result.get("status"), (result.get("coverage") or {}).get("coverage"))
    return grades


def test_openapi_python_client_warns_only_of_a_missing_ruff(
    harness: Callable[..., Path], tmp_path: Path
) -> None:
    """What docs/service.md says of the generator, both ways (issue 40: "without a warning" did
    not hold when ruff was not on the PATH): with the ruff it installs on the PATH, one line;
    without, its formatting hooks are skipped with "ruff is not in PATH", and nothing else."""
    generator = harness("openapi", "bin", "openapi-python-client")
    argv = [str(generator), "generate", "--path", str(CONTRACT), "--config",
            str(ROOT / "docs" / "openapi-python-client.yaml")]
    with_ruff = tmp_path / "with"
    without = tmp_path / "without"
    with_ruff.mkdir()
    without.mkdir()
    quiet = run(argv, cwd=with_ruff, env={**os.environ, "PATH": f"{generator.parent}{os.pathsep}"
                                           f"{os.environ['PATH']}"})
    assert quiet.strip().splitlines() == [f"Generating {with_ruff / 'bonusjudge-openapi-client'}"]
    bare = [p for p in os.environ["PATH"].split(os.pathsep)
            if p and not (Path(p) / "ruff").exists()]
    noisy = run(argv, cwd=without, env={**os.environ, "PATH": os.pathsep.join(bare)})
    lines = {line.strip() for line in noisy.splitlines() if line.strip()}
    assert "ruff is not in PATH" in lines
    assert lines - {"ruff is not in PATH", "Skipping Integration",
                    f"Generating {without / 'bonusjudge-openapi-client'}",
                    "Warning(s) encountered while generating. Client was generated, but some "
                    "pieces may be missing"} <= {
        line for line in lines if line.startswith("If you believe this was a mistake")}
    assert (without / "bonusjudge-openapi-client" / "bonusjudge_openapi_client" / "client.py"
            ).exists()
