"""Which plot window an item is counted under (issue 40.5): the window of the plot the judge
read, and none for an item without a plot. Every summary (the CLI's JSON and table, a service
job's) is built from the results, so the result says it once for all of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bonusjudge_client.wire.grading import GradeRequest
from judge.aggregate import summarize
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.io import read_items
from tests.helpers.processes import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"
# A window the plot of the request names (1000), and the CharToM line with a plot in its largest
# window (en-belief-1: context_2000); the other nine bundled lines have an empty context_2000.
WITH_PLOT = {"id": "plot-1", "question": "How does Levin feel?", "answer": "Humiliated.",
             "bonus_points": ["Levin feels humiliated"], "response": "He is ashamed.",
             "context": "Kitty refuses Levin's proposal.", "context_window": 1000}


def request(context: str | None, window: int | None, n: int = 0) -> GradeRequest:
    return GradeRequest(id=f"r{n}", question="How does Levin feel?", reference="Humiliated.",
                        bonus_points=["Levin feels humiliated"], response="He is ashamed.",
                        context=context, context_window=window)


async def test_a_request_without_a_plot_has_no_window() -> None:
    grader = Grader(JudgeConfig(metrics=("rouge_l",)))
    try:
        results = [
            await grader.grade(request(None, 2000, 0)),  # a harness naming an empty window
            await grader.grade(request("   ", 2000, 1)),
            await grader.grade(request("Kitty refuses him.", 1000, 2)),
            await grader.grade(request("Kitty refuses him.", None, 3)),
        ]
    finally:
        await grader.aclose()
    assert [r.context_window for r in results] == [None, None, 1000, None]
    summary = summarize(results)
    assert {k: g.items for k, g in summary.by_context.items()} == {"1000": 1}


@pytest.mark.process
def test_chartom_lines_with_an_empty_window_are_under_no_window(tmp_path: Path) -> None:
    """Through the CLI: the summary JSON and the table agree with the results."""
    items = tmp_path / "items.jsonl"
    items.write_text(EXAMPLES.read_text() + json.dumps(WITH_PLOT) + "\n")
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    done = run_cli(["grade", str(items), "--out", str(out), "--summary", str(summary),
                    "--metrics", "rouge_l", "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    assert done.returncode == 0, done.stderr[-2000:]
    windows = {r["id"]: r["context_window"] for r in map(json.loads, out.read_text().splitlines())}
    with_plot = {item_id for item_id, req in (e for e in read_items(items)
                                               if isinstance(e, tuple)) if req.context}
    assert with_plot == {"en-belief-1", "plot-1"}
    assert windows == {item_id: {"en-belief-1": 2000, "plot-1": 1000}.get(item_id)
                       for item_id in windows}
    by_context = json.loads(summary.read_text())["by_context"]
    assert {k: g["items"] for k, g in by_context.items()} == {"2000": 1, "1000": 1}
    rows = [line.split()[:2] for line in done.stdout.splitlines() if line.startswith("ctx=")]
    assert sorted(rows) == [["ctx=1000", "1"], ["ctx=2000", "1"]]

