"""GET /v1/jobs: the caller's grading jobs, newest first, in offset pages; both clients."""

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from api.jobs import GRADE, JobStore
from bonusjudge_client import AsyncJudgeClient, ClientHTTPError, JudgeClient, RetryPolicy
from judge.config import JudgeConfig
from judge.providers.base import Completion
from judge.providers.fake import FakeProvider
from tests.helpers.engine import levin_item, plain_answer

DATA = Path(__file__).resolve().parents[2] / "judge" / "data"
KEY_A = "list-key-a-0123456789"
KEY_B = "list-key-b-9876543210"
ITEM = levin_item(bonus_points=["Levin feels humiliated"])


class HeldProvider:
    """The fake judge, answering only once ``gate`` is set (jobs stay active until then)."""

    def __init__(self) -> None:
        self.inner = FakeProvider(handler=plain_answer)
        self.gate = threading.Event()

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        while not self.gate.is_set():
            await asyncio.sleep(0.005)
        return await self.inner.complete(
            messages, response_model, config, validation_context=validation_context
        )


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def provider() -> HeldProvider:
    held = HeldProvider()
    held.gate.set()
    return held


@pytest.fixture
def http(make_app: Callable[..., FastAPI], provider: HeldProvider) -> Iterator[TestClient]:
    with TestClient(make_app(provider=provider, api_keys=[KEY_A, KEY_B])) as client:
        yield client
        provider.gate.set()  # let held jobs finish, so the shutdown drains at once


