"""The bill after a run, as users run it: a fresh interpreter, an empty cache (issue 32.3).

Under 30% malformed answers (each re-asked, every re-ask billed) against the strict stand-in
with prefix caching, ``bonusjudge grade --summary``'s request and token totals, cached prompt
tokens included, are the stand-in's own counts exactly, and its cost is those counts at
gpt-4o-mini's prices (cached tokens at the cache-read price).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from standins.openai_server import FaultPlan, OpenAIStandIn
from tests.helpers.processes import run_cli

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).resolve().parents[2] / "judge" / "data" / "examples_chartom.jsonl"


def thrice(path: Path) -> Path:
    """The bundled examples three times over, each with its own id and response: the same
    questions with different answers, so providers' prefix caching has something to serve."""
    lines = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    with path.open("w", encoding="utf-8") as out:
        for n in range(3):
            for line in lines:
                row = {**line, "id": f"{n}-{line['id']}", "response": f"{line['response']} ({n})"}
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def test_the_summary_is_the_providers_bill_under_malformed_answers(tmp_path: Path) -> None:
    faults = FaultPlan({"malformed_json": 0.3}, seed=32)
    with OpenAIStandIn(faults=faults, prompt_cache=(256, 64), record_requests=0) as judge:
        done = run_cli([
            "grade", str(thrice(tmp_path / "items.jsonl")), "--out", str(tmp_path / "out.jsonl"),
            "--summary", str(tmp_path / "summary.json"), "--model", "openai/gpt-4o-mini",
            "--api-base", judge.base_url, "--metrics", "coverage,defects",
            "--cache-dir", str(tmp_path / "cache"), "--no-preflight", "--quiet",
        ])
        seen = judge.stats()
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert seen.outcomes.get("malformed_json", 0) >= 10 and summary["reasks"] > 0
    assert summary["cached_tokens"] > 0
    assert (summary["judge_calls"], summary["prompt_tokens"], summary["completion_tokens"],
            summary["cached_tokens"]) == (
        seen.requests, seen.prompt_tokens, seen.completion_tokens, seen.cached_tokens)
    # The summary's cost is rounded to the micro-dollar.
    assert summary["cost_usd"] == pytest.approx(seen.cost("gpt-4o-mini"), abs=5e-7 * (1 + 1e-9))
    # The closing line prints the same bill.
    assert (f"; {seen.prompt_tokens:,} prompt token(s) ({seen.cached_tokens:,} cached), "
            f"{seen.completion_tokens:,} completion token(s), ${summary['cost_usd']:.6f}"
            ) in done.stdout
