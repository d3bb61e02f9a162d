"""A keyed service's cache is no oracle by default (issue 41.4).

With the default ``CACHE_SCOPE=shared``, key B grading the items key A had just graded could
tell, item by item: the call showed ``prompt_tokens: null, cost_usd: null, latency_s: 0.0016``
(a real one 377 tokens and 0.054 s), the request took 5.5 ms against 60 ms, and B's own
``/v1/usage`` counted 40 cache hits of 40. A service with API keys now keeps each key's cache
apart unless its operator shares it (its metric values and matcher verdicts too: with the
embedded matcher and BERTScore the time alone told 40 of 40). On ``bonusjudge serve`` with two
keys and the stand-in judge (``tests.helpers.cache_oracle``): B grades A's 40 items and 40 of its
own, shuffled, and classifies each from what it observes; it must do no better than chance.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from standins.openai_server import OpenAIStandIn
from tests.helpers.cache_oracle import measure, serve_args, serve_env
from tests.helpers.processes import ServiceProcess

pytestmark = pytest.mark.process

LATENCY = 0.05
"""Seconds the stand-in takes to answer: a real call is never faster."""


@pytest.mark.parametrize("judged", ["llm", "embedded"])
def test_another_keys_results_tell_a_key_nothing_by_default(tmp_path: Path, judged: str) -> None:
    with OpenAIStandIn(tokenizer="o200k_base", latency=LATENCY) as judge, \
            ServiceProcess(serve_args(judge.base_url if judged == "llm" else None, tmp_path),
                           tmp_path, env=serve_env(tmp_path, None), timeout=300) as svc:
        run = measure(svc.url, 40, call_latency=LATENCY)
        requests = judge.stats().requests
    print(f"{judged} judge, default cache scope with API keys: {run.line()}")
    # B paid for each of its 80 calls itself: no answer of B's has a hit's provenance or usage,
    # and the timing signals (noise on a busy machine) fire on A's items no more than on B's.
    exact = {"cached", "no tokens", "no cost", "usage cache_hits", "usage requests"}
    assert not exact & set(run.signals), run.line()
    assert run.hits <= run.false_alarms + 2 and run.accuracy <= 0.55, run.line()
    assert requests == (40 + 80 if judged == "llm" else 0)


def test_a_shared_cache_is_an_operators_choice_and_says_so(tmp_path: Path) -> None:
    # What docs/service.md says sharing leaks, measured: the operator who turns it on is told.
    with OpenAIStandIn(tokenizer="o200k_base", latency=LATENCY) as judge, \
            ServiceProcess(serve_args(judge.base_url, tmp_path), tmp_path,
                           env=serve_env(tmp_path, "shared")) as svc:
        run = measure(svc.url, 40, call_latency=LATENCY)
        requests = judge.stats().requests
        log = svc.log()
    print(f"cache scope shared with API keys: {run.line()}")
    assert "cache_scope shared with API keys: a key can tell" in log
    assert run.accuracy >= 0.9 and requests == 40 + 40, run.line()
