"""promptfoo grades outputs through the service: examples/promptfoo's Python assertion.

``promptfoo eval -c promptfooconfig.yaml`` runs from ``.harness/node`` with the ``echo`` provider
(the output is each test's ``response``), offline, its Python assertion in ``.harness/autoevals``
(a harness environment with the light client, no bonusjudge). Each test's score must be the
coverage the service gives that answer; a defect fails a test; the item the judge cannot grade
fails as unscored, with its reason, rather than as a low grade.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.processes import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "promptfoo"

pytestmark = pytest.mark.process


def test_promptfoo_eval_scores_coverage_fails_defects_and_flags_the_unscored(
    harness: Callable[..., Path],
    service: ServiceProcess,
    marked_items: list[dict[str, Any]],
    write_jsonl: Callable[..., Path],
    results_of: Callable[..., Any],
    tmp_path: Path,
) -> None:
    promptfoo = harness("node", "node_modules", ".bin", "promptfoo")
    python = harness("autoevals", "bin", "python")
    # The example as shipped, over the test's items.
    config = tmp_path / "promptfoo"
    shutil.copytree(EXAMPLE, config, ignore=shutil.ignore_patterns("__pycache__"))
    write_jsonl(config / "tests.jsonl",
                [{"description": item["id"], "vars": item} for item in marked_items])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BONUSJUDGE_", "PROMPTFOO_", "VIRTUAL_ENV"))}
    env.update({
        "BONUSJUDGE_URL": service.url, "PROMPTFOO_PYTHON": str(python),
        "PROMPTFOO_DISABLE_TELEMETRY": "1", "PROMPTFOO_DISABLE_UPDATE": "1",
        "PROMPTFOO_CONFIG_DIR": str(tmp_path / "promptfoo-home"),
    })
    done = subprocess.run(
        [str(promptfoo), "eval", "-c", str(config / "promptfooconfig.yaml"), "--no-share",
         "--no-cache", "--no-table", "-o", str(tmp_path / "out.json")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    # promptfoo exits 100 when a test fails; two do here, by design.
    assert done.returncode in (0, 100), done.stdout[-3000:] + done.stderr[-3000:]
    assert "8 passed" in done.stdout and "2 failed" in done.stdout and "0 errors" in done.stdout

    want = {r.id: r for r in results_of(marked_items)}
    out = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    got = {r["testCase"]["description"]: r for r in out["results"]["results"]}
    assert set(got) == set(want)  # one test per item: bonus_points did not expand
    for item_id, result in want.items():
        (check,) = got[item_id]["gradingResult"]["componentResults"]
        if result.coverage is None or result.coverage.coverage is None:
            assert item_id == marked_items[1]["id"]
            assert not check["pass"]
            assert check["reason"].startswith(
                "unscored (not a grade): coverage: parse_failure"), check["reason"]
            continue
        assert check["score"] == pytest.approx(result.coverage.coverage)
        point = result.coverage.verdicts[0].text
        assert check["reason"].startswith(f"covers 1 of {result.coverage.total} bonus points: "
                                          f"{point}")
        penalized = item_id == marked_items[2]["id"]
        assert bool(result.defects and result.defects.penalized) is penalized
        assert check["pass"] is not penalized  # every other answer covers at least half
        if penalized:
            assert check["reason"].endswith(". Defects: The response misreads the plot.")


def _readme_promptfoo_command() -> str:
    """The promptfoo command of the README's harness table, as printed."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (row,) = [line for line in readme.splitlines() if line.startswith("| promptfoo |")]
    (command,) = [cell for cell in re.findall(r"`([^`]*)`", row) if " promptfoo eval " in cell]
    return command


def test_the_readme_promptfoo_command_runs_as_printed(
    harness: Callable[..., Path], tmp_path: Path
) -> None:
    """Issue 40: the README's command gave 0 passed / 3 failed (``No module named
    'bonusjudge_client'``): promptfoo runs the assertion with the first ``python3`` on the PATH.
    Here that is a Python without the light client, and ``PROMPTFOO_PYTHON`` is not set.
    """
    words = shlex.split(_readme_promptfoo_command())
    given = dict(word.split("=", 1) for word in words if re.match(r"^[A-Z_]+=", word))
    args = [word for word in words if not re.match(r"^[A-Z_]+=", word)]
    assert args[0] == "promptfoo" and given.keys() == {"BONUSJUDGE_URL"}
    bare = Path(sys.base_prefix) / "bin" / "python3"  # the interpreter the venv was made from
    lacks = subprocess.run([str(bare), "-c", "import bonusjudge_client"], capture_output=True,
                           check=False)
    assert lacks.returncode != 0, "the bare interpreter must lack the light client"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BONUSJUDGE_", "PROMPTFOO_", "VIRTUAL_ENV"))}
    env.update({
        "PATH": f"{bare.parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "PROMPTFOO_DISABLE_TELEMETRY": "1", "PROMPTFOO_DISABLE_UPDATE": "1",
        "PROMPTFOO_CONFIG_DIR": str(tmp_path / "promptfoo-home"),
    })
    with ServiceProcess(["--cache-dir", str(tmp_path / "cache")], tmp_path) as served:
        env["BONUSJUDGE_URL"] = given["BONUSJUDGE_URL"].replace("http://127.0.0.1:8000",
                                                                 served.url)
        done = subprocess.run(
            [str(harness("node", "node_modules", ".bin", "promptfoo")), *args[1:]],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
        )
    output = done.stdout + done.stderr
    assert "No module named" not in output, output[-3000:]
    # The shipped tests against the default (embedded) judge: two answers cover at least half
    # their points, one covers none; promptfoo exits 100 when a test fails.
    assert done.returncode in (0, 100), output[-3000:]
    assert "2 passed" in done.stdout and "1 failed" in done.stdout and "0 errors" in done.stdout
