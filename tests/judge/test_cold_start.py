"""Cold start (issue 13): the first run in a fresh process, with nothing imported or cached yet.

Every test here runs a fresh interpreter, because the fault only exists before torch,
transformers and bert_score are imported: the embedded matcher's batch thread loading the encoder
while BERTScore's batch thread imported bert_score failed with ``ImportError: cannot import name
'AutoTokenizer' from 'transformers'`` (or hung), and any earlier test in the same process would
hide it. The packaged encoder now runs without transformers or bert_score
(``judge.metrics.bert_forward``); the race is still tested where both backends load at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.processes import cli_env, run_python

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"
TIMEOUT = 300  # a fresh process loads torch and the encoder: seconds, or minutes on a busy box


def _env() -> dict[str, str]:
    """The environment of a fresh, offline interpreter that imports this checkout."""
    return cli_env({"PYTHONPATH": str(ROOT)})


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return run_python(code, cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=TIMEOUT)


def test_cli_first_grade_on_an_empty_cache_succeeds_three_times(tmp_path: Path) -> None:
    inputs = [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    for run in range(3):
        folder = tmp_path / f"run{run}"
        out, summary, cache = folder / "out.jsonl", folder / "summary.json", folder / "cache"
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable, "-m", "cli", "grade", str(EXAMPLES),
                "--out", str(out), "--summary", str(summary), "--cache-dir", str(cache), "--quiet",
            ],
            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT,
        )
        wall = time.monotonic() - started
        assert proc.returncode == 0, f"run {run}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        results = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert sorted(r["id"] for r in results) == sorted(i["id"] for i in inputs), run
        for result in results:
            assert result["status"] == "scored", result
            assert result["coverage"]["status"] == "scored", result
            assert result["rouge_l"] is not None and result["bertscore"] is not None, result
            if result["language"] == "en":  # the packaged encoder is English-only
                assert result["bertscore"]["f1"] is not None, result
        assert json.loads(summary.read_text())["items"] == len(inputs)
        print(f"cold run {run}: exit 0, {len(results)} lines, {wall:.1f} s")


def test_first_matcher_load_and_bertscore_import_in_two_threads_at_once() -> None:
    # The engine's two batch threads, started together on nothing imported yet: the matcher
    # embeds (loading the encoder), BERTScore scores (importing bert_score).
    proc = _python(
        """
        import sys, threading
        from judge.matcher import MatchInput, get_matcher
        from judge.metrics import bertscore

        assert "transformers" not in sys.modules and "bert_score" not in sys.modules
        start = threading.Barrier(2)
        outcome = {}

        def run(name, work):
            start.wait()
            try:
                outcome[name] = work()
            except BaseException as exc:
                outcome[name] = f"{type(exc).__name__}: {exc}"

        item = MatchInput("Why?", "He was hurt.", ["He felt hurt"], "He felt hurt.", "en")
        work = {
            "matcher": lambda: get_matcher().match([item]),
            "bertscore": lambda: bertscore(["a cat"], ["the cat"]),
        }
        threads = [threading.Thread(target=run, args=pair) for pair in work.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
            assert not thread.is_alive(), "a first-use load hung"
        failed = {name: value for name, value in outcome.items() if isinstance(value, str)}
        assert not failed, failed
        assert outcome["matcher"][0][0].probability > 0.5, outcome
        assert outcome["bertscore"][0].f1 > 0, outcome
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


def test_prepare_loads_exactly_what_the_metrics_need() -> None:
    proc = _python(
        """
        import asyncio, sys
        import judge.matcher.embedded as matcher_module
        from judge.config import JudgeConfig
        from judge.engine import Grader
        from judge.metrics import encoders

        def grader(**options):
            return Grader(JudgeConfig(model="fake/judge", **options), provider=object())

        asyncio.run(grader(metrics=("rouge_l",)).prepare())
        assert "rouge_score" in sys.modules
        assert "torch" not in sys.modules and "bert_score" not in sys.modules

        asyncio.run(grader(metrics=("coverage", "defects")).prepare())  # an LLM judge: nothing
        assert "torch" not in sys.modules and matcher_module._matcher is None

        g = grader(metrics=("rouge_l", "bertscore"))
        asyncio.run(g.prepare(JudgeConfig(model="embedded-matcher", metrics=("coverage",))))
        assert matcher_module._matcher is not None and matcher_module._matcher._encoder
        assert encoders._weights_by_path and "bert_score" not in sys.modules

        asyncio.run(g.prepare())  # the grader's own config
        # The packaged encoder runs on the torch backend: neither bert_score nor transformers.
        assert encoders.get_encoder().backend == "torch"
        assert "bert_score" not in sys.modules and "transformers" not in sys.modules
        asyncio.run(g.prepare())  # again: everything is cached
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")
