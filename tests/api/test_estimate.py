"""``POST /v1/estimate`` through a real ``bonusjudge serve`` with two keys (issue 32.1).

The service's estimate against an empty cache equals the calls its batch then sends to the strict
stand-in, prompt tokens within 10% of the stand-in's usage (tiktoken o200k_base, as OpenAI counts
gpt-4o-mini); afterwards the key's own estimate is free, and the other key's is not (no key
learns what another graded).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bonusjudge_client import JudgeClient, JudgeClientError
from judge.io import read_items
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import ServiceProcess

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).resolve().parents[2] / "judge" / "data" / "examples_chartom.jsonl"
KEYS = ("key-a", "key-b")


def test_the_services_estimate_is_its_calls_and_the_providers_tokens(tmp_path: Path) -> None:
    items = [r for e in read_items(EXAMPLES, context_window=None) if isinstance(e, tuple)
             for r in [e[1]]]
    with OpenAIStandIn(tokenizer="o200k_base") as judge:
        args = ["--model", "openai/gpt-4o-mini", "--api-base", judge.base_url,
                "--metrics", "coverage,defects,rouge_l", "--cache-dir", str(tmp_path / "cache"),
                "--no-preflight"]
        env = {"BONUSJUDGE_API_KEYS": json.dumps(list(KEYS)),
               "BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}
        with ServiceProcess(args, tmp_path, env=env) as svc, \
                JudgeClient(svc.url, api_key=KEYS[0]) as a, \
                JudgeClient(svc.url, api_key=KEYS[1]) as b:
            # A CharToM line and an invalid item go as a job's would: the bad one is counted.
            raw = [*(i.model_dump(exclude_none=True) for i in items), {"id": "bad"}]
            cold = a.estimate(raw)
            assert judge.stats().requests == 0  # nothing sent
            assert (cold.items, cold.invalid) == (10, 1)
            assert [t.task for t in cold.tasks] == ["coverage", "defects"]
            assert cold.total.calls == 20 and cold.total.cached == 0
            assert cold.price_source == "litellm" and cold.total.cost_usd

            a.grade_many(items)
            sent = judge.stats()
            assert sent.requests == cold.total.calls, svc.log()[-2000:]
            ratio = cold.total.prompt_tokens / sent.prompt_tokens
            assert 0.9 <= ratio <= 1.1, (cold.total.prompt_tokens, sent.prompt_tokens)

            warm = a.estimate(items)
            assert warm.total.calls == 0 and warm.total.cached == 20
            assert warm.total.cost_usd == 0.0
            # Key b never graded these: the shared cache's entries are a's, not free to b.
            other = b.estimate(items, judge={"metrics": ["coverage"]})
            assert other.total.calls == 10 and other.total.cached == 0

            given = b.estimate(items[:1], price_in=1.0, price_out=2.0)
            assert given.price_source == "given" and given.price_in == 1.0
            with pytest.raises(JudgeClientError, match="price_out"):
                b.estimate(items[:1], price_in=1.0)
