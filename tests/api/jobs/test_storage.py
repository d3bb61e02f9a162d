"""The job store's contents: compact items and results, old rows still read, retention.

Tests of what both stores do run on each (``jobs_url``/``open_store`` in conftest.py); the
on-disk size and the pre-Alembic rows are SQLite's alone.
"""



import json
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from api.jobs import JOBS_DB, SCHEMA_REVISION, JobItem, JobStore
from api.jobs.schema import jobs, results
from api.services.calibration import REPORTS
from bonusjudge_client.wire.grading import GradeRequest
from judge.engine import Grader
from tests.helpers.engine import levin_item

TEXT = (
    "Levin Kitty Anna Vronsky Stiva Dolly Moscow Petersburg estate mowing peasants ball "
    "letter train station snow winter summer feels thinks believes hopes fears knows that "
    "the a of and to in was he she they his her not with but for at by from as"
)
WORDS = TEXT.split()


@pytest.fixture
def app_for(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> Callable[..., FastAPI]:
    """The service over the fake judge grading 8 items at once, with these settings."""

    def build(**settings: Any) -> FastAPI:
        return make_app(make_grader(concurrency=8), **settings)

    return build


def item(n: int, **extra: Any) -> dict[str, Any]:
    return levin_item(n, **{"question": f"How does Levin feel? ({n})", **extra})


def wait_for(
    client: TestClient, job_id: str, predicate: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if predicate(status):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)  # each poll is a request through the app: CPU the job then lacks


def store_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in data.glob(f"{JOBS_DB}*"))


def test_a_job_takes_at_most_three_times_its_upload(
    tmp_path: Path, app_for: Callable[..., FastAPI], jobs_url: str | None,
    open_store: Callable[[], JobStore],
) -> None:
    rng = random.Random(0)
    # Small items (their results are ~10x larger than they are) and a few long contexts, 40 to
    # 1. The ratios do not depend on the count (stored / upload: 0.45 here, 0.43 at 800 + 20;
    # 3.98 and 3.96 with compression off); only SQLite's empty file (72 KB) weighs more on disk.
    lines = [json.dumps(item(n)) for n in range(200)]
    lines += [
        json.dumps(item(n, context=" ".join(rng.choice(WORDS) for _ in range(4000))))
        for n in range(200, 205)
    ]
    upload = ("\n".join(lines) + "\n").encode()
    with TestClient(app_for(jobs_url=jobs_url)) as client:
        answer = client.post(
            "/v1/jobs", content=upload, headers={"content-type": "application/x-ndjson"}
        )
        assert answer.status_code == 202
        job = answer.json()["id"]
        assert wait_for(client, job, lambda s: s["status"] == "done")["scored"] == 205
        stream = client.get(f"/v1/jobs/{job}/results").text
        entries = [json.loads(line) for line in stream.splitlines()]
        assert len(entries) == 205 and all(e["result"]["status"] == "scored" for e in entries)
        assert client.get(f"/v1/jobs/{job}/summary").json()["scored"] == 205
    store = open_store()
    row = store.get(job)
    assert row is not None
    # What the key's quota counts: items, results and the job's two dictionaries.
    assert row["bytes"] <= 3 * len(upload), (row["bytes"], len(upload))
    with store.db.read() as conn:
        stored = conn.execute(select(results.c.result).where(results.c.job_id == job)).scalars()
        tags = {value[0] for value in stored}
    assert tags == {3}  # every result compressed with the job's result dictionary
    if jobs_url is None:  # the whole file (with SQLite's pages and indexes) on disk
        used = store_bytes(tmp_path / "data")
        assert used <= 3 * len(upload), (used, len(upload))


