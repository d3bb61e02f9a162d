"""Issue 31.2 and 31.3's third bullet under ``bonusjudge serve``, before and after, in one run.

Each row is one checkout (``--before`` names the older commit, run from a temporary ``git
worktree``) against the same strict OpenAI stand-in judge, the service with two API keys and an
operator key:

* **Poison**: key A sends 16-item batches whose content the stand-in answers 500 while key B
  grades ``--b-requests`` items one at a time (5 a second): B's 503 answers, and the stand-in's
  500s per A item sent (the cost of one poison item; 2 judge tasks each).
* **Counting**: both keys grade 20 items under 10% 5xx, 20% malformed JSON (re-asked) and 10%
  refusals: the requests and prompt tokens the stand-in received against ``/metrics``.

Usage: ``python -m bench.provider_isolation [--before REF] [--json PATH]``; standalone, not in
``run_all``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.common import log, machine, older_checkout, section_parser, set_bench_env, write_json
from standins.openai_server import FaultPlan, OpenAIStandIn
from standins.openai_server.replies import default_reply
from standins.openai_server.wire import analyse
from tests.helpers.processes import ServiceProcess

BEFORE = "9a49e40~1"
"""The commit before the isolated breaker and the request accounting (9a49e40's parent)."""

KEYS = {"a": "bench-key-a", "b": "bench-key-b", "operator": "bench-operator"}


def _auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def _digest(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def _item(tag: str, n: int) -> dict[str, Any]:
    return {"question": f"Question {n}?", "reference": f"Reference {n}.",
            "bonus_points": [f"point {n}"], "response": f"response {tag} {n}"}


def _serve(work: Path, code: Path | None, base_url: str) -> ServiceProcess:
    folder = Path(tempfile.mkdtemp(dir=work))
    args = ["--model", "openai/standin", "--api-base", base_url, "--metrics", "coverage,defects",
            "--cache-dir", str(folder / "cache"), "--no-preflight"]
    env = {"BONUSJUDGE_DATA_DIR": str(folder / "data"),
           "BONUSJUDGE_API_KEYS": json.dumps([_digest(KEYS["a"]), _digest(KEYS["b"])]),
           "BONUSJUDGE_OPERATOR_KEYS": json.dumps([_digest(KEYS["operator"])])}
    return ServiceProcess(args, folder, env=env, code=code)


def _poison_handler(body: dict[str, Any]) -> Any:
    if "POISON" in json.dumps(body["messages"]):
        raise RuntimeError("the provider fails on this content")
    return default_reply(body, analyse(body), None)


def _poison(work: Path, code: Path | None, b_requests: int) -> dict[str, Any]:
    with OpenAIStandIn(handler=_poison_handler, record_requests=0) as judge, \
            _serve(work, code, judge.base_url) as service:
        stop = threading.Event()
        a_items = [0]

        def attack() -> None:
            with httpx.Client(base_url=service.url, headers=_auth("a"), timeout=120) as client:
                while not stop.is_set():
                    batch = [_item("POISON", a_items[0] + i) for i in range(16)]
                    a_items[0] += 16
                    client.post("/v1/grade/batch", json={"items": batch})

        attacker = threading.Thread(target=attack)
        attacker.start()
        statuses = []
        try:
            with httpx.Client(base_url=service.url, headers=_auth("b"), timeout=120) as client:
                for n in range(b_requests):
                    statuses.append(client.post("/v1/grade", json=_item("b", n)).status_code)
                    time.sleep(0.2)
        finally:
            stop.set()
            attacker.join(120)
        failed = judge.stats().outcomes.get("handler_error", 0)
    return {"b_503": statuses.count(503), "b_requests": len(statuses),
            "a_items": a_items[0], "requests_per_poison_item": failed / max(1, a_items[0])}


def _metric(text: str, name: str, label: str = "") -> float | None:
    for line in text.splitlines():
        if line.startswith((f"{name}{label} ", f"{name}_total{label} ")):
            return float(line.rsplit(" ", 1)[1])
    return None


def _counting(work: Path, code: Path | None) -> dict[str, Any]:
    faults = FaultPlan(
        probabilities={"server_error": 0.1, "malformed_json": 0.2, "refusal": 0.1}, seed=7)
    with OpenAIStandIn(faults=faults, record_requests=0) as judge, \
            _serve(work, code, judge.base_url) as service:
        judge.reset_stats()
        for who in ("a", "b"):
            httpx.post(f"{service.url}/v1/grade/batch", headers=_auth(who), timeout=300,
                       json={"items": [_item(who, n) for n in range(20)]})
        seen = judge.stats()
        text = httpx.get(f"{service.url}/metrics", headers=_auth("operator"), timeout=10).text
    return {"seen_requests": seen.requests, "metrics_requests": _metric(text,
            "bonusjudge_judge_calls"), "seen_prompt_tokens": seen.prompt_tokens,
            "metrics_prompt_tokens": _metric(text, "bonusjudge_tokens", '{kind="prompt"}')}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; ``--json PATH`` writes the rows."""
    parser = section_parser("bench.provider_isolation", __doc__)
    parser.add_argument("--before", default=BEFORE, help="the older commit to compare with")
    parser.add_argument("--b-requests", type=int, default=40, help="key B's requests")
    args = parser.parse_args(argv)
    set_bench_env()
    load = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bonusjudge-isolation-") as tmp:
        work = Path(tmp)
        with older_checkout(args.before, work) as old:
            for label, code in ((f"before ({args.before})", old), ("this checkout", None)):
                log(f"{label}: poison, then counting")
                rows.append({"code": label, **_poison(work, code, args.b_requests),
                             **_counting(work, code)})
    print(f"\nTwo keys on bonusjudge serve (load {load[0]:.2f} -> {os.getloadavg()[0]:.2f})\n")
    print("| code | B's 503s under A's poison | A items sent | requests per poison item "
          "| provider saw / /metrics requests | provider saw / /metrics prompt tokens |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['code']} | {r['b_503']} of {r['b_requests']} | {r['a_items']} "
              f"| {r['requests_per_poison_item']:.2f} | {r['seen_requests']} / "
              f"{r['metrics_requests']:.0f} | {r['seen_prompt_tokens']} / "
              f"{r['metrics_prompt_tokens']:.0f} |")
    write_json(args.json, {"machine": machine(), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
