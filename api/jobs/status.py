"""What callers see of a stored job: its public status, and the aggregates of a grading job."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from api.jobs.schema import JobRow
from api.jobs.spend import PAUSED, is_paused
from api.jobs.store import JobStore
from bonusjudge_client.wire.schemas import JobStatus
from judge.aggregate import Aggregator, ProvenanceCalls, Summary


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def job_status(row: JobRow, *, now: float | None = None) -> JobStatus:
    """The public status of a job row, with the current run's rate and the ETA.

    A job paused at a cost budget says ``paused`` (its stored status stays queued or running:
    ``api.jobs.spend``), so a poller waiting for the job to end sees that it will not go on.
    """
    now = time.time() if now is None else now
    paused = is_paused(row, now)
    rate: float | None = None
    eta: float | None = None
    started = row["run_started_at"]
    graded = int(row["done"]) - int(row["run_start_done"])
    if (row["status"] == "running" and not paused and started is not None and graded > 0
            and now > started):
        rate = graded / (now - started)
        eta = round((int(row["total"]) - int(row["done"])) / rate, 2)
        rate = round(rate, 3)
    return JobStatus(
        id=row["id"],
        kind=row["kind"],
        status=PAUSED if paused else row["status"],
        total=row["total"],
        done=row["done"],
        scored=row["scored"],
        unscored=row["unscored"],
        invalid=row["invalid"],
        rate_per_s=rate,
        eta_s=eta,
        created_at=_utc(row["created_at"]),
        updated_at=_utc(row["updated_at"]),
        judge=row["model"],
        config_hash=row["config_hash"],
        detail=row["detail"],
        paused=paused,
    )


def grading_summary(store: JobStore, job_id: str) -> Summary:
    """Aggregates over a grading job's stored results (blocking: run it in a worker thread)."""
    aggregator = Aggregator()
    calls = ProvenanceCalls()
    for result in store.results(job_id):
        aggregator.add(result)
        calls.add(result)
    return aggregator.summary(**calls.counters())
