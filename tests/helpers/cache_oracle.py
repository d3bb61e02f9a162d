"""Can API key B tell which items key A graded? The cache oracle of issue 41.4, measured.

Key A grades items on a running ``bonusjudge serve``; key B then grades those items and as many
new ones (the controls), interleaved, one request at a time, and classifies each of its own
answers as a *hit* (served from an entry A paid for) or a miss, from nothing but what B can
observe: each call's provenance (``cached``, ``prompt_tokens``, ``cost_usd``, ``latency_s``),
the request's time, and B's own ``/v1/usage`` before and after it (``cache_hits``,
``provider_requests``). A classifier that can tell has a hit rate near 1 on A's items and a
false-alarm rate near 0 on the controls; one that cannot is at chance (accuracy 0.5).

``python -m tests.helpers.cache_oracle [--scope shared|per_key] [--embedded] [--code CHECKOUT]``
starts the stand-in judge and ``bonusjudge serve`` (with two API keys; ``--scope`` sets
``BONUSJUDGE_CACHE_SCOPE``, left to the service's default without it; ``--embedded`` grades
with the embedded matcher and BERTScore instead of an LLM judge, where only the time tells) and
prints the figures; ``tests/api/test_rel_cache_oracle.py`` asserts them.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = [
    "KEY_A", "KEY_B", "Observation", "OracleRun", "classify", "item", "measure", "serve_args",
    "serve_env", "signals",
]

KEY_A, KEY_B = "oracle-key-a", "oracle-key-b"


def item(tag: str, n: int) -> dict[str, Any]:
    """A gradable item, distinct per ``tag`` and ``n`` (no two share a judge call)."""
    return {
        "id": f"{tag}-{n}", "question": "How does Levin feel after the proposal?",
        "reference": "He feels humiliated and wants to go back to his estate.",
        "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
        "response": f"Levin is ashamed and longs for the countryside ({tag} {n}).",
    }


@dataclass
class Observation:
    """What B saw of one of its requests.

    Attributes:
        graded_by_a: Whether A graded this item first (the truth the classifier guesses).
        calls: The provenance of each judge call of the answer.
        wall_s: Seconds the request took, as B timed it.
        usage_delta: B's ``/v1/usage`` after the request minus before it, per field.
    """

    graded_by_a: bool
    calls: list[dict[str, Any]]
    wall_s: float
    usage_delta: dict[str, float]


@dataclass
class OracleRun:
    """What the classifier made of B's observations.

    Attributes:
        hits: A's items B classified as hits (true positives).
        false_alarms: Controls B classified as hits.
        items: Items per group (A's, and the controls).
        signals: How often each signal fired on A's items and on the controls.
    """

    hits: int
    false_alarms: int
    items: int
    signals: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        """The share of A's items B recognised."""
        return self.hits / self.items

    @property
    def accuracy(self) -> float:
        """The share of B's items classified right: 1.0 is a perfect oracle, 0.5 chance."""
        return (self.hits + self.items - self.false_alarms) / (2 * self.items)

    def line(self) -> str:
        """One line for a log or an assertion."""
        fired = ", ".join(f"{name} {a}/{c}" for name, (a, c) in sorted(self.signals.items()))
        return (
            f"hit rate {self.hits}/{self.items} ({self.hit_rate:.0%}), false alarms "
            f"{self.false_alarms}/{self.items}, accuracy {self.accuracy:.0%} (chance 50%); "
            f"signals on A's items/controls: {fired or 'none'}"
        )


def signals(observation: Observation, median_wall: float, call_latency: float) -> list[str]:
    """The signals that say "hit" for one observation (none: a miss).

    Args:
        observation: What B saw.
        median_wall: The median of B's request times (a hit answers much faster).
        call_latency: The judge's own answer time (a call faster than half of it was not one).
    """
    fired = []
    if any(call.get("cached") for call in observation.calls):
        fired.append("cached")
    if any(call.get("prompt_tokens") is None for call in observation.calls):
        fired.append("no tokens")
    if any(call.get("cost_usd") is None for call in observation.calls):
        fired.append("no cost")
    if any((call.get("latency_s") or 0.0) < call_latency / 2 for call in observation.calls):
        fired.append("call latency")
    if observation.wall_s < median_wall / 2:
        fired.append("request time")
    if observation.usage_delta.get("cache_hits", 0) > 0:
        fired.append("usage cache_hits")
    if observation.usage_delta.get("provider_requests", 0) < len(observation.calls):
        fired.append("usage requests")
    return fired


def classify(observations: list[Observation], call_latency: float) -> OracleRun:
    """Classify each observation (a hit if any signal fires) and score the guesses."""
    median_wall = statistics.median(o.wall_s for o in observations)
    fired = Counter[tuple[str, bool]]()
    hits = false_alarms = 0
    for observation in observations:
        found = signals(observation, median_wall, call_latency)
        for name in found:
            fired[(name, observation.graded_by_a)] += 1
        if found and observation.graded_by_a:
            hits += 1
        elif found:
            false_alarms += 1
    names = {name for name, _ in fired}
    items = sum(o.graded_by_a for o in observations)
    return OracleRun(
        hits, false_alarms, items,
        {name: (fired[(name, True)], fired[(name, False)]) for name in names},
    )


def measure(url: str, n: int = 40, *, call_latency: float, seed: int = 41) -> OracleRun:
    """A grades ``n`` items, then B grades them and ``n`` controls, shuffled; B classifies.

    Every request is a ``/v1/grade`` of one item, one at a time, so B's usage before and after
    a request is that request's.
    """

    def headers(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def usage(http: httpx.Client) -> dict[str, Any]:
        answer: dict[str, Any] = http.get("/v1/usage", headers=headers(KEY_B)).json()
        return answer

    with httpx.Client(base_url=url, timeout=120) as http:
        for index in range(n):
            answer = http.post("/v1/grade", json=item("shared", index), headers=headers(KEY_A))
            answer.raise_for_status()
        order = [("shared", index) for index in range(n)] + [("own", index) for index in range(n)]
        random.Random(seed).shuffle(order)
        observations = []
        for tag, index in order:
            before = usage(http)
            started = time.perf_counter()
            answer = http.post("/v1/grade", json=item(tag, index), headers=headers(KEY_B))
            wall = time.perf_counter() - started
            answer.raise_for_status()
            after = usage(http)
            delta = {
                name: float(after[name]) - float(before[name])
                for name in ("cache_hits", "provider_requests")
            }
            calls = answer.json()["provenance"]["calls"]
            observations.append(Observation(tag == "shared", calls, wall, delta))
    return classify(observations, call_latency)


def serve_args(judge_url: str | None, work: Path) -> list[str]:
    """``bonusjudge serve`` options for the measurement.

    Args:
        judge_url: The stand-in judge's base URL: a priced LLM judge, coverage only. None: the
            embedded matcher with ROUGE-L and BERTScore (no judge call; cached verdicts and
            metric values answer faster).
        work: The folder of its cache.
    """
    cache = ["--cache-dir", str(work / "cache")]
    if judge_url is None:
        return ["--metrics", "coverage,rouge_l,bertscore", *cache]
    return ["--model", "openai/gpt-4o-mini", "--api-base", judge_url, "--metrics", "coverage",
            *cache, "--no-preflight"]


def serve_env(work: Path, scope: str | None) -> dict[str, str]:
    """The service's environment: two API keys, its own data folder, the cache scope if set."""
    env = {"BONUSJUDGE_API_KEYS": json.dumps([KEY_A, KEY_B]),
           "BONUSJUDGE_DATA_DIR": str(work / "data")}
    if scope is not None:
        env["BONUSJUDGE_CACHE_SCOPE"] = scope
    return env


def main(argv: list[str] | None = None) -> int:
    """Measure the oracle against a fresh service; print its figures."""
    from standins.openai_server import OpenAIStandIn
    from tests.helpers.processes import ServiceProcess

    parser = argparse.ArgumentParser(
        prog="python -m tests.helpers.cache_oracle", description=__doc__
    )
    parser.add_argument("--scope", choices=["shared", "per_key"], default=None,
                        help="BONUSJUDGE_CACHE_SCOPE (default: the service's own default)")
    parser.add_argument("--embedded", action="store_true",
                        help="the embedded matcher and BERTScore instead of an LLM judge")
    parser.add_argument("--code", type=Path, default=None,
                        help="another checkout to run bonusjudge serve from")
    parser.add_argument("-n", type=int, default=40, help="items A grades (and controls)")
    args = parser.parse_args(argv)
    latency = 0.05
    with tempfile.TemporaryDirectory() as tmp, \
            OpenAIStandIn(tokenizer="o200k_base", latency=latency) as judge:
        work = Path(tmp)
        url = None if args.embedded else judge.base_url
        with ServiceProcess(serve_args(url, work), work, env=serve_env(work, args.scope),
                            code=args.code, timeout=300) as svc:
            run = measure(svc.url, args.n, call_latency=latency)
    judged = "embedded matcher" if args.embedded else "LLM judge"
    print(f"{judged}, cache scope {args.scope or 'default'}: {run.line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