def test_rows_stored_as_text_by_an_older_version_still_read(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    # A version-2 database: no compression columns, JSON stored as text.
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE jobs (id TEXT PRIMARY KEY, kind TEXT NOT NULL DEFAULT 'grade',"
            " options TEXT NOT NULL DEFAULT '{}', owner TEXT NOT NULL, status TEXT NOT NULL,"
            " total INTEGER NOT NULL, invalid INTEGER NOT NULL, done INTEGER NOT NULL DEFAULT 0,"
            " scored INTEGER NOT NULL DEFAULT 0, unscored INTEGER NOT NULL DEFAULT 0,"
            " next_seq INTEGER NOT NULL DEFAULT 0, overrides TEXT NOT NULL, model TEXT NOT NULL,"
            " config_hash TEXT NOT NULL, detail TEXT, created_at REAL NOT NULL,"
            " updated_at REAL NOT NULL, run_started_at REAL, run_start_done INTEGER NOT NULL"
            " DEFAULT 0, lease_owner TEXT, lease_expires REAL NOT NULL DEFAULT 0);"
            "CREATE TABLE items (job_id TEXT NOT NULL, idx INTEGER NOT NULL, item_id TEXT,"
            " line INTEGER, request TEXT, error TEXT, result TEXT, status TEXT, seq INTEGER,"
            " PRIMARY KEY (job_id, idx)) WITHOUT ROWID;"
            "PRAGMA user_version = 2;"
        )
        request = GradeRequest.model_validate(item(1)).model_dump_json()
        conn.execute(
            "INSERT INTO jobs (id, owner, status, total, invalid, done, next_seq, overrides,"
            " model, config_hash, created_at, updated_at) VALUES ('old', 'o', 'queued', 2, 1,"
            " 1, 2, '{}', 'fake/judge', 'h', 1, 1)"
        )
        conn.executemany(
            "INSERT INTO items (job_id, idx, item_id, request, error, result, status, seq)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [("old", 0, "it-1", request, None, None, None, None),
             ("old", 1, "it-2", None, '{"type": "invalid_input", "message": "bad"}', None,
              None, 1),
             ("old", 2, "it-3", request, None, '{"id": "it-3", "status": "scored"}', "scored",
              2)],
        )
    store = JobStore(path)
    try:
        assert store.pending("old", -1, 10) == [(0, "it-1", request)]
        lines = [json.loads(line) for _, line in store.entries("old", 0, 2, 10)]
        assert lines[0]["error"]["message"] == "bad"
        assert lines[1]["result"] == {"id": "it-3", "status": "scored"}
        # New results of the old job are compressed beside the old text rows.
        assert store.save_results("old", [(0, '{"id": "it-1", "status": "scored"}' * 10,
                                           "scored", True)]) == 1
        assert list(store.raw_results("old"))[-1] == '{"id": "it-1", "status": "scored"}' * 10
        with sqlite3.connect(path) as conn:
            revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
            stored = dict(conn.execute("SELECT idx, typeof(result) FROM results").fetchall())
        assert revision == SCHEMA_REVISION
        assert stored == {0: "blob", 1: "null", 2: "text"}
    finally:
        store.close()


def backdate(store: JobStore, job_ids: list[str], days: float) -> None:
    with store.db.tx() as conn:
        conn.execute(
            update(jobs).where(jobs.c.id.in_(job_ids))
            .values(updated_at=jobs.c.updated_at - days * 86_400)
        )


def test_finished_jobs_and_reports_expire_after_the_retention_period(
    tmp_path: Path, app_for: Callable[..., FastAPI], jobs_url: str | None,
    open_store: Callable[[], JobStore],
) -> None:
    data = tmp_path / "data"
    with TestClient(app_for(retention_days=1, jobs_url=jobs_url)) as client:
        old, recent = (
            client.post("/v1/jobs", json={"items": [item(n)]}).json()["id"] for n in (1, 2)
        )
        for job in (old, recent):
            wait_for(client, job, lambda s: s["status"] == "done")
    # A finished calibration run (its files in the store, a scratch folder left beside it)
    # and a queued job.
    store = open_store()
    request = GradeRequest.model_validate(item(3))
    store.create(job_id="cal", owner="anonymous", items=[], overrides=None, config=None,
                 lease_owner=None, lease_seconds=30, kind="calibrate", total=0)
    store.put_files("cal", {"report.json": b"{}", "report.md": b"# report\n"})
    store.create(job_id="waiting", owner="anonymous",
                 items=[JobItem(0, "it-3", None, request, None)], overrides=None, config=None,
                 lease_owner=None, lease_seconds=30, kind="never-run-here")
    report = data / REPORTS / "cal"
    report.mkdir(parents=True)
    (report / "report.md").write_text("# report\n")
    backdate(store, [old, "cal", "waiting"], days=2)

    with TestClient(app_for(retention_days=1, jobs_url=jobs_url)) as client:
        deadline = time.monotonic() + 10
        while client.get(f"/v1/jobs/{old}").status_code != 404:
            assert time.monotonic() < deadline, "the expired job was never removed"
            time.sleep(0.02)
        assert client.get(f"/v1/jobs/{recent}").status_code == 200
        assert not report.exists()
        # At most one look every few minutes: a job expiring now waits for the next one.
        backdate(store, [recent], days=2)
        time.sleep(0.3)
        assert client.get(f"/v1/jobs/{recent}").status_code == 200
    assert store.file_names("cal") == []
    with store.db.read() as conn:
        kept = set(conn.execute(select(jobs.c.id)).scalars())
        finished = set(conn.execute(select(results.c.job_id).distinct()).scalars())
    assert kept == {recent, "waiting"}  # an unfinished job is never removed, however old
    assert finished == {recent}
    assert [line for _, line in store.entries(old, 0, 10, 10)] == []
    assert store.pending("waiting", -1, 10) == [(0, "it-3", request.model_dump_json())]


def test_retention_zero_keeps_everything(
    app_for: Callable[..., FastAPI], jobs_url: str | None, open_store: Callable[[], JobStore]
) -> None:
    with TestClient(app_for(retention_days=0, jobs_url=jobs_url)) as client:
        job = client.post("/v1/jobs", json={"items": [item(1)]}).json()["id"]
        wait_for(client, job, lambda s: s["status"] == "done")
    backdate(open_store(), [job], days=10_000)
    with TestClient(app_for(retention_days=0, jobs_url=jobs_url)) as client:
        time.sleep(0.2)
        assert client.get(f"/v1/jobs/{job}").status_code == 200
