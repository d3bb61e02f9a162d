"""The bill after a job, through a real ``bonusjudge serve`` (issue 32.3).

Under 30% malformed answers against the strict stand-in with prefix caching, the job summary's
request and token totals (cached prompt tokens included) and the key's ``GET /v1/usage`` are the
stand-in's own counts exactly, and their cost is those counts at gpt-4o-mini's prices; the
service runs the litellm transport (the CLI test runs the direct one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bonusjudge_client import JudgeClient
from judge.io import read_items
from standins.openai_server import FaultPlan, OpenAIStandIn
from tests.helpers.processes import ServiceProcess

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).resolve().parents[2] / "judge" / "data" / "examples_chartom.jsonl"
KEY = "key-a"


def test_the_job_summary_and_usage_are_the_providers_bill(tmp_path: Path) -> None:
    base = [entry[1] for entry in read_items(EXAMPLES) if isinstance(entry, tuple)]
    items = [
        r.model_copy(update={"id": f"{n}-{r.id}", "response": f"{r.response} ({n})"})
        for n in range(3) for r in base
    ]
    faults = FaultPlan({"malformed_json": 0.3}, seed=32)
    with OpenAIStandIn(faults=faults, prompt_cache=(256, 64), record_requests=0) as judge:
        args = ["--model", "openai/gpt-4o-mini", "--api-base", judge.base_url,
                "--transport", "litellm", "--metrics", "coverage,defects",
                "--cache-dir", str(tmp_path / "cache"), "--no-preflight"]
        env = {"BONUSJUDGE_API_KEYS": json.dumps([KEY]),
               "BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}
        with ServiceProcess(args, tmp_path, env=env) as svc, \
                JudgeClient(svc.url, api_key=KEY) as client:
            job = client.submit_job(items)
            done = client.wait(job.id, poll_interval=0.2, timeout=300)
            assert done.status == "done", svc.log()[-2000:]
            summary = client.summary(job.id)
            usage = client.usage()
            seen = judge.stats()
    assert seen.outcomes.get("malformed_json", 0) >= 10 and summary.cached_tokens > 0
    assert (summary.judge_calls, summary.prompt_tokens, summary.completion_tokens,
            summary.cached_tokens) == (
        seen.requests, seen.prompt_tokens, seen.completion_tokens, seen.cached_tokens)
    assert (usage.provider_requests, usage.prompt_tokens, usage.completion_tokens,
            usage.cached_tokens) == (
        seen.requests, seen.prompt_tokens, seen.completion_tokens, seen.cached_tokens)
    bill = seen.cost("gpt-4o-mini")
    # Rounded to the micro-dollar: off by at most half of one, inclusive. A bill ending in exactly
    # 5e-7 (0.0081795 -> 0.00818) is off by 5e-7 plus the float's last bit, so the bound has room
    # for that bit (a fresh clone's CI failed on it once, the faults' order varying the bill).
    half = 5e-7 * (1 + 1e-9)
    assert summary.cost_usd == pytest.approx(bill, abs=half)
    assert usage.cost_usd == pytest.approx(bill, abs=half)
