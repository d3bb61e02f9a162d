"""Jobs: lifecycle, uploads with bad lines, partial results, cancel, leases and restarts.

Every test runs on both job stores (SQLite and Postgres: ``jobs_url`` in conftest.py).
"""

import asyncio
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from api.jobs import Chunk, JobItem, JobStore
from bonusjudge_client.wire.grading import GradeRequest
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.providers.base import Completion, Provider
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider
from judge.verdicts import DefectJudgement
from tests.helpers.engine import levin_item, plain_answer

NUMBER = re.compile(r"answer-(\d+)\b")


def number_in(text: str) -> str:
    match = NUMBER.search(text)
    assert match is not None, text[:200]
    return match.group(1)


def item(n: int, **extra: Any) -> dict[str, Any]:
    return levin_item(n, **{"tom_dimension": "emotion", **extra})


class Recorder:
    """A judge handler counting calls per (item number, task); thread-safe."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()

    def __call__(self, call: FakeCall) -> FakeOutput:
        task = "defects" if call.response_model is DefectJudgement else "coverage"
        with self.lock:
            self.calls[(number_in(call.user), task)] += 1
        return plain_answer(call)


class GatedProvider:
    """Lets the judge answer for some items at once; the others wait until ``gate`` is set."""

    def __init__(self, inner: FakeProvider, free: set[str]) -> None:
        self.inner = inner
        self.free = set(free)
        self.gate = threading.Event()

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        text = " ".join(m["content"] for m in messages)
        number = number_in(text)
        while number not in self.free and not self.gate.is_set():
            await asyncio.sleep(0.005)
        return await self.inner.complete(
            messages, response_model, config, validation_context=validation_context
        )


@pytest.fixture
def app_for(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader], jobs_url: str | None
) -> Callable[..., FastAPI]:
    """The service over ``provider``, grading ``concurrency`` items at once (default 4)."""

    def build(provider: Provider, *, concurrency: int = 4) -> FastAPI:
        return make_app(make_grader(provider, concurrency=concurrency), jobs_url=jobs_url)

    return build


def wait_for(
    client: TestClient, job_id: str, predicate: Callable[[dict[str, Any]], bool],
    timeout: float = 30.0,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if predicate(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"job never reached the expected state: {status}")
        time.sleep(0.02)


def finished(status: dict[str, Any]) -> bool:
    return status["status"] in ("done", "cancelled", "failed")


def lines_of(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]


def test_json_job_lifecycle(app_for: Callable[..., FastAPI]) -> None:
    recorder = Recorder()
    app = app_for(FakeProvider(handler=recorder))
    items = [item(1), item(2), {**item(3), "question": ""}, item(4, tom_dimension="belief")]
    with TestClient(app) as client:
        created = client.post("/v1/jobs", json={"items": items})
        assert created.status_code == 202
        job = created.json()
        assert created.headers["location"] == f"/v1/jobs/{job['id']}"
        assert job["total"] == 3 and job["invalid"] == 1 and job["judge"] == "fake/judge"
        status = wait_for(client, job["id"], finished)
        assert status["status"] == "done"
        assert (status["done"], status["scored"], status["unscored"]) == (3, 3, 0)

        entries = lines_of(client.get(f"/v1/jobs/{job['id']}/results"))
        assert sorted(e["index"] for e in entries) == [0, 1, 2, 3]
        bad = next(e for e in entries if e["error"] is not None)
        assert bad["index"] == 2 and bad["id"] == "it-3" and bad["result"] is None
        assert bad["error"]["field"] == "question"
        graded = {e["id"]: e["result"] for e in entries if e["result"] is not None}
        assert set(graded) == {"it-1", "it-2", "it-4"}
        assert all(r["coverage"]["covered"] == 1 for r in graded.values())

        summary = client.get(f"/v1/jobs/{job['id']}/summary").json()
        assert summary["items"] == 3 and summary["points"] == 6 and summary["points_covered"] == 3
        assert summary["bpc"] == pytest.approx(0.5)
        assert set(summary["by_dimension"]) == {"emotion", "belief"}
        assert summary["judge_calls"] == 6 and summary["judge"] == "fake/judge"
    assert recorder.calls == Counter({(str(n), t): 1 for n in (1, 2, 4)
                                      for t in ("coverage", "defects")})


def test_an_id_with_nul_is_that_items_error_on_every_store(
    app_for: Callable[..., FastAPI],
) -> None:
    # Postgres refused the whole upload (422) where SQLite took it (202): one answer on both.
    app = app_for(FakeProvider(handler=Recorder()))
    items = [item(1), {**item(2), "id": "bad\x00id"}]
    with TestClient(app) as client:
        created = client.post("/v1/jobs", json={"items": items})
        assert created.status_code == 202, created.text
        job = created.json()
        assert (job["total"], job["invalid"]) == (1, 1)
        assert wait_for(client, job["id"], finished)["status"] == "done"
        entries = lines_of(client.get(f"/v1/jobs/{job['id']}/results"))
        bad = next(e for e in entries if e["error"] is not None)
        assert bad["id"] == "bad\ufffdid" and bad["error"]["field"] == "id"
        assert "NUL" in bad["error"]["message"]
        mcq = {"id": "q\x00", "choices": ["yes", "no"], "answer": "A", "response": "[[A]]"}
        created = client.post("/v1/mcq/jobs", json={"items": [mcq]})
        assert created.status_code == 202, created.text
        assert created.json()["invalid"] == 1


def test_jsonl_upload_with_bad_lines_and_chartom_items(app_for: Callable[..., FastAPI]) -> None:
    recorder = Recorder()
    app = app_for(FakeProvider(handler=recorder))
    chartom = {
        "id": "ct-1", "book_name": "Anna Karenina", "tom_dimension": "emotion",
        "context_0": "", "context_1000": "Kitty refuses Levin.", "context_2000": "Long plot.",
        "question": "How does Levin feel?", "answer": "He feels humiliated.",
        "bonus_points": ["Levin feels humiliated"], "misleading_choices": ["a", "b", "c"],
        "response": "He is humiliated (answer-7).",
    }
    lines = [
        json.dumps(item(1)),
        "{not json",
        "",
        json.dumps({**item(3), "bonus_points": ["x"] * 40}),
        json.dumps(chartom),
        json.dumps(item(1)),  # duplicate id
    ]
    body = ("\n".join(lines) + "\n").encode()
    with TestClient(app) as client:
        created = client.post(
            "/v1/jobs?context_window=1000&metrics=coverage,defects",
            content=body, headers={"content-type": "application/x-ndjson"},
        )
        assert created.status_code == 202, created.text
        job = created.json()
        assert (job["total"], job["invalid"]) == (2, 3)
        wait_for(client, job["id"], finished)
        entries = lines_of(client.get(f"/v1/jobs/{job['id']}/results"))
    errors = {e["error"]["line"]: e["error"] for e in entries if e["error"] is not None}
    assert set(errors) == {2, 4, 6}
    assert "line 2" in errors[2]["message"] and "JSON" in errors[2]["message"]
    assert errors[4]["field"] == "bonus_points"
    assert errors[6]["field"] == "id"
    results = {e["id"]: e["result"] for e in entries if e["result"] is not None}
    assert set(results) == {"it-1", "ct-1"}
    assert results["ct-1"]["context_window"] == 1000
    assert results["ct-1"]["metadata"]["misleading_choices"] == ["a", "b", "c"]
    assert results["ct-1"]["rouge_l"] is None  # the query selected coverage and defects only
    # The defect judge saw the chosen plot window.
    assert recorder.calls[("7", "defects")] == 1


def test_multipart_upload(app_for: Callable[..., FastAPI]) -> None:
    app = app_for(FakeProvider(handler=Recorder()))
    data = (json.dumps(item(1)) + "\n" + json.dumps(item(2)) + "\n").encode()
    with TestClient(app) as client:
        created = client.post(
            "/v1/jobs",
            files={"file": ("items.jsonl", data, "application/x-ndjson")},
            data={"judge": json.dumps({"metrics": ["rouge_l"]})},
        )
        assert created.status_code == 202, created.text
        status = wait_for(client, created.json()["id"], finished)
        assert status["done"] == 2
        entries = lines_of(client.get(f"/v1/jobs/{status['id']}/results"))
        assert all(e["result"]["coverage"] is None for e in entries)
        missing = client.post("/v1/jobs", files={"other": ("a.jsonl", data, "text/plain")})
        assert missing.status_code == 422 and missing.json()["error"]["field"] == "file"
        both = client.post("/v1/jobs?rubric=chartom", json={"items": [item(1)],
                                                             "judge": {"rubric": "chartom"}})
        assert both.status_code == 422 and both.json()["error"]["field"] == "judge"


def test_job_input_errors(app_for: Callable[..., FastAPI]) -> None:
    app = app_for(FakeProvider(handler=Recorder()))
    with TestClient(app) as client:
        empty = client.post("/v1/jobs", content=b"\n\n",
                            headers={"content-type": "application/x-ndjson"})
        assert empty.status_code == 422 and empty.json()["error"]["field"] == "items"
        rubric = client.post("/v1/jobs?rubric=nope", content=json.dumps(item(1)).encode(),
                             headers={"content-type": "application/x-ndjson"})
        assert rubric.status_code == 422 and rubric.json()["error"]["field"] == "judge.rubric"
        model = client.post("/v1/jobs", json={"items": [item(1)], "judge": {"model": "x/y"}})
        assert model.status_code == 422 and model.json()["error"]["field"] == "judge.model"


def test_results_stream_is_partial_while_running_and_honours_offset(
    app_for: Callable[..., FastAPI]
) -> None:
    provider = GatedProvider(FakeProvider(handler=Recorder()), free={"1", "2", "3"})
    app = app_for(provider, concurrency=2)
    with TestClient(app) as client:
        job = client.post("/v1/jobs", json={"items": [item(n) for n in range(1, 9)]}).json()
        status = wait_for(client, job["id"], lambda s: s["done"] == 3)
        assert status["status"] == "running"
        assert status["rate_per_s"] > 0 and status["eta_s"] > 0
        entries = lines_of(client.get(f"/v1/jobs/{job['id']}/results"))
        assert sorted(e["id"] for e in entries) == ["it-1", "it-2", "it-3"]
        rest = lines_of(client.get(f"/v1/jobs/{job['id']}/results?offset=2"))
        assert rest == entries[2:]
        summary = client.get(f"/v1/jobs/{job['id']}/summary").json()
        assert summary["items"] == 3
        provider.gate.set()
        wait_for(client, job["id"], finished)
        entries = lines_of(client.get(f"/v1/jobs/{job['id']}/results"))
        assert sorted(e["index"] for e in entries) == list(range(8))
        bad_offset = client.get(f"/v1/jobs/{job['id']}/results?offset=-1")
        assert bad_offset.status_code == 422 and bad_offset.json()["error"]["field"] == "offset"


def test_cancel_keeps_finished_results(app_for: Callable[..., FastAPI]) -> None:
    provider = GatedProvider(FakeProvider(handler=Recorder()), free={"1", "2"})
    app = app_for(provider, concurrency=2)
    with TestClient(app) as client:
        job = client.post("/v1/jobs", json={"items": [item(n) for n in range(1, 7)]}).json()
        wait_for(client, job["id"], lambda s: s["done"] == 2)
        cancelled = client.delete(f"/v1/jobs/{job['id']}")
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "cancelled"
        provider.gate.set()
        time.sleep(0.2)  # give a (wrongly) surviving runner the chance to grade more
        status = client.get(f"/v1/jobs/{job['id']}").json()
        assert status["status"] == "cancelled" and status["done"] == 2
        assert status["detail"] == "cancelled by request"
        entries = lines_of(client.get(f"/v1/jobs/{job['id']}/results"))
        assert sorted(e["id"] for e in entries) == ["it-1", "it-2"]
        again = client.delete(f"/v1/jobs/{job['id']}")
        assert again.status_code == 200 and again.json()["status"] == "cancelled"


def started_calls(*providers: FakeProvider) -> Counter[tuple[str, str]]:
    """Provider attempts per (item number, task), counted when they start (so a call abandoned
    mid-flight counts too)."""
    counts: Counter[tuple[str, str]] = Counter()
    for provider in providers:
        for call in provider.calls:
            task = "defects" if call.response_model is DefectJudgement else "coverage"
            counts[(number_in(call.user), task)] += 1
    return counts


def test_restart_resumes_and_grades_every_item_exactly_once(
    open_store: Callable[[], JobStore], app_for: Callable[..., FastAPI]
) -> None:
    total = 30
    slow = FakeProvider(handler=Recorder(), latency=0.05)
    first = app_for(slow, concurrency=2)
    with TestClient(first) as client:
        job = client.post("/v1/jobs", json={"items": [item(n) for n in range(1, total + 1)]}).json()
        wait_for(client, job["id"], lambda s: s["done"] >= 3)
    # The first service is down: in-flight items were drained, the lease released.
    store = open_store()
    row = store.get(job["id"])
    assert row is not None
    assert 3 <= row["done"] < total
    assert row["status"] == "queued" and store.holders(job["id"]) == {}
    # Every judge call started before the shutdown finished and was stored: none abandoned.
    assert len(slow.calls) == 2 * row["done"]
    store.close()

    fast = FakeProvider(handler=Recorder(), latency=0.01)
    second = app_for(fast, concurrency=4)
    with TestClient(second) as client:
        status = wait_for(client, job["id"], finished)
        entries = lines_of(client.get(f"/v1/jobs/{job['id']}/results"))
    assert status["status"] == "done" and status["done"] == total
    assert sorted(e["index"] for e in entries) == list(range(total))
    expected = {(str(n), task): 1 for n in range(1, total + 1) for task in ("coverage", "defects")}
    assert dict(started_calls(slow, fast)) == expected
    assert len(fast.calls) == 2 * (total - row["done"])


def test_expired_lease_is_taken_over_and_live_one_respected(
    open_store: Callable[[], JobStore], app_for: Callable[..., FastAPI]
) -> None:
    store = open_store()
    config = JudgeConfig(model="fake/judge", metrics=("coverage", "defects", "rouge_l"))

    def add(job_id: str, lease_seconds: float) -> None:
        request = GradeRequest.model_validate(item(1))
        store.create(job_id=job_id, owner="", items=[JobItem(0, "it-1", None, request, None)],
                     overrides=None, config=config, lease_owner="999-dead",
                     lease_seconds=lease_seconds)

    add("crashed", -1.0)  # its worker died: the lease has expired
    add("alive", 600.0)  # another worker holds it
    app = app_for(FakeProvider(handler=Recorder()))
    with TestClient(app) as client:
        status = wait_for(client, "crashed", finished)
        assert status["status"] == "done" and status["done"] == 1
        assert client.get("/v1/jobs/alive").json()["status"] == "queued"
    assert store.holders("alive") == {"999-dead": 1}
    store.close()


def test_changed_judge_settings_fail_a_resumed_job(
    open_store: Callable[[], JobStore], app_for: Callable[..., FastAPI]
) -> None:
    store = open_store()
    old = JudgeConfig(model="fake/judge", temperature=0.7)
    request = GradeRequest.model_validate(item(1))
    store.create(job_id="old", owner="", items=[JobItem(0, "it-1", None, request, None)],
                 overrides=None, config=old, lease_owner=None, lease_seconds=0)
    store.close()
    with TestClient(app_for(FakeProvider(handler=Recorder()))) as client:
        status = wait_for(client, "old", finished)
    assert status["status"] == "failed"
    assert "config hash" in status["detail"]


def test_a_process_never_reclaims_its_own_lapsed_lease(
    open_store: Callable[[], JobStore],
) -> None:
    # A blocked event loop can let a runner's lease lapse; claiming it again from the same
    # process would start a second runner on the same items.
    store = open_store()
    request = GradeRequest.model_validate(item(1))
    store.create(job_id="j", owner="", items=[JobItem(0, "it-1", None, request, None)],
                 overrides=None, config=JudgeConfig(model="fake/judge"), lease_owner="me",
                 lease_seconds=-1.0)
    assert store.claim("me", 30.0, 4) == []
    assert store.renew("j", "me", 30.0) is True  # the live runner revives its lease
    assert store.claim("other", 30.0, 4) == []
    store.renew("j", "me", -1.0)
    assert store.claim("other", 30.0, 4) == [Chunk("j", 0, 1)]
    assert store.renew("j", "me", 30.0) is False  # the old runner learns it lost the job
    store.close()
