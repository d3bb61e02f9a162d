"""The clients' multiple-choice and calibration methods, end to end against the app in-process.

The sync client runs on ``TestClient(app)``; the async one on ``httpx.ASGITransport`` with the
lifespan entered by hand. A few tests pin the request shapes on ``httpx.MockTransport``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from bonusjudge_client import (
    AsyncJudgeClient,
    ClientHTTPError,
    ClientInputError,
    JudgeClient,
    RetryPolicy,
)
from bonusjudge_client.wire.mcq import McqItem, McqSummary
from judge.engine import Grader
from judge.providers.fake import FakeProvider

DATA = Path(__file__).resolve().parents[2] / "judge" / "data"
TOMBENCH = DATA / "mcq_example_tombench.jsonl"
CHARTOM = DATA / "mcq_example_chartom.jsonl"
KEY = "client-kinds-key"
PNG = b"\x89PNG\r\n\x1a\n"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_text(encoding="utf-8").splitlines() if raw.strip()]


@pytest.fixture
def app(make_grader: Callable[..., Grader], make_app: Callable[..., FastAPI]) -> FastAPI:
    """The service over a fake judge with no scripted outputs (MCQ and calibration need none)."""
    grader = make_grader(
        FakeProvider(outputs=[]), cache=False, metrics=("coverage", "defects", "rouge_l")
    )
    return make_app(grader, judge=grader.config, api_keys=[KEY])


@pytest.fixture
def client(app: FastAPI) -> Iterator[JudgeClient]:
    with TestClient(app, raise_server_exceptions=False) as http:
        yield JudgeClient(api_key=KEY, http_client=http, retry=RetryPolicy(retries=0))


@pytest.fixture
async def aclient(app: FastAPI) -> AsyncIterator[AsyncJudgeClient]:
    async with app.router.lifespan_context(app):
        client = AsyncJudgeClient(
            "http://bonusjudge.test", api_key=KEY, transport=httpx.ASGITransport(app=app),
            retry=RetryPolicy(retries=0),
        )
        async with client:
            yield client


# -- sync, against the app ----------------------------------------------------------------------


def test_mcq_returns_typed_entries_and_summary(client: JudgeClient) -> None:
    items: list[Any] = lines(CHARTOM)
    items[0] = McqItem.model_validate(items[0])  # models and mappings mix
    items.append({"id": "bad", "choices": ["a", "b"], "answer": "C"})
    answer = client.mcq(items, group_by=["tom_dimension"])
    assert len(answer.results) == len(items)
    assert [e.index for e in answer.results] == list(range(len(items)))
    assert answer.results[0].result is not None and answer.results[0].result.id == "ct-en-001"
    bad = answer.results[-1]
    assert bad.result is None and bad.error is not None and bad.error.field == "answer"
    assert isinstance(answer.summary, McqSummary)
    assert list(answer.summary.breakdowns) == ["tom_dimension"]
    assert answer.summary.items == len(items) - 1
    assert [b.line for b in answer.summary.bad_lines] == [len(items)]


def test_mcq_job_from_a_file(client: JudgeClient) -> None:
    job = client.submit_mcq_job(file=TOMBENCH, aggregate="majority")
    assert job.kind == "mcq" and job.total == 60
    final = client.wait(job.id, kind="mcq", poll_interval=0.05, timeout=30)
    assert final.status == "done" and final.done == 60
    assert client.mcq_job(job.id).status == "done"
    entries = list(client.mcq_results(job.id))
    assert len(entries) == 60 and all(e.result is not None for e in entries)
    assert len(list(client.mcq_results(job.id, offset=55))) == 5
    summary = client.mcq_summary(job.id)
    direct = client.mcq(lines(TOMBENCH), aggregate="majority").summary
    assert summary == direct
    assert summary.permutation is not None and summary.permutation.aggregate == "majority"
    with pytest.raises(ClientHTTPError) as err:
        client.job(job.id)  # a multiple-choice job is not a grading job
    assert err.value.status == 404
    assert client.cancel_mcq_job(job.id).status == "done"


def test_calibration_round_trip(client: JudgeClient) -> None:
    job = client.calibrate("example", metrics=["rouge_l"], resamples=100, limit=8, seed=1)
    assert job.status in ("queued", "running") and job.items == 8
    final = client.wait_calibration(job.id, poll_interval=0.05, timeout=60)
    assert final.status == "done" and final.report == f"/v1/reports/{job.id}"
    assert client.calibration_status(job.id).status == "done"
    assert client.cancel_calibration(job.id).status == "done"  # a finished run stays as it is
    listed = client.reports()
    assert [r.id for r in listed] == [job.id] and listed[0].items == 8
    report = client.report(job.id)
    assert report["set"]["n_items"] == 8 and report["options"]["seed"] == 1
    assert "rouge_l" in client.report_markdown(job.id)
    plot = report["plots"]["scatter"]["rouge_l"]
    assert client.report_file(job.id, plot).startswith(PNG)
    with pytest.raises(ClientHTTPError) as err:
        client.report("no-such-report")
    assert err.value.status == 404


def test_client_side_checks_fail_before_sending(client: JudgeClient) -> None:
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: client.mcq([], aggregate="mean"), "items"),
        (lambda: client.mcq(lines(CHARTOM), aggregate="median"), "aggregate"),  # type: ignore[arg-type]
        (lambda: client.mcq(lines(CHARTOM), fuzzy_threshold=200), "fuzzy_threshold"),
        (lambda: client.mcq(["text"]), "items.0"),  # type: ignore[list-item]
        (lambda: client.submit_mcq_job(), "items"),
        (lambda: client.submit_mcq_job(file=b"  \n"), "file"),
        (lambda: client.calibrate(), "set"),
        (lambda: client.calibrate("example", items=[{}]), "set"),
        (lambda: client.calibrate("example", metrics=["bleu"]), "metrics.0"),  # type: ignore[list-item]
        (lambda: client.calibrate("example", resamples=10), "resamples"),
        (lambda: client.report(""), "report_id"),
        (lambda: client.report_file("r", ""), "name"),
    ]
    for call, field in cases:
        with pytest.raises(ClientInputError) as err:
            call()
        assert err.value.field == field


# -- async, against the app ---------------------------------------------------------------------


async def test_async_mcq_job_and_calibration(aclient: AsyncJudgeClient) -> None:
    answer = await aclient.mcq(lines(CHARTOM))
    assert all(e.result is not None for e in answer.results)
    job = await aclient.submit_mcq_job(lines(CHARTOM))
    final = await aclient.wait(job.id, kind="mcq", poll_interval=0.05, timeout=30)
    assert final.status == "done"
    entries = [entry async for entry in aclient.mcq_results(job.id)]
    assert sorted(e.index for e in entries) == list(range(len(answer.results)))
    assert await aclient.mcq_summary(job.id) == answer.summary
    assert (await aclient.mcq_job(job.id)).kind == "mcq"

    run = await aclient.calibrate("example", metrics=["rouge_l"], resamples=100, limit=6)
    done = await aclient.wait_calibration(run.id, poll_interval=0.05, timeout=60)
    assert done.status == "done"
    assert [r.id for r in await aclient.reports()] == [run.id]
    report = await aclient.report(run.id)
    assert report["set"]["n_items"] == 6
    assert "rouge_l" in await aclient.report_markdown(run.id)
    assert (await aclient.report_file(run.id, "report.json")).startswith(b"{")
    assert (await aclient.calibration_status(run.id)).report == f"/v1/reports/{run.id}"
    assert (await aclient.cancel_calibration(run.id)).status == "done"


# -- request shapes -----------------------------------------------------------------------------


def test_request_shapes() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503, json={"error": {"type": "x", "message": "busy"}})

    client = JudgeClient("http://judge.test", transport=httpx.MockTransport(handler),
                         retry=RetryPolicy(retries=2), sleep=lambda _: None)
    with pytest.raises(ClientHTTPError):
        client.submit_mcq_job(
            file=b'{"id": 1}\n', aggregate="majority", group_by=["task", "tags.kind"],
            llm_extract=True,
        )
    assert len(seen) == 1  # creating a job is never resent
    request = seen[0]
    assert request.url.path == "/v1/mcq/jobs"
    assert request.headers["content-type"] == "application/x-ndjson"
    assert dict(request.url.params) == {
        "aggregate": "majority", "group_by": "task,tags.kind", "llm_extract": "true"
    }
    seen.clear()
    with pytest.raises(ClientHTTPError):
        client.calibrate(items=[{"id": "a"}], name="mine", judges="x/judge", metrics=["coverage"])
    assert len(seen) == 1
    assert json.loads(seen[0].content) == {
        "seed": 0, "resamples": 1000, "items": [{"id": "a"}], "name": "mine",
        "judges": ["x/judge"], "metrics": ["coverage"],
    }
    seen.clear()
    with pytest.raises(ClientHTTPError):
        client.mcq([{"id": "a"}])
    assert len(seen) == 3  # scoring is safe to resend: retried on 503
    assert json.loads(seen[0].content) == {"items": [{"id": "a"}], "aggregate": "mean"}