def submit(http: TestClient, key: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        response = http.post("/v1/jobs", json={"items": [ITEM | {"id": f"x{i}"}]},
                             headers=auth(key))
        assert response.status_code == 202, response.text
        ids.append(response.json()["id"])
    return ids


def wait_finished(http: TestClient, job_id: str, key: str) -> None:
    deadline = time.monotonic() + 30
    while http.get(f"/v1/jobs/{job_id}", headers=auth(key)).json()["status"] in (
        "queued", "running"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.02)


def pages(http: TestClient, key: str, **params: Any) -> list[dict[str, Any]]:
    """Every page, following next_offset; each page's body."""
    out = []
    offset: int | None = 0
    while offset is not None:
        response = http.get("/v1/jobs", params={**params, "offset": offset}, headers=auth(key))
        assert response.status_code == 200, response.text
        out.append(response.json())
        offset = out[-1]["next_offset"]
    return out


def test_own_grading_jobs_newest_first_in_pages(http: TestClient) -> None:
    mine = submit(http, KEY_A, 5)
    theirs = submit(http, KEY_B, 2)
    # A multiple-choice job of the same caller is not a grading job: not listed here.
    mcq = http.post("/v1/mcq/jobs", headers=auth(KEY_A) | {"content-type": "application/x-ndjson"},
                    content=(DATA / "mcq_example_tombench.jsonl").read_bytes())
    assert mcq.status_code == 202, mcq.text

    whole = http.get("/v1/jobs", headers=auth(KEY_A)).json()
    assert [job["id"] for job in whole["jobs"]] == mine[::-1]
    assert whole["next_offset"] is None
    assert all(job["kind"] == "grade" and job["total"] == 1 for job in whole["jobs"])

    paged = pages(http, KEY_A, limit=2)
    assert [len(page["jobs"]) for page in paged] == [2, 2, 1]
    assert [page["next_offset"] for page in paged] == [2, 4, None]
    assert [job["id"] for page in paged for job in page["jobs"]] == mine[::-1]
    exact = http.get("/v1/jobs", params={"limit": 5}, headers=auth(KEY_A)).json()
    assert len(exact["jobs"]) == 5 and exact["next_offset"] is None
    for far in (9, 2**63, 10**30):  # past SQLite's 64-bit integers too: an empty page, not a 500
        beyond = http.get("/v1/jobs", params={"offset": far}, headers=auth(KEY_A)).json()
        assert beyond == {"jobs": [], "next_offset": None}

    # The other tenant sees only its own, and neither sees the other's in any page.
    other = [job["id"] for page in pages(http, KEY_B, limit=1) for job in page["jobs"]]
    assert other == theirs[::-1]
    for job_id in mine:
        wait_finished(http, job_id, KEY_A)
    assert [job["id"] for job in pages(http, KEY_B)[0]["jobs"]] == theirs[::-1]


def test_needs_a_key(http: TestClient) -> None:
    for headers in ({}, auth("wrong-key-000000")):
        response = http.get("/v1/jobs", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "unauthorized"


def test_status_filter(http: TestClient, provider: HeldProvider) -> None:
    provider.gate.clear()  # the judge holds every job active until the gate opens
    ids = submit(http, KEY_A, 4)
    for job_id in (ids[0], ids[2]):
        assert http.delete(f"/v1/jobs/{job_id}", headers=auth(KEY_A)).json()["status"] == (
            "cancelled"
        )
    cancelled = pages(http, KEY_A, status="cancelled", limit=1)
    assert [job["id"] for page in cancelled for job in page["jobs"]] == [ids[2], ids[0]]
    assert all(job["status"] == "cancelled" for page in cancelled for job in page["jobs"])
    provider.gate.set()
    for job_id in (ids[1], ids[3]):
        wait_finished(http, job_id, KEY_A)
    done = http.get("/v1/jobs", params={"status": "done"}, headers=auth(KEY_A)).json()
    assert [job["id"] for job in done["jobs"]] == [ids[3], ids[1]]
    queued = http.get("/v1/jobs", params={"status": "queued"}, headers=auth(KEY_A)).json()
    assert queued == {"jobs": [], "next_offset": None}
    assert http.get("/v1/jobs", params={"status": "done"}, headers=auth(KEY_B)).json()[
        "jobs"
    ] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [({"limit": 0}, "limit"), ({"limit": 501}, "limit"), ({"offset": -1}, "offset"),
     ({"status": "finished"}, "status"), ({"limit": "ten"}, "limit")],
)
def test_bad_parameters_name_the_field(
    http: TestClient, params: dict[str, Any], field: str
) -> None:
    response = http.get("/v1/jobs", params=params, headers=auth(KEY_A))
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_input" and error["field"] == field


def test_largest_page(http: TestClient) -> None:
    ids = submit(http, KEY_A, 3)
    body = http.get("/v1/jobs", params={"limit": 500}, headers=auth(KEY_A)).json()
    assert [job["id"] for job in body["jobs"]] == ids[::-1]


def test_store_pages_in_sql_with_a_stable_order(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite3")
    try:
        for n in range(7):
            store.create(job_id=f"job-{n}", owner="a", items=[], overrides=None, config=None,
                         lease_owner=None, lease_seconds=5.0, total=1)
        store.create(job_id="other", owner="b", items=[], overrides=None, config=None,
                     lease_owner=None, lease_seconds=5.0, total=1)
        # Jobs created in the same instant still page without repeats or gaps (id order).
        with store.db.tx() as conn:
            conn.exec_driver_sql(
                "UPDATE jobs SET created_at = 1000.0 WHERE id IN ('job-2', 'job-4')"
            )
        everything = [row["id"] for row in store.list_jobs("a", GRADE)]
        assert len(everything) == 7 and "other" not in everything
        assert everything[-2:] == ["job-4", "job-2"]
        one_by_one = [
            row["id"] for offset in range(8)
            for row in store.list_jobs("a", GRADE, limit=1, offset=offset)
        ]
        assert one_by_one == everything
        assert [row["id"] for row in store.list_jobs("a", GRADE, limit=3, offset=2)] == (
            everything[2:5]
        )
        assert store.list_jobs("a", GRADE, status="done") == []
        assert store.list_jobs("a", "mcq") == []
    finally:
        store.close()


# -- the clients --------------------------------------------------------------------------------


def test_sync_client_pages_and_filters(http: TestClient) -> None:
    ids = submit(http, KEY_A, 3)
    client = JudgeClient(api_key=KEY_A, http_client=http, retry=RetryPolicy(retries=0))
    first = client.jobs(limit=2)
    assert [job.id for job in first.jobs] == ids[:0:-1] and first.next_offset == 2
    assert first.jobs[0].status in ("queued", "running", "done")
    assert first.next_offset is not None
    rest = client.jobs(limit=2, offset=first.next_offset)
    assert [job.id for job in rest.jobs] == ids[:1] and rest.next_offset is None
    for job_id in ids:
        client.wait(job_id, poll_interval=0.02, timeout=30)
    assert [job.id for job in client.jobs(status="done").jobs] == ids[::-1]
    assert client.jobs(status="failed").jobs == []
    other = JudgeClient(api_key=KEY_B, http_client=http, retry=RetryPolicy(retries=0))
    assert other.jobs().jobs == []
    with pytest.raises(ClientHTTPError) as err:
        client.jobs(limit=501)
    assert err.value.status == 422 and err.value.field == "limit"


async def test_async_client_pages_and_filters(make_app: Callable[..., FastAPI]) -> None:
    provider = HeldProvider()
    provider.gate.set()
    app = make_app(provider=provider, api_keys=[KEY_A, KEY_B])
    async with app.router.lifespan_context(app):
        client = AsyncJudgeClient(
            "http://bonusjudge.test", api_key=KEY_A, transport=httpx.ASGITransport(app=app),
            retry=RetryPolicy(retries=0),
        )
        async with client:
            ids = [(await client.submit_job([ITEM | {"id": f"a{i}"}])).id for i in range(3)]
            first = await client.jobs(limit=2)
            assert [job.id for job in first.jobs] == ids[:0:-1] and first.next_offset == 2
            rest = await client.jobs(limit=2, offset=2)
            assert [job.id for job in rest.jobs] == ids[:1] and rest.next_offset is None
            for job_id in ids:
                await client.wait(job_id, poll_interval=0.02, timeout=30)
            assert [job.id for job in (await client.jobs(status="done")).jobs] == ids[::-1]
            assert (await client.jobs(status="cancelled")).jobs == []
