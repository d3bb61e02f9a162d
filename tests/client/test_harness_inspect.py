"""inspect_ai grades a file of answers through ``bonusjudge serve``: examples/inspect_chartom.py.

The example runs as a harness author runs it (``inspect eval ... --model mockllm/model -T
data=... -T url=...``) in ``.harness/inspect``, where inspect-ai and the light client are
installed and bonusjudge is not; its BPC and penalty rate must be the service's own summary of the
same answers, and the item the judge cannot grade must be inspect's unscored score, not 0.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.processes import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.process


def printed(output: str, name: str) -> str:
    """The value inspect printed for metric ``name`` in its results panel."""
    match = re.search(rf"^\s*{name}\s+(\S+)\s*$", output, flags=re.M)
    assert match, f"no {name} line in:\n{output}"
    return match.group(1)


def test_inspect_eval_reports_the_services_bpc_and_leaves_the_ungradable_unscored(
    harness: Callable[..., Path],
    service: ServiceProcess,
    marked_items: list[dict[str, Any]],
    write_jsonl: Callable[..., Path],
    summary_of: Callable[..., Any],
    tmp_path: Path,
) -> None:
    inspect = harness("inspect", "bin", "inspect")
    data = write_jsonl(tmp_path / "answers.jsonl", marked_items)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BONUSJUDGE_", "INSPECT_"))}
    env["INSPECT_LOG_DIR"] = str(tmp_path / "logs")
    done = subprocess.run(
        [str(inspect), "eval", "examples/inspect_chartom.py", "--model", "mockllm/model",
         "--log-format", "json", "-T", f"data={data}", "-T", f"url={service.url}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    want = summary_of(marked_items)
    # 10 items: one unscored (both tasks), 9 covering point 1 of theirs, one of them wrong.
    assert (want.coverage_unscored, want.points_covered, want.penalized) == (1, 9, 1)
    assert want.bpc is not None and want.penalty_rate is not None
    assert printed(done.stdout, "bpc") == f"{want.bpc:.3f}"
    assert printed(done.stdout, "penalty_rate") == f"{want.penalty_rate:.3f}"

    (log_file,) = (tmp_path / "logs").glob("*.json")
    log = json.loads(log_file.read_text(encoding="utf-8"))
    (scores,) = log["results"]["scores"]
    assert scores["name"] == "bonusjudge_scorer"
    # The summary rounds to 6 places; the log holds the exact figures.
    bpc = scores["metrics"]["bpc"]["value"]
    assert bpc == pytest.approx(want.points_covered / want.points, abs=1e-12)
    penalty_rate = scores["metrics"]["penalty_rate"]["value"]
    assert penalty_rate == pytest.approx(want.penalized / want.defects_scored, abs=1e-12)
    assert (scores["scored_samples"], scores["unscored_samples"]) == (9, 1)

    by_id = {s["id"]: s["scores"]["bonusjudge_scorer"] for s in log["samples"]}
    ungradable = by_id[marked_items[1]["id"]]
    assert math.isnan(float(ungradable["value"]))  # never 0
    assert ungradable["reason"] == "grader_failed"
    assert "coverage: parse_failure" in ungradable["explanation"]
    wrong = by_id[marked_items[2]["id"]]
    point = marked_items[2]["bonus_points"][0]
    assert wrong["value"] == pytest.approx(0.5)
    assert wrong["explanation"].startswith(f"covers 1 of 2 bonus points: {point}. Defects: ")
    meta = wrong["metadata"]
    assert [v["covered"] for v in meta["verdicts"]] == [True, False]
    assert meta["penalized"] is True and meta["defects"][0]["description"]
    assert meta["provenance"]["judge"] == "openai/standin"
    assert meta["provenance"]["rubrics"]["coverage"]["id"].startswith("chartom-paper")
