"""End to end through litellm + instructor against a real loopback OpenAI-compatible server.

The stand-in server answers from the request's own JSON schema (valid by default) or from a
scripted handler; the CLI and the engine run exactly as in production, with LiteLLMProvider.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bonusjudge_client.wire.grading import GradeRequest
from judge.cache import JudgeCache
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.providers.litellm import LiteLLMProvider
from standins.openai_server import FaultPlan, OpenAIStandIn
from tests.helpers.engine import no_sleep

EXAMPLES = Path(__file__).resolve().parents[3] / "judge" / "data" / "examples_chartom.jsonl"


def request(**kw) -> GradeRequest:
    base = {
        "id": "e1",
        "question": "Why does Miss Havisham encourage Pip's love for Estella?",
        "reference": "She wants revenge on men; she raised Estella to break hearts.",
        "bonus_points": ["She wants revenge on men", "She raised Estella to break hearts"],
        "response": "Revenge: Estella was raised to break men's hearts, Pip's included.",
        "tom_dimension": "intention",
    }
    base.update(kw)
    return GradeRequest(**base)


@pytest.fixture(scope="module")
def server():
    with OpenAIStandIn() as srv:
        yield srv


@pytest.mark.parametrize("mode", ["tools", "json_schema", "json", "md_json"])
async def test_structured_rubric_every_mode(server, mode):
    cfg = JudgeConfig(
        model="openai/standin", api_base=server.base_url, mode=mode, metrics=("coverage", "defects")
    )
    grader = Grader(cfg, provider=LiteLLMProvider())
    result = await grader.grade(request())
    assert result.status == "scored", result.unscored_reasons
    # The default handler answers index i for the i-th verdict: both points present, once each.
    assert [v.index for v in result.coverage.verdicts] == [1, 2]
    assert 0 <= result.coverage.coverage <= 1
    assert result.provenance.calls[0].prompt_tokens


async def test_scripted_verdicts_and_cache(server, tmp_path):
    def handler(body):
        tools = body.get("tools") or []
        name = tools[0]["function"]["name"] if tools else ""
        if name == "CoverageJudgement":
            return {
                "points": [
                    {"index": 2, "covered": True, "rationale": "r", "evidence": "e"},
                    {"index": 1, "covered": False, "rationale": "", "evidence": ""},
                ]
            }
        return {"defects": [{"description": "Pip is not the target", "kind": "factual"}]}

    server.handler = handler
    try:
        cfg = JudgeConfig(
            model="openai/standin", api_base=server.base_url, metrics=("coverage", "defects")
        )
        grader = Grader(cfg, provider=LiteLLMProvider(), cache=JudgeCache(tmp_path / "c"))
        before = server.stats().requests
        result = await grader.grade(request())
        assert [v.covered for v in result.coverage.verdicts] == [False, True]
        assert result.defects.penalized is True
        again = await grader.grade(request())
        assert again.model_dump(exclude={"provenance", "elapsed_s"}) == result.model_dump(
            exclude={"provenance", "elapsed_s"}
        )
        assert server.stats().requests - before == 2  # the re-grade cost nothing
    finally:
        server.handler = None


async def test_faithful_mode_parses_plain_text(server):
    replies = iter(["[Included Bonus Points]: 2", "[Defect]: None of the plot supports this."])

    def handler(body):
        text = json.dumps(body["messages"])
        return next(replies) if "[Bonus Points]" in text or "Defect" in text else "?"

    server.handler = handler
    try:
        cfg = JudgeConfig(
            model="openai/standin",
            api_base=server.base_url,
            rubric="chartom-paper",
            metrics=("coverage",),
            concurrency=1,
        )
        grader = Grader(cfg, provider=LiteLLMProvider())
        result = await grader.grade(request())
        assert result.coverage.covered == 1 and result.coverage.verdicts[1].covered is True
        assert result.provenance.mode == "text"
        sent = server.requests[-1]
        assert "response_format" not in sent and "tools" not in sent
        assert sent["messages"][0]["content"].startswith("Assuming you are an expert")
        cfg2 = cfg.model_copy(update={"metrics": ("defects",)})
        result2 = await grader.grade(request(), config=cfg2)
        assert result2.defects.penalized is True  # "None of ..." is a defect, not a pass
    finally:
        server.handler = None


async def test_faithful_mode_malformed_reply_is_unscored(server):
    server.handler = lambda body: "Null"
    try:
        cfg = JudgeConfig(
            model="openai/standin",
            api_base=server.base_url,
            rubric="chartom-paper",
            metrics=("coverage", "defects"),
        )
        result = await Grader(cfg, provider=LiteLLMProvider()).grade(request())
        assert result.coverage.status == "unscored" and result.coverage.reason == "parse_failure"
        assert result.defects.status == "unscored" and result.defects.penalized is None
    finally:
        server.handler = None


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("rate_limit", "rate_limited"),
        ("server_error", "provider_error"),
        ("malformed_json", "parse_failure"),
        ("truncated", "truncated_output"),
        ("refusal", "refusal"),
        ("empty", "empty_output"),
    ],
)
async def test_faults_end_unscored_with_the_right_reason(fault, reason):
    with OpenAIStandIn(faults=FaultPlan({fault: 1.0}, seed=1)) as srv:
        cfg = JudgeConfig(
            model="openai/standin",
            api_base=srv.base_url,
            retries=1,
            reasks=1,
            metrics=("coverage",),
        )
        grader = Grader(cfg, provider=LiteLLMProvider(), sleep=no_sleep, rng=random.Random(0))
        result = await grader.grade(request())
    assert result.coverage.status == "unscored"
    assert result.coverage.reason == reason
    assert result.coverage.coverage is None


async def test_timeout_is_unscored_timeout():
    with OpenAIStandIn(faults=FaultPlan({"timeout": 1.0}, seed=1)) as srv:
        cfg = JudgeConfig(
            model="openai/standin",
            api_base=srv.base_url,
            retries=0,
            timeout=0.5,
            metrics=("coverage",),
        )
        result = await Grader(cfg, provider=LiteLLMProvider()).grade(request())
    assert result.coverage.reason == "timeout"


@pytest.mark.process
def test_cli_grades_the_example_set_against_the_server(server, tmp_path):
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    cmd = [
        sys.executable,
        "-m",
        "cli",
        "grade",
        str(EXAMPLES),
        "--out",
        str(out),
        "--summary",
        str(summary),
        "--model",
        "openai/standin",
        "--api-base",
        server.base_url,
        "--metrics",
        "coverage,defects,rouge_l",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--quiet",
        "--context",
        "1000",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 10 and all(r["status"] == "scored" for r in rows)
    data = json.loads(summary.read_text())
    for key in (
        "items",
        "scored",
        "unscored",
        "bpc",
        "penalty_rate",
        "rouge_l",
        "bertscore_f1",
        "by_dimension",
        "judge_calls",
        "cache_hits",
    ):
        assert key in data
    assert set(data["by_dimension"]) == {"belief", "emotion", "intention", "desire"}
    # 10 items x (coverage, defects), and the preflight's probe: billed, so on the bill.
    assert data["judge_calls"] == 21 and data["cache_hits"] == 0
    assert "overall" in done.stdout
    # Re-run with the same --out: nothing to grade, nothing graded twice.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0
    assert len(out.read_text().splitlines()) == 10
    assert "already graded" in again.stderr
