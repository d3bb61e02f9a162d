"""A misspelt judge name (issue 40.8): ``--model embeded-matcher`` is answered with the name it
misspells, for every option that names a judge (``grade``/``serve --model``, ``calibrate
--judge``, ``mcq --llm-model``), before litellm's "needs a provider prefix" would hide it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cli.common import closest_judge
from tests.helpers.processes import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"
MCQ = ROOT / "judge" / "data" / "mcq_example_tombench.jsonl"
CALIBRATION_EXAMPLE = ROOT / "calibration" / "data" / "example.jsonl"


@pytest.mark.parametrize(
    "typed",
    ["embeded-matcher", "embedded-matchr", "Embedded-Matcher", "embedded_matcher",
     "embedding-matcher", "embedded", "matcher"],
)
def test_a_misspelt_embedded_matcher_is_recognised(typed: str) -> None:
    assert closest_judge(typed) == "embedded-matcher"


@pytest.mark.parametrize(
    "model",
    ["embedded-matcher", "gpt-4o", "openai/embeded-matcher", "text-embedding-ada-002",
     "claude-3-5-sonnet", "mistral-embed", "command-r", ""],
)
def test_other_models_are_left_to_litellm(model: str) -> None:
    assert closest_judge(model) is None


def did_you_mean(done: subprocess.CompletedProcess[str], prefix: str, option: str) -> None:
    """Exit 2 and one line naming the model, the option and the judge it misspells."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{prefix}: error: unknown model "), lines[0]
    assert f"({option}): did you mean embedded-matcher?" in lines[0], lines[0]


@pytest.mark.process
def test_every_option_naming_a_judge_suggests_the_name(tmp_path: Path) -> None:
    cache = ["--cache-dir", str(tmp_path / "cache")]
    out = tmp_path / "out"
    did_you_mean(run_cli(["grade", str(EXAMPLES), "--out", str(out / "g.jsonl"), "--model",
                          "embeded-matcher", *cache]), "bonusjudge", "--model")
    did_you_mean(run_cli(["grade", str(EXAMPLES), "--estimate", "--model", "embeded-matcher",
                          *cache]), "bonusjudge", "--model")
    did_you_mean(run_cli(["serve", "--model", "embeded-matcher", "--port", "8769", *cache]),
                 "bonusjudge", "--model")
    did_you_mean(run_cli(["mcq", str(MCQ), "--out", str(out / "m.jsonl"), "--llm-model",
                          "embeded-matcher", *cache]), "bonusjudge mcq", "--llm-model")
    did_you_mean(run_cli(["calibrate", str(CALIBRATION_EXAMPLE), "--judge", "embeded-matcher",
                          "--metrics", "coverage", "--out", str(out / "cal"), *cache]),
                 "bonusjudge", "--judge")
    did_you_mean(run_cli(["grade", str(EXAMPLES), "--estimate", *cache],
                         env={"BONUSJUDGE_JUDGE__MODEL": "embeded-matcher"}),
                 "bonusjudge", "the judge.model setting")
    assert not out.exists()
