"""``bonusjudge grade --max-cost/--max-calls`` as users run it, against the strict stand-in (32.2).

A capped run stops sending at the cap, writes what finished, says what it spent and how many
items are left, and exits 3; its spend (the stand-in's own token counts at litellm's price of
gpt-4o-mini) stays under the cap plus what was in flight. A re-run with a higher cap grades
exactly the rest: no request is sent twice (the stand-in's ledger), and every item ends scored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge.estimate import model_prices
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import run_cli

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).resolve().parents[2] / "judge" / "data" / "examples_chartom.jsonl"
EXIT_BUDGET = 3


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_capped_run_stops_at_the_cap_and_a_higher_cap_grades_exactly_the_rest(
    tmp_path: Path,
) -> None:
    prices = model_prices("openai/gpt-4o-mini")
    assert prices is not None
    out = tmp_path / "out.jsonl"
    with OpenAIStandIn(tokenizer="o200k_base", latency=0.2, record_requests=1000) as judge:
        options = ["--model", "openai/gpt-4o-mini", "--api-base", judge.base_url,
                   "--metrics", "coverage,defects", "--cache-dir", str(tmp_path / "cache"),
                   "--quiet", "--no-preflight", "--concurrency", "4"]
        estimate = run_cli(["grade", str(EXAMPLES), "--estimate", "--json", *options])
        assert estimate.returncode == 0, estimate.stderr
        cap = json.loads(estimate.stdout)["total"]["cost_usd"] / 2

        capped = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--max-cost", f"{cap:.8f}",
                          *options])
        assert capped.returncode == EXIT_BUDGET, capped.stderr
        sent = judge.stats()
        spent = prices.cost(sent.prompt_tokens, sent.completion_tokens)
        # Never past the cap by more than the 4 calls in flight when it was reached.
        assert 0 < sent.requests < 20 and spent <= cap + 4 * prices.cost(2_000, 600)
        assert (f"stopped at the cost cap: ${spent:.6f} spent into {out} of --max-cost ${cap:g}"
                in capped.stderr)
        first = _lines(out)
        left = [r for r in first if r["status"] != "scored"]
        assert left and all(
            any(str(reason).endswith(": budget_exhausted") for reason in r["unscored_reasons"])
            for r in left
        )
        assert all(r["coverage"]["covered"] is None for r in left  # never 0
                   if r["coverage"]["reason"] == "budget_exhausted")
        assert f"{10 - (len(first) - len(left))} item(s) left" in capped.stderr

        resumed = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--max-cost", "1",
                           *options])
        assert resumed.returncode == 0, resumed.stderr
        assert f"grading {len(left)} item(s) again: {len(left)} not sent before the cost cap" in (
            resumed.stderr)
        total = judge.stats()
        bodies = [json.dumps(body["messages"], sort_keys=True) for body in judge.requests]
    # Exactly the rest: the 20 calls of the input once each, none sent twice.
    assert total.requests == 20 == len(set(bodies)) == len(bodies)
    final = _lines(out)
    assert len(final) == 10 and all(r["status"] == "scored" for r in final)


def test_max_calls_is_exact_and_the_cap_options_are_checked(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with OpenAIStandIn(latency=0.1) as judge:
        options = ["--model", "openai/standin", "--api-base", judge.base_url,
                   "--metrics", "coverage,defects", "--cache-dir", str(tmp_path / "cache"),
                   "--quiet", "--no-preflight", "--concurrency", "4"]
        done = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--max-calls", "7", *options])
        assert done.returncode == EXIT_BUDGET, done.stderr
        assert judge.stats().requests == 7
        assert f"7 request(s) sent into {out} of --max-calls 7" in done.stderr
        # A model litellm does not price: --max-cost needs prices, before anything is written.
        unpriced = run_cli(["grade", str(EXAMPLES), "--out", str(tmp_path / "u.jsonl"),
                            "--max-cost", "1", *options])
        assert unpriced.returncode == 2 and "no price for openai/standin" in unpriced.stderr
        assert not (tmp_path / "u.jsonl").exists()
        priced = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--max-cost", "1",
                          "--price-in", "1", "--price-out", "4", *options])
        assert priced.returncode == 0, priced.stderr
        assert judge.stats().requests == 20  # the 13 calls left, none again
        for cap in ("inf", "nan"):
            endless = run_cli(["grade", str(EXAMPLES), "--out", str(tmp_path / "i.jsonl"),
                               "--max-cost", cap, "--price-in", "1", "--price-out", "4",
                               *options])
            assert endless.returncode == 2, endless.stderr
            assert "--max-cost: a cap is a finite number" in endless.stderr
            assert not (tmp_path / "i.jsonl").exists()
    server = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--max-calls", "1",
                      "--server", "http://127.0.0.1:9"])
    assert server.returncode == 2 and "not with --server" in server.stderr


def test_the_caps_are_totals_for_the_output_and_the_preflight_counts(tmp_path: Path) -> None:
    """``--max-calls 5`` then ``--max-calls 8`` into one output sends 8 requests in all.

    Issue 40: each run counted only its own requests (50 then 100 sent 150), and the preflight's
    probe was outside both the cap and the bill. Now the probe is one of the 5; the second run
    counts the first run's 5, sends 3 (its own probe among them) and says so.
    """
    out = tmp_path / "out.jsonl"
    with OpenAIStandIn() as judge:
        options = ["--model", "openai/standin", "--api-base", judge.base_url,
                   "--metrics", "coverage,defects", "--cache-dir", str(tmp_path / "cache"),
                   "--quiet", "--concurrency", "1"]
        first = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--max-calls", "5",
                         *options])
        assert first.returncode == EXIT_BUDGET, first.stderr
        assert judge.stats().requests == 5
        assert judge.requests[0]["max_tokens"] == 1  # the probe came first, under the cap
        assert f"5 request(s) sent into {out} of --max-calls 5" in first.stderr
        assert "; 5 judge call(s)" in first.stdout  # the bill has the probe too

        second = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--max-calls", "8",
                          *options])
        assert second.returncode == EXIT_BUDGET, second.stderr
        assert judge.stats().requests == 8
        assert f"8 request(s) sent into {out} of --max-calls 8" in second.stderr
        assert "; 3 judge call(s)" in second.stdout

        # A cap the output has spent already sends nothing, not even a probe.
        spent = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--max-calls", "8",
                         *options])
        assert spent.returncode == EXIT_BUDGET, spent.stderr
        assert judge.stats().requests == 8

        # A fresh output starts its own books.
        out.unlink()
        fresh = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--max-calls", "2",
                         *options])
        assert fresh.returncode == EXIT_BUDGET, fresh.stderr
        assert judge.stats().requests == 10
