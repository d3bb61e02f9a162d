"""lm-evaluation-harness runs examples/lm_eval's task offline and grades through the service.

``lm_eval --model dummy --include_path ... --tasks chartom_bonusjudge`` runs in
``.harness/lmeval`` (lm-eval and the light client, no bonusjudge) on a local CharToM-QA JSONL;
the dummy model answers "lol" to everything, so the scripted judge decides by the question. The
task's BPC, penalty rate and unscored count must be the service's own summary of the same
answers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.processes import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "lm_eval"
SHIPPED_DATA = "test: judge/data/examples_chartom.jsonl"
DUMMY_ANSWER = "lol"
"""What lm-evaluation-harness's dummy model generates, whatever the prompt."""

pytestmark = pytest.mark.process


def printed(output: str, metric: str) -> str:
    """The value lm_eval's results table shows for ``metric``."""
    match = re.search(rf"\|\s*{metric}\s*\|[^|]*\|\s*([^|\s]+)\s*\|", output)
    assert match, f"no {metric} row in:\n{output}"
    return match.group(1)


def test_lm_eval_task_reports_the_services_bpc_penalty_rate_and_unscored(
    harness: Callable[..., Path],
    service: ServiceProcess,
    marked_items: list[dict[str, Any]],
    write_jsonl: Callable[..., Path],
    summary_of: Callable[..., Any],
    tmp_path: Path,
) -> None:
    lm_eval = harness("lmeval", "bin", "lm_eval")
    # The example as shipped, but reading the test's documents.
    task = tmp_path / "task"
    shutil.copytree(TASK, task, ignore=shutil.ignore_patterns("__pycache__"))
    data = write_jsonl(tmp_path / "chartom.jsonl", marked_items)
    config = (task / "chartom_bonusjudge.yaml").read_text(encoding="utf-8")
    assert SHIPPED_DATA in config
    (task / "chartom_bonusjudge.yaml").write_text(
        config.replace(SHIPPED_DATA, f"test: {data}"), encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("BONUSJUDGE_")}
    env.update({"BONUSJUDGE_URL": service.url, "HF_DATASETS_OFFLINE": "1",
                "HF_HOME": str(tmp_path / "hf")})
    done = subprocess.run(
        [str(lm_eval), "--model", "dummy", "--include_path", str(task), "--tasks",
         "chartom_bonusjudge", "--output_path", str(tmp_path / "out")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    want = summary_of([{**item, "response": DUMMY_ANSWER} for item in marked_items])
    assert (want.coverage_unscored, want.points_covered, want.penalized) == (1, 9, 1)
    bpc = want.points_covered / want.points
    penalty_rate = want.penalized / want.defects_scored
    assert printed(done.stdout, "bpc") == f"{bpc:.4f}"
    assert printed(done.stdout, "penalty_rate") == f"{penalty_rate:.4f}"
    assert float(printed(done.stdout, "unscored")) == 1  # the ungradable document, not a zero

    (results_file,) = (tmp_path / "out").rglob("results_*.json")
    results = json.loads(results_file.read_text(encoding="utf-8"))["results"]
    figures = results["chartom_bonusjudge"]
    assert figures["bpc,none"] == pytest.approx(bpc, abs=1e-12)  # micro, as the paper
    assert figures["penalty_rate,none"] == pytest.approx(penalty_rate, abs=1e-12)
    assert figures["unscored,none"] == 1
