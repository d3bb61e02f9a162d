"""A key's day budget on ``bonusjudge serve`` (issue 32.2, the service half).

What key A's job spends against ``BONUSJUDGE_MAX_COST_PER_KEY_USD``, what key B gets meanwhile,
and the resume. Against the strict stand-in (tiktoken ``o200k_base`` usage, 0.1 s per call),
gpt-4o-mini prices, coverage + defects, two API keys. The baseline, in the same run: the
workload as one job of key B with no budget (its requests and what the stand-in's tokens cost).
Then, for each limit (a share of that cost), a fresh service and store: A submits the same
workload as a job while B grades 20 items on ``/v1/grade``; A's job pauses; the table gives what
the store holds for A against the limit, A's requests, the items done at the pause, A's answer
on ``/v1/grade`` and B's answers; then the service restarts with twice the baseline's cost as
the limit, A's job resumes to the end, and A's requests over both runs are counted against the
baseline's (none sent twice: the stand-in's recorded bodies).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    load_requests,
    log,
    machine,
    parse_section_args,
    section_parser,
    workload_path,
    write_json,
)

MODEL = "openai/gpt-4o-mini"
KEYS = ("bench-budget-a", "bench-budget-b")
SHARES = (0.25, 0.5)


def _serve(server: Any, folder: Path, limit: float | None) -> Any:
    from tests.helpers.processes import ServiceProcess

    args = ["--model", MODEL, "--api-base", server.base_url, "--metrics", "coverage,defects",
            "--cache-dir", str(folder / "cache"), "--no-preflight"]
    env = {"BONUSJUDGE_API_KEYS": json.dumps(list(KEYS)),
           "BONUSJUDGE_DATA_DIR": str(folder / "data")}
    if limit is not None:
        env["BONUSJUDGE_MAX_COST_PER_KEY_USD"] = repr(limit)
    folder.mkdir(parents=True, exist_ok=True)
    return ServiceProcess(args, folder, env=env)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _wait(http: Any, job_id: str, key: str, paused: bool) -> dict[str, Any]:
    deadline = time.monotonic() + 900
    while True:
        status: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", headers=_auth(key)).json()
        if (status["paused"] if paused else status["status"] == "done"):
            return status
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} never got there: {status}")
        time.sleep(0.2)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the baseline, the budgeted runs and their resumes; print the table."""
    parser = section_parser("bench.budget_service", __doc__)
    parser.add_argument("--items", type=int, default=200,
                        help="items of the workload (default 200)")
    args = parse_section_args(parser, argv)
    import httpx

    from api.auth import hash_key
    from api.jobs import JOBS_DB, JobStore
    from api.jobs.spend import utc_day
    from judge.estimate import model_prices
    from standins.openai_server import OpenAIStandIn

    prices = model_prices(MODEL)
    assert prices is not None
    items = [r.model_dump(mode="json", exclude_none=True)
             for _, r in load_requests(workload_path(), limit=args.items)]
    probes = [{**items[n], "id": f"b{n}", "response": f"{items[n]['response']} (B)"}
              for n in range(20)]
    rows: list[dict[str, Any]] = []
    load_before = machine()["load_avg"]
    with OpenAIStandIn(tokenizer="o200k_base", latency=0.1, record_requests=100_000) as server, \
            tempfile.TemporaryDirectory() as tmp:
        log(f"baseline: {len(items)} items as one job, no budget")
        with _serve(server, Path(tmp) / "base", None) as svc, \
                httpx.Client(base_url=svc.url, timeout=120) as http:
            job = http.post("/v1/jobs", json={"items": items}, headers=_auth(KEYS[1])).json()
            _wait(http, job["id"], KEYS[1], paused=False)
        base = server.stats()
        base_cost = prices.cost(base.prompt_tokens, base.completion_tokens)
        for share in SHARES:
            limit = base_cost * share
            folder = Path(tmp) / f"s{share}"
            log(f"limit {share:.0%} of the baseline's cost: ${limit:.6f}")
            server.reset_stats()
            server.clear_requests()
            with _serve(server, folder, limit) as svc, \
                    httpx.Client(base_url=svc.url, timeout=120) as http:
                job = http.post("/v1/jobs", json={"items": items}, headers=_auth(KEYS[0])).json()
                b_codes = [http.post("/v1/grade", json=p, headers=_auth(KEYS[1])).status_code
                           for p in probes]
                paused = _wait(http, job["id"], KEYS[0], paused=True)
                time.sleep(2.0)  # every chunk stopped, the spend flushed
                paused = http.get(f"/v1/jobs/{job['id']}", headers=_auth(KEYS[0])).json()
                a_grade = http.post("/v1/grade", json=items[0] | {"id": "again"},
                                    headers=_auth(KEYS[0])).status_code
            sent = server.stats()
            store = JobStore(folder / "data" / JOBS_DB)
            try:
                stored_a, requests_a = store.spend.key_day(hash_key(KEYS[0]), utc_day(time.time()))
                _, requests_b = store.spend.key_day(hash_key(KEYS[1]), utc_day(time.time()))
            finally:
                store.close()
            with _serve(server, folder, 2 * base_cost) as svc, \
                    httpx.Client(base_url=svc.url, timeout=120) as http:
                done = _wait(http, job["id"], KEYS[0], paused=False)
            total = server.stats()
            bodies = [json.dumps(b.get("messages"), sort_keys=True) for b in server.requests]
            rows.append({
                "share": share, "limit_usd": round(limit, 6),
                "stored_a_usd": round(stored_a, 6), "stored_over_limit": round(stored_a / limit, 4),
                "a_requests": requests_a, "b_requests": requests_b,
                "standin_requests": sent.requests,
                "a_done_at_pause": paused["done"], "a_unscored": paused["unscored"],
                "a_grade_status": a_grade, "b_statuses": sorted(set(b_codes)),
                "resume_requests": total.requests - sent.requests,
                "job_done_scored": done["scored"],
                "a_total_requests": total.requests - requests_b,
                "baseline_requests": base.requests,
                "sent_twice": len(bodies) - len(set(bodies)),
            })
    print(f"a key's day budget on bonusjudge serve: {MODEL} on the strict stand-in, "
          f"{len(items)} items as key A's job while key B grades 20 items; baseline (no budget) "
          f"${base_cost:.6f} in {base.requests} requests; load average {load_before} before, "
          f"{machine()['load_avg']} after")
    print(f"{'limit':>6}{'limit $':>11}{'A stored $':>11}{'stored/lim':>11}{'A req':>7}"
          f"{'done@pause':>11}{'A 429':>6}{'B codes':>9}{'resume req':>11}{'A total req':>12}"
          f"{'baseline':>9}{'twice':>6}")
    for r in rows:
        print(f"{r['share']:>6.0%}{r['limit_usd']:>11.6f}{r['stored_a_usd']:>11.6f}"
              f"{r['stored_over_limit']:>11}{r['a_requests']:>7}{r['a_done_at_pause']:>11}"
              f"{r['a_grade_status']:>6}{','.join(map(str, r['b_statuses'])):>9}"
              f"{r['resume_requests']:>11}{r['a_total_requests']:>12}"
              f"{r['baseline_requests']:>9}{r['sent_twice']:>6}")
    write_json(args.json, {"rows": rows, "baseline_usd": base_cost,
                           "baseline_requests": base.requests})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
