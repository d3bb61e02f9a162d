"""What judge calls spend, in the job store (issue 32.2): added atomically per key and UTC day
and per job, by several processes at once, and a job paused at a budget is not claimed."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from api.jobs import JobItem, JobStore
from api.jobs.spend import FOREVER, next_midnight, utc_day
from bonusjudge_client.wire.grading import GradeRequest

REQUEST = GradeRequest(question="q", reference="r", bonus_points=["p"], response="a")


def test_spend_adds_up_across_stores_and_days(open_store: Callable[..., JobStore]) -> None:
    stores = [open_store(), open_store()]  # two processes' connections to one database
    day = utc_day(time.time())

    def add(n: int) -> None:
        stores[n % 2].spend.add({("a", day): (0.001, 1)}, {})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(add, range(40)))
    cost, requests = stores[0].spend.key_day("a", day)
    assert requests == 40 and math.isclose(cost, 0.04)
    totals, _ = stores[1].spend.add({("a", day): (0.01, 2), ("b", "2000-01-01"): (1.0, 1)}, {})
    assert math.isclose(totals[("a", day)], 0.05) and totals[("b", "2000-01-01")] == 1.0
    assert stores[0].spend.key_day("a", "2000-01-01") == (0.0, 0)


def test_a_paused_job_is_not_claimed_until_its_time(open_store: Callable[..., JobStore]) -> None:
    store = open_store()
    store.create(job_id="j", owner="a", items=[JobItem(0, "1", None, REQUEST, None)],
                 overrides=None, config=None, lease_owner=None, lease_seconds=30)
    _, costs = store.spend.add({}, {"j": 0.25})
    assert costs == {"j": 0.25}
    assert store.spend.pause("j", FOREVER, "paused: budget_exhausted: max_cost")
    assert store.claim("t", 30, 4) == []
    assert store.spend.resume_day_pauses() == 0  # the job's own cap: it stays paused
    assert store.claim("t", 30, 4) == []
    store.spend.pause("j", time.time() + 3600, "paused: budget_exhausted: max_cost_per_key_usd")
    assert store.spend.resume_day_pauses() == 1  # a restart: a key-day pause may run again
    assert [c.job_id for c in store.claim("t", 30, 4)] == ["j"]
    row = store.get("j")
    assert row is not None and row["cost_usd"] == 0.25 and row["detail"].startswith("paused")
    store.spend.unpause("j")
    row = store.get("j")
    assert row is not None and (row["paused_until"], row["detail"]) == (None, None)


def test_the_next_utc_midnight() -> None:
    evening = datetime(2026, 11, 26, 21, 30, tzinfo=UTC).timestamp()
    assert next_midnight(evening) == datetime(2026, 11, 27, tzinfo=UTC).timestamp()
    assert utc_day(evening) == "2026-11-26"
