"""A job's items as stored (issue 41.3): invalid lines stored compactly (the first
``MAX_LISTED_INVALID`` listed, each with a short message, the rest counted), and the stored-bytes
quota counting what the store writes (rows and index entries), on both stores."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.jobs import JobItem, JobStore
from api.jobs.items import MAX_ERROR_CHARS, MAX_LISTED_INVALID
from bonusjudge_client.wire.grading import GradeRequest
from bonusjudge_client.wire.schemas import ItemError

Finished = Callable[[TestClient, str], list[dict[str, Any]]]
"""The ``finished`` fixture (tests/api/jobs/conftest.py)."""

NDJSON = {"content-type": "application/x-ndjson"}


def item(n: int, **extra: Any) -> dict[str, Any]:
    return {"id": f"it-{n}", "question": f"How does Levin feel? ({n})",
            "reference": "He feels humiliated and hurt.",
            "bonus_points": ["Levin feels humiliated"], "response": f"Levin is ashamed ({n}).",
            **extra}


def test_invalid_lines_past_the_cap_are_counted_not_listed(
    client: TestClient, finished: Finished
) -> None:
    bad = MAX_LISTED_INVALID + 200
    long_id = json.dumps({"id": "x" * 5_000, "question": ""})  # its error quotes nothing long
    lines = [b"{bad:1}"] * (bad - 1) + [long_id.encode()]
    lines += [json.dumps(item(n)).encode() for n in range(3)]
    created = client.post("/v1/jobs", content=b"\n".join(lines), headers=NDJSON)
    assert created.status_code == 202, created.text
    assert (created.json()["total"], created.json()["invalid"]) == (3, bad)
    entries = finished(client, f"/v1/jobs/{created.json()['id']}")
    errors = [entry for entry in entries if entry["error"] is not None]
    assert [entry["error"]["line"] for entry in errors] == list(range(1, MAX_LISTED_INVALID + 1))
    assert errors[0]["error"]["message"].startswith("line 1: not valid JSON")
    assert sum(entry["result"] is not None for entry in entries) == 3
    # A listed error's message, field and id are cut short; the last bad line is not listed.
    created = client.post("/v1/jobs", content=long_id.encode(), headers=NDJSON)
    (entry,) = finished(client, f"/v1/jobs/{created.json()['id']}")
    assert len(entry["id"]) == MAX_ERROR_CHARS and entry["id"].endswith("…")


def test_a_multiple_choice_job_lists_its_first_bad_lines(
    client: TestClient, finished: Finished
) -> None:
    good = {"id": "q1", "choices": ["In the drawer", "On the table"], "answer": "A",
            "response": "[[A]]"}
    lines = [b"{bad:1}"] * (MAX_LISTED_INVALID + 5) + [json.dumps(good).encode()]
    created = client.post("/v1/mcq/jobs", content=b"\n".join(lines), headers=NDJSON)
    assert created.status_code == 202, created.text
    assert (created.json()["total"], created.json()["invalid"]) == (1, MAX_LISTED_INVALID + 5)
    path = f"/v1/mcq/jobs/{created.json()['id']}"
    finished(client, path)
    summary = client.get(f"{path}/summary").json()
    assert [bad["line"] for bad in summary["bad_lines"]] == list(range(1, MAX_LISTED_INVALID + 1))
    assert summary["items"] == 1


def used_bytes(store: JobStore) -> int:
    """What the store's tables and indexes take now: pages in use (SQLite), relations (Postgres)."""
    if store.db.postgres:
        with store.db.read() as conn:
            return int(conn.execute(text(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind = 'r'")).scalar() or 0)
    assert store.path is not None
    conn = sqlite3.connect(store.path)
    try:
        pages, free, size = (conn.execute(f"PRAGMA {name}").fetchone()[0]
                             for name in ("page_count", "freelist_count", "page_size"))
    finally:
        conn.close()
    return int((pages - free) * size)


def bad_item(index: int) -> JobItem:
    message = f"line {index + 1}: not valid JSON: Expecting property name (column 2)"
    return JobItem(index, str(index + 1), index + 1, None,
                   ItemError(type="invalid_input", message=message, line=index + 1))


def good_item(index: int) -> JobItem:
    request = GradeRequest.model_validate(item(index, response=f"He is ashamed {index} " * 8))
    return JobItem(index, request.id, None, request, None)


@pytest.mark.parametrize(
    ("bad", "good"), [(100_000, 0), (0, 4_000), (3_000, 3_000)],
    ids=["100k-bad-lines", "4k-items", "mixed"],
)
def test_the_quota_counts_what_the_store_writes(
    open_store: Callable[..., JobStore], bad: int, good: int
) -> None:
    store = open_store()
    jobs = [[bad_item(n) if n < bad else good_item(n) for n in range(bad + good)]
            for _ in range(3)]
    before = used_bytes(store)
    counted = 0
    for job in jobs:
        job_id = uuid.uuid4().hex
        store.create(job_id=job_id, owner="a", items=job, overrides=None, config=None,
                     lease_owner=None, lease_seconds=30)
        row = store.get(job_id)
        assert row is not None
        counted += int(row["bytes"])
    grown = used_bytes(store) - before
    # Before: 100,000 bad lines wrote 34 MB and counted 11 MB (a row and an entry per line).
    assert 0.85 < counted / grown < 1.15, (counted, grown)
    if not good:
        assert grown < 3 * 1_000_000, grown  # the listed lines alone, however many were sent
