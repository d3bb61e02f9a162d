"""What one 60-byte ``POST /v1/calibrate`` costs in provider requests (issue 31.3's attack).

``bonusjudge serve`` (concurrency 16, the stand-in judge in its own process, the shared human-rated
sets read in place) receives ``{"set": SET, "metrics": ["coverage"], "retest": true}``; the
benchmark waits for the run to finish and prints the provider requests the stand-in received,
the most it had in flight, and the run's wall time, next to the service's concurrency, the set's
items and its distinct references (the sets carry no bonus points: each reference is split into
points once per pass, cached in the first pass; ``retest`` is a second, uncached pass). The
issue's attack run measured 84,052 requests and 96 in flight for ``evouna_tq`` before calibration
runs shared the service's grader.

Standalone (not in ``run_all``): ``.venv/bin/python -m bench.calibrate_requests``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.common import log, machine, section_parser, set_bench_env, write_json
from bench.standin import StandInProcess
from tests.helpers.processes import ServiceProcess

__all__ = ["main"]

SHARED = Path(__file__).resolve().parents[2] / "shared" / "calibration"
FILES = {"evouna_tq": "evouna/tq.jsonl"}


def _asked(path: Path) -> tuple[int, int]:
    """Items of the set and its distinct (question, reference) pairs (one extraction each)."""
    items, references = 0, set()
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            items += 1
            references.add((row["question"], row["reference"]))
    return items, len(references)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the request and print the table; ``--json PATH`` writes the figures."""
    parser = section_parser("bench.calibrate_requests", __doc__)
    parser.add_argument("--set", default="evouna_tq", choices=sorted(FILES))
    parser.add_argument("--latency", type=float, default=0.02, help="stand-in seconds per call")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    set_bench_env()
    items, references = _asked(SHARED / FILES[args.set])
    load = os.getloadavg()
    body = {"set": args.set, "metrics": ["coverage"], "retest": True}
    with tempfile.TemporaryDirectory(prefix="bonusjudge-calibrate-") as tmp, \
            StandInProcess(latency=args.latency) as judge:
        work = Path(tmp)
        env = {"BONUSJUDGE_DATA_DIR": str(work / "data"),
               "BONUSJUDGE_CALIBRATION_DIR": str(SHARED),
               "BONUSJUDGE_CONCURRENCY": str(args.concurrency)}
        serve = ["--model", "openai/standin", "--api-base", judge.base_url,
                 "--metrics", "coverage", "--cache-dir", str(work / "cache")]
        with ServiceProcess(serve, work, env=env) as service:
            judge.reset_stats()
            started = time.monotonic()
            answer = httpx.post(f"{service.url}/v1/calibrate", json=body, timeout=60)
            answer.raise_for_status()
            location = f"{service.url}{answer.headers['location']}"
            log(f"{args.set}: {len(json.dumps(body))}-byte request accepted; waiting")
            status: dict[str, Any] = {}
            while True:
                status = httpx.get(location, timeout=60).json()
                if status.get("status") in {"done", "failed", "cancelled"}:
                    break
                time.sleep(1.0)
            wall = time.monotonic() - started
            seen = judge.stats()
    row = {
        "set": args.set, "items": items, "references": references,
        "requests": seen.requests,
        "max_in_flight": seen.max_in_flight, "concurrency": args.concurrency,
        "status": status.get("status"), "wall_s": round(wall, 1),
    }
    print(f"\nPOST /v1/calibrate {json.dumps(body)} (stand-in {args.latency:g} s/call, "
          f"load {load[0]:.2f} -> {os.getloadavg()[0]:.2f})\n")
    print("| set | items | distinct references | provider requests | most in flight "
          "| service concurrency | status | wall |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {row['set']} | {items} | {references} | {row['requests']} "
          f"| {row['max_in_flight']} | {args.concurrency} | {row['status']} | {row['wall_s']} s |")
    write_json(args.json, {"machine": machine(), "row": row})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
