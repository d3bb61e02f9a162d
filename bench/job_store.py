"""CPU per job-store operation on SQLite: this checkout against an older one, in the same run.

Issue 29's test-loop work found the job store building its SQLAlchemy statements on every call:
building a statement and computing its cache key cost more CPU than SQLite took to run it. The
statements are now built once per dialect (``api.jobs.database.DialectStatements``), and a
grading job stores the results that finish together in one transaction. Each row is one
operation, timed in a fresh interpreter per checkout (``--before`` names the older commit, run
from a temporary ``git worktree``) on a new SQLite store:

* saving results, one per transaction and eight per transaction (per result);
* a claim of a chunk and its release; a renewal of one chunk's lease; a claim that finds nothing;
* a page of pending items; a job's row.

Standalone (not in ``run_all``): ``.venv/bin/python -m bench.job_store``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    ROOT,
    log,
    machine,
    older_checkout,
    parse_section_args,
    print_table,
    section_parser,
    write_json,
)
from core.processes import checkout_pythonpath

__all__ = ["main"]

BEFORE = "ae3ede1"
"""The last commit before the statements were built once (2026-11-26)."""

_PROBE = r"""
import json, sys, tempfile, time
from pathlib import Path
from api.jobs import JobItem, JobStore
from tests.helpers.engine import numbered_request as request

repeat = int(sys.argv[1])
store = JobStore(Path(tempfile.mkdtemp()) / "jobs.sqlite3", chunk_items=4)
items = [JobItem(i, f"it-{i}", None, request(i), None) for i in range(16 * repeat)]
store.create(job_id="j", owner="a", items=items, overrides=None, config=None,
             lease_owner=None, lease_seconds=30.0)
result = json.dumps({"id": "it", "status": "scored", "coverage": {"points": [1, 2, 3]}})
figures = {}

def per_call(name, calls, units=1):
    calls[0]()  # the first call builds and compiles what later calls reuse
    start = time.process_time()
    for call in calls[1:]:
        call()
    figures[name] = (time.process_time() - start) / ((len(calls) - 1) * units) * 1e3

per_call("save 1 result / transaction",
         [lambda i=i: store.save_results("j", [(i, result, "scored", True)])
          for i in range(repeat)])
per_call("save 8 results / transaction",
         [lambda i=i: store.save_results(
             "j", [(repeat + 8 * i + k, result, "scored", True) for k in range(8)])
          for i in range(repeat // 8)], units=8)

def claim_and_release():
    chunk = store.claim("probe", 30.0, 1)[0]
    store.release("j", "probe", chunk.lo)

per_call("claim + release a chunk", [claim_and_release] * repeat)
held = store.claim("holder", 30.0, 1)[0]
per_call("renew one chunk", [lambda: store.renew("j", "holder", 30.0, held.lo)] * repeat)
per_call("claim finding nothing",
         [lambda: store.claim("probe", 30.0, 4, ("mcq",))] * repeat)
per_call("page of pending items", [lambda: store.pending("j", -1, 64)] * repeat)
per_call("a job's row", [lambda: store.get("j")] * repeat)
store.close()
print(json.dumps(figures))
"""


def _probe(tree: Path, repeat: int) -> dict[str, float]:
    """Run the probe in a fresh interpreter on ``tree``'s code; ms of CPU per operation."""
    env = {**os.environ, "PYTHONPATH": checkout_pythonpath(tree)}
    done = subprocess.run([sys.executable, "-c", _PROBE, str(repeat)], cwd=tree, env=env,
                          capture_output=True, text=True, check=True)
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    """Time each operation in both checkouts and print the table with the ratios."""
    parser = section_parser("bench.job_store", __doc__)
    parser.add_argument("--before", default=BEFORE, help=f"older commit (default {BEFORE})")
    parser.add_argument("--repeat", type=int, default=400,
                        help="calls per operation (default 400)")
    args = parse_section_args(parser, argv)
    load = machine()["load_avg"]
    with tempfile.TemporaryDirectory() as work, older_checkout(args.before, Path(work)) as old:
        log(f"probing {args.before}")
        before = _probe(old, args.repeat)
        log("probing this checkout")
        after = _probe(ROOT, args.repeat)
    rows: list[dict[str, Any]] = [
        {"operation": name, "before_ms": before[name], "after_ms": after[name],
         "ratio": before[name] / after[name]}
        for name in after
    ]
    print_table(
        f"job store on SQLite, ms of CPU per operation ({args.repeat} calls each), "
        f"{args.before} -> this checkout",
        [("operation", "operation", "<30"), ("before ms", "before_ms", ">10.3f"),
         ("after ms", "after_ms", ">10.3f"), ("before/after", "ratio", ">13.1f")],
        rows, load_before=load,
    )
    write_json(args.json, {"before": args.before, "rows": rows})


if __name__ == "__main__":
    main()
