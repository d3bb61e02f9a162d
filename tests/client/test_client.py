"""JudgeClient / AsyncJudgeClient against httpx.MockTransport serving contract-shaped JSON.

These pin the client's own behaviour (retries, error mapping, chunking, polling, NDJSON
streaming) independently of the service; tests/api/test_client_e2e.py drives the real app.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from bonusjudge_client import (
    AsyncJudgeClient,
    ClientConnectionError,
    ClientHTTPError,
    ClientInputError,
    ClientItemError,
    ClientResponseError,
    ClientTimeout,
    JudgeClient,
    RetryPolicy,
    parse_retry_after,
)
from bonusjudge_client.wire.grading import GradeRequest, GradeResult, Provenance

BASE = "http://judge.test"


def result_json(item_id: str, status: str = "scored") -> dict[str, Any]:
    result = GradeResult(
        id=item_id,
        status=status,  # type: ignore[arg-type]
        unscored_reasons=[] if status == "scored" else ["coverage: timeout"],
        language="en",
        provenance=Provenance(judge="fake/judge", config_hash="abc", bonusjudge_version="0.1.0"),
    )
    return result.model_dump(mode="json")


def item(i: int) -> dict[str, Any]:
    return {"id": f"q{i}", "question": f"Q{i}?", "reference": f"R{i}.", "response": f"A{i}."}


def job_json(status: str = "running", done: int = 0, total: int = 3) -> dict[str, Any]:
    return {
        "id": "job1",
        "status": status,
        "total": total,
        "done": done,
        "scored": done,
        "unscored": 0,
        "invalid": 0,
        "rate_per_s": None,
        "eta_s": None,
        "created_at": "2025-05-01T12:00:00Z",
        "updated_at": "2025-05-01T12:00:01Z",
        "judge": "fake/judge",
        "config_hash": "abc",
    }


def error_json(status: int, type_: str, message: str, field: str | None = None) -> httpx.Response:
    body = {"error": {"type": type_, "message": message, "field": field}}
    return httpx.Response(status, json=body)


def batch_response(request: httpx.Request, *, reverse: bool = False) -> httpx.Response:
    items = json.loads(request.content)["items"]
    entries = [
        {"index": i, "id": it.get("id"), "result": result_json(it["id"]), "error": None}
        for i, it in enumerate(items)
    ]
    if reverse:  # the client must place entries by index, not by position in the list
        entries.reverse()
    return httpx.Response(200, json={"results": entries})


class Recorder:
    """A handler wrapper that records requests; ``script`` answers them."""

    def __init__(self, script: Callable[[httpx.Request, int], httpx.Response]) -> None:
        self.script = script
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.script(request, len(self.requests))

    @property
    def count(self) -> int:
        return len(self.requests)


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class AsyncSleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BONUSJUDGE_URL", raising=False)
    monkeypatch.delenv("BONUSJUDGE_API_KEY", raising=False)


def make_client(
    script: Callable[[httpx.Request, int], httpx.Response], **kwargs: Any
) -> tuple[JudgeClient, Recorder, Sleeps]:
    recorder = Recorder(script)
    sleeps = Sleeps()
    kwargs.setdefault("retry", RetryPolicy(retries=3, backoff_base=0.1, backoff_cap=1.0))
    client = JudgeClient(
        BASE,
        transport=httpx.MockTransport(recorder),
        sleep=sleeps,
        rng=random.Random(0),
        **kwargs,
    )
    return client, recorder, sleeps


# -- single calls, auth, configuration ----------------------------------------------------------


def test_grade_sends_fields_at_top_level_with_judge_and_key() -> None:
    def script(request: httpx.Request, n: int) -> httpx.Response:
        return httpx.Response(200, json=result_json("q1"))

    client, rec, _ = make_client(script, api_key="s3cret")
    result = client.grade(item(1), judge={"model": "fake/judge", "metrics": ["coverage"]})
    assert isinstance(result, GradeResult) and result.id == "q1"
    sent = rec.requests[0]
    assert sent.method == "POST" and sent.url == f"{BASE}/v1/grade"
    assert sent.headers["authorization"] == "Bearer s3cret"
    body = json.loads(sent.content)
    assert body["question"] == "Q1?" and body["reference"] == "R1."
    assert body["judge"] == {"model": "fake/judge", "metrics": ["coverage"]}
    assert "bonus_points" not in body  # unset fields are left to the service's defaults
    assert "s3cret" not in repr(client)


def test_url_and_key_come_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BONUSJUDGE_URL", "http://env-host:9000/prefix/")
    monkeypatch.setenv("BONUSJUDGE_API_KEY", "envkey")
    rec = Recorder(lambda req, n: httpx.Response(200, json={"status": "ok"}))
    with JudgeClient(transport=httpx.MockTransport(rec)) as client:
        assert client.health().status == "ok"
    assert str(rec.requests[0].url) == "http://env-host:9000/prefix/healthz"
    assert rec.requests[0].headers["authorization"] == "Bearer envkey"
    # An explicit argument wins over the environment.
    with JudgeClient("http://arg-host", api_key="argkey", transport=httpx.MockTransport(rec)) as c:
        c.health()
    assert rec.requests[1].url.host == "arg-host"
    assert rec.requests[1].headers["authorization"] == "Bearer argkey"


def test_no_key_sends_no_authorization_header() -> None:
    client, rec, _ = make_client(lambda req, n: httpx.Response(200, json={"status": "ok"}))
    client.health()
    assert "authorization" not in rec.requests[0].headers


@pytest.mark.parametrize("url", ["ftp://host", "not a url", "http://"])
def test_bad_base_url_is_rejected(url: str) -> None:
    with pytest.raises(ClientInputError) as err:
        JudgeClient(url)
    assert err.value.field == "base_url"


def test_bad_request_input_names_field_before_sending() -> None:
    client, rec, _ = make_client(lambda req, n: httpx.Response(200, json=result_json("x")))
    with pytest.raises(ClientInputError) as err:
        client.grade({"question": "Q?", "reference": "R."})  # no response
    assert err.value.field == "request.response"
    assert "request.response" in str(err.value)
    with pytest.raises(ClientInputError) as err:
        client.grade(item(1), judge={"temperature": 9})
    assert err.value.field == "judge.temperature"
    assert rec.count == 0


def test_close_closes_only_an_owned_client() -> None:
    owned = JudgeClient(BASE, transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    owned.close()
    assert owned._http.is_closed  # type: ignore[attr-defined]
    injected = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    with JudgeClient(BASE, http_client=injected):
        pass
    assert not injected.is_closed
    injected.close()


# -- retries ------------------------------------------------------------------------------------


def test_retries_429_honouring_retry_after_then_succeeds() -> None:
    def script(request: httpx.Request, n: int) -> httpx.Response:
        if n <= 2:
            return httpx.Response(
                429,
                headers={"Retry-After": "7"},
                json={"error": {"type": "rate_limited", "message": "slow down", "field": None}},
            )
        return httpx.Response(200, json=result_json("q1"))

    client, rec, sleeps = make_client(script)
    assert client.grade(item(1)).id == "q1"
    assert rec.count == 3
    assert sleeps == [7.0, 7.0]  # jitter is bounded by 1 s here, so Retry-After decides


def test_retries_503_and_connection_errors_with_backoff() -> None:
    def script(request: httpx.Request, n: int) -> httpx.Response:
        if n == 1:
            raise httpx.ConnectError("refused", request=request)
        if n == 2:
            return httpx.Response(503, json={"error": {"type": "not_ready", "message": "warming"}})
        if n == 3:
            raise httpx.ReadError("connection reset", request=request)
        return httpx.Response(200, json=result_json("q1"))

    client, rec, sleeps = make_client(script)
    assert client.grade(item(1)).id == "q1"
    assert rec.count == 4
    assert len(sleeps) == 3
    # Full jitter: each wait lies within its exponential bound (0.1, 0.2, 0.4 s).
    assert all(0 <= s <= bound for s, bound in zip(sleeps, [0.1, 0.2, 0.4], strict=True))


def test_gives_up_after_the_retry_budget() -> None:
    client, rec, sleeps = make_client(
        lambda req, n: error_json(503, "judge_not_configured", "no judge"),
        retry=RetryPolicy(retries=2, backoff_base=0.01),
    )
    with pytest.raises(ClientHTTPError) as err:
        client.grade(item(1))
    assert rec.count == 3 and len(sleeps) == 2
    assert err.value.status == 503 and err.value.type == "judge_not_configured"


def test_connection_failure_raises_connection_error_after_retries() -> None:
    def script(request: httpx.Request, n: int) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client, rec, _ = make_client(script, retry=RetryPolicy(retries=1, backoff_base=0.01))
    with pytest.raises(ClientConnectionError) as err:
        client.health()
    assert rec.count == 2 and err.value.attempts == 2
    assert "judge.test" in str(err.value)


def test_read_timeout_is_not_retried() -> None:
    def script(request: httpx.Request, n: int) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    client, rec, _ = make_client(script)
    with pytest.raises(ClientTimeout):
        client.grade(item(1))
    assert rec.count == 1


def test_422_is_not_retried_and_names_the_field() -> None:
    client, rec, sleeps = make_client(
        lambda req, n: error_json(
            422, "invalid_config", "model x is not allowed; allowed: fake/judge", "judge.model"
        )
    )
    with pytest.raises(ClientHTTPError) as err:
        client.grade(item(1), judge={"model": "x"})
    assert rec.count == 1 and sleeps == []
    exc = err.value
    assert (exc.status, exc.type, exc.field) == (422, "invalid_config", "judge.model")
    assert "judge.model" in str(exc) and "allowed: fake/judge" in str(exc)


def test_non_contract_error_body_still_raises_http_error() -> None:
    client, _, _ = make_client(lambda req, n: httpx.Response(502, text="<html>Bad Gateway</html>"))
    with pytest.raises(ClientHTTPError) as err:
        client.health()
    assert err.value.status == 502 and err.value.type == "http_error"
    assert "Bad Gateway" in err.value.message


def test_submit_job_is_not_resent_once_sent() -> None:
    def busy(request: httpx.Request, n: int) -> httpx.Response:
        return error_json(503, "busy", "try later")

    client, rec, _ = make_client(busy)
    with pytest.raises(ClientHTTPError):
        client.submit_job([item(1)])
    assert rec.count == 1

    def reset(request: httpx.Request, n: int) -> httpx.Response:
        raise httpx.ReadError("reset after sending", request=request)

    client, rec, _ = make_client(reset)
    with pytest.raises(ClientConnectionError):
        client.submit_job([item(1)])
    assert rec.count == 1


def test_submit_job_is_retried_when_it_could_not_connect() -> None:
    def script(request: httpx.Request, n: int) -> httpx.Response:
        if n == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(202, json=job_json("queued"))

    client, rec, _ = make_client(script)
    status = client.submit_job([item(1), {"answer": "chartom-line", "response": "x"}])
    assert status.status == "queued" and rec.count == 2
    items = json.loads(rec.requests[1].content)["items"]
    # Mappings go out as given: CharToM-format lines are the service's to map.
    assert items[1] == {"answer": "chartom-line", "response": "x"}


def test_submit_job_from_file_sends_ndjson(tmp_path: Any) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(item(i)) for i in range(3)) + "\n")
    client, rec, _ = make_client(lambda req, n: httpx.Response(202, json=job_json("queued")))
    client.submit_job(file=path)
    sent = rec.requests[0]
    assert sent.headers["content-type"] == "application/x-ndjson"
    assert sent.content == path.read_bytes()
    # With a judge selection the file goes as a multipart upload carrying a `judge` field.
    client.submit_job(file=path, judge={"rubric": "chartom-paper"})
    multipart = rec.requests[1]
    assert multipart.headers["content-type"].startswith("multipart/form-data")
    assert b'name="judge"' in multipart.content
    assert b'{"rubric":"chartom-paper"}' in multipart.content
    assert b'name="file"; filename="items.jsonl"' in multipart.content
    assert path.read_bytes() in multipart.content
    with pytest.raises(ClientInputError) as err:
        client.submit_job(file=tmp_path / "missing.jsonl")
    assert err.value.field == "file"
    with pytest.raises(ClientInputError):
        client.submit_job([item(1)], file=path)


def test_ready_returns_not_ready_without_retrying() -> None:
    body = {"ready": False, "checks": {"encoder": {"ok": False, "detail": "not loaded"}}}
    client, rec, _ = make_client(lambda req, n: httpx.Response(503, json=body))
    ready = client.ready()
    assert ready.ready is False and ready.checks["encoder"].ok is False
    assert rec.count == 1


def test_response_not_matching_contract_raises_response_error() -> None:
    client, _, _ = make_client(lambda req, n: httpx.Response(200, json={"id": "q1"}))
    with pytest.raises(ClientResponseError) as err:
        client.grade(item(1))
    assert err.value.field is not None
    client, _, _ = make_client(lambda req, n: httpx.Response(200, text="not json"))
    with pytest.raises(ClientResponseError):
        client.job("job1")


def test_unknown_job_is_a_404_error() -> None:
    client, rec, _ = make_client(lambda req, n: error_json(404, "not_found", "no job x/y"))
    with pytest.raises(ClientHTTPError) as err:
        client.job("x/y")
    assert err.value.status == 404
    assert rec.requests[0].url.raw_path == b"/v1/jobs/x%2Fy"  # the id cannot escape its path
    with pytest.raises(ClientInputError):
        client.job("  ")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("5", 5.0),
        ("0.5", 0.5),
        ("-3", 0.0),
        ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),
        ("soon", None),
        (None, None),
    ],
)
def test_parse_retry_after(header: str | None, expected: float | None) -> None:
    now = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC)
    assert parse_retry_after(header, now=now) == expected


def test_retry_after_is_capped() -> None:
    policy = RetryPolicy(backoff_base=0.0, max_retry_after=60.0)
    assert policy.delay(1, retry_after=3600.0) == 60.0
    with pytest.raises(ClientInputError):
        RetryPolicy(retries=-1)


# -- grade_many ---------------------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 3])
def test_grade_many_chunks_and_keeps_input_order(concurrency: int) -> None:
    client, rec, _ = make_client(lambda req, n: batch_response(req, reverse=True))
    items = (item(i) for i in range(10))  # a generator: no len(), read lazily
    results = client.grade_many(items, batch_size=3, concurrency=concurrency, progress=False)
    assert [r.id for r in results] == [f"q{i}" for i in range(10)]
    assert rec.count == 4
    sizes = sorted(len(json.loads(r.content)["items"]) for r in rec.requests)
    assert sizes == [1, 3, 3, 3]
    assert all(r.url.path == "/v1/grade/batch" for r in rec.requests)


def test_grade_many_sends_judge_with_every_batch() -> None:
    client, rec, _ = make_client(lambda req, n: batch_response(req))
    client.grade_many(
        [GradeRequest(**item(i)) for i in range(4)],
        batch_size=2,
        judge={"rubric": "chartom-paper"},
        progress=False,
    )
    assert [json.loads(r.content)["judge"] for r in rec.requests] == [
        {"rubric": "chartom-paper"}
    ] * 2


def test_grade_many_numbers_id_less_items_globally() -> None:
    client, rec, _ = make_client(lambda req, n: batch_response(req))
    items = [{k: v for k, v in item(i).items() if k != "id"} for i in range(5)]
    results = client.grade_many(items, batch_size=2, concurrency=1, progress=False)
    sent = [it["id"] for r in rec.requests for it in json.loads(r.content)["items"]]
    assert sent == ["1", "2", "3", "4", "5"]
    assert [r.id for r in results] == sent


def item_error_script(request: httpx.Request, n: int) -> httpx.Response:
    items = json.loads(request.content)["items"]
    entries = []
    for i, it in enumerate(items):
        if it["id"] == "q4":
            error = {"type": "invalid_input", "message": "too many points", "field": "bonus_points"}
            entries.append({"index": i, "id": "q4", "result": None, "error": error})
        else:
            entries.append({"index": i, "id": it["id"], "result": result_json(it["id"])})
    return httpx.Response(200, json={"results": entries})


def test_grade_many_raises_item_error_with_global_index() -> None:
    client, _, _ = make_client(item_error_script)
    with pytest.raises(ClientItemError) as err:
        client.grade_many([item(i) for i in range(6)], batch_size=2, progress=False)
    exc = err.value
    assert (exc.index, exc.id, exc.field) == (4, "q4", "bonus_points")
    assert "item 4" in str(exc) and "bonus_points" in str(exc)


def test_grade_many_can_return_item_errors_in_place() -> None:
    client, _, _ = make_client(item_error_script)
    out = client.grade_many(
        [item(i) for i in range(6)], batch_size=2, progress=False, return_exceptions=True
    )
    assert [type(o).__name__ for o in out] == ["GradeResult"] * 4 + ["ClientItemError"] + [
        "GradeResult"
    ]


def test_grade_many_rejects_a_bad_item_before_sending() -> None:
    client, rec, _ = make_client(lambda req, n: batch_response(req))
    bad = {"question": "   ", "reference": "R.", "response": "A."}
    with pytest.raises(ClientInputError) as err:
        client.grade_many([bad, item(1)], batch_size=2, progress=False)
    assert err.value.field == "items.0.question"
    assert rec.count == 0
    with pytest.raises(ClientInputError):
        client.grade_many([item(1)], batch_size=0, progress=False)


def test_grade_many_rejects_an_incomplete_batch_answer() -> None:
    def script(request: httpx.Request, n: int) -> httpx.Response:
        return httpx.Response(200, json={"results": [{"index": 0, "result": result_json("a")}]})

    client, _, _ = make_client(script)
    with pytest.raises(ClientResponseError) as err:
        client.grade_many([item(0), item(1)], batch_size=2, progress=False)
    assert err.value.field == "results"


def test_grade_many_stops_on_a_failed_batch() -> None:
    def script(request: httpx.Request, n: int) -> httpx.Response:
        return error_json(413, "payload_too_large", "body too large")

    client, rec, _ = make_client(script)
    with pytest.raises(ClientHTTPError) as err:
        client.grade_many([item(i) for i in range(4)], batch_size=2, concurrency=1, progress=False)
    assert err.value.status == 413
    assert rec.count <= 2


# -- jobs: wait, results ------------------------------------------------------------------------


def test_wait_polls_until_done() -> None:
    states = [job_json("queued"), job_json("running", 1), job_json("done", 3)]
    client, rec, sleeps = make_client(lambda req, n: httpx.Response(200, json=states[n - 1]))
    status = client.wait("job1", poll_interval=2.5)
    assert status.status == "done" and status.done == 3
    assert rec.count == 3 and sleeps == [2.5, 2.5]


def test_wait_returns_a_paused_job_instead_of_polling_forever() -> None:
    # A job paused at a cost budget goes on, if ever, only once the budget opens again (the
    # next UTC midnight for a key's day, never for its own max_cost): wait() hands it back.
    detail = "paused: budget_exhausted: the job's judge calls reached its max_cost $0.01"
    paused = {**job_json("paused", 1), "paused": True, "detail": detail}
    states = [job_json("running", 1), paused, job_json("done", 3)]
    client, rec, sleeps = make_client(lambda req, n: httpx.Response(200, json=states[n - 1]))
    status = client.wait("job1", poll_interval=0.5, timeout=60)
    assert (status.status, status.paused, status.done) == ("paused", True, 1)
    assert status.detail is not None and "max_cost" in status.detail
    assert rec.count == 2 and sleeps == [0.5]


async def test_async_wait_returns_a_paused_job() -> None:
    states = [job_json("queued"), {**job_json("paused", 2), "paused": True}]
    client, rec, sleeps = make_async(lambda req, n: httpx.Response(200, json=states[n - 1]))
    async with client:
        status = await client.wait("job1", poll_interval=0.5, timeout=60)
    assert (status.status, status.paused) == ("paused", True)
    assert rec.count == 2 and sleeps == [0.5]


def test_wait_times_out_on_the_clock() -> None:
    clock = [0.0]
    client, _, sleeps = make_client(lambda req, n: httpx.Response(200, json=job_json("running")))

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    client._sleep = sleep
    client._clock = lambda: clock[0]
    with pytest.raises(ClientTimeout) as err:
        client.wait("job1", poll_interval=1.0, timeout=2.5)
    assert "job1" in str(err.value) and "0/3" in str(err.value)
    assert sleeps == [1.0, 1.0, 0.5]


def results_lines() -> list[dict[str, Any]]:
    return [
        {"index": 0, "id": "q0", "result": result_json("q0"), "error": None},
        {
            "index": 1,
            "id": "2",
            "result": None,
            "error": {"type": "invalid_input", "message": "bad", "field": "question", "line": 2},
        },
        {"index": 2, "id": "q2", "result": result_json("q2", "unscored"), "error": None},
    ]


def ndjson(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def test_results_parses_ndjson_and_passes_offset() -> None:
    lines = results_lines()

    def script(request: httpx.Request, n: int) -> httpx.Response:
        offset = int(request.url.params["offset"])
        body = b"\n" + ndjson(lines[offset:])  # blank lines are skipped
        return httpx.Response(200, content=body, headers={"content-type": "application/x-ndjson"})

    client, rec, _ = make_client(script)
    entries = list(client.results("job1"))
    assert [e.index for e in entries] == [0, 1, 2]
    assert entries[1].error is not None and entries[1].error.line == 2
    assert entries[2].result is not None and entries[2].result.status == "unscored"
    assert [e.index for e in client.results("job1", offset=2)] == [2]
    assert rec.requests[1].url.params["offset"] == "2"


def test_results_resume_after_a_broken_stream() -> None:
    lines = results_lines()

    def script(request: httpx.Request, n: int) -> httpx.Response:
        offset = int(request.url.params["offset"])
        if n == 1:

            def broken() -> Iterator[bytes]:
                yield ndjson(lines[:2])
                raise httpx.ReadError("connection reset")

            return httpx.Response(200, content=broken())
        return httpx.Response(200, content=ndjson(lines[offset:]))

    client, rec, _ = make_client(script)
    assert [e.index for e in client.results("job1")] == [0, 1, 2]
    assert [r.url.params["offset"] for r in rec.requests] == ["0", "2"]


def test_results_bad_line_names_its_number() -> None:
    body = ndjson(results_lines()[:1]) + b"{not json\n"
    client, _, _ = make_client(lambda req, n: httpx.Response(200, content=body))
    with pytest.raises(ClientResponseError) as err:
        list(client.results("job1"))
    assert "line 2" in str(err.value)


def test_summary_and_cancel() -> None:
    from judge.aggregate import summarize

    summary = summarize([GradeResult.model_validate(result_json("q0"))]).model_dump(mode="json")

    def script(request: httpx.Request, n: int) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(200, json=job_json("cancelled", 1))
        return httpx.Response(200, json=summary)

    client, rec, _ = make_client(script)
    assert client.summary("job1").items == 1
    assert client.cancel("job1").status == "cancelled"
    assert [(r.method, r.url.path) for r in rec.requests] == [
        ("GET", "/v1/jobs/job1/summary"),
        ("DELETE", "/v1/jobs/job1"),
    ]


def test_metrics_accepts_tuples_and_checks_result_count() -> None:
    rouge = {"precision": 1.0, "recall": 0.5, "f1": 0.667, "tokenizer": "t"}

    def script(request: httpx.Request, n: int) -> httpx.Response:
        pairs = json.loads(request.content)["pairs"]
        return httpx.Response(200, json={"results": [{"rouge_l": rouge}] * len(pairs)})

    client, rec, _ = make_client(script)
    pairs: list[Any] = [("a b", "a b c"), {"response": "x", "reference": "y"}]
    out = client.metrics(pairs, metrics=["rouge_l"])
    assert [o.rouge_l.f1 for o in out if o.rouge_l] == [0.667, 0.667]
    body = json.loads(rec.requests[0].content)
    assert body["metrics"] == ["rouge_l"]
    assert body["pairs"][0] == {"response": "a b", "reference": "a b c"}
    with pytest.raises(ClientInputError) as err:
        client.metrics([])
    assert err.value.field == "pairs"


# -- async client -------------------------------------------------------------------------------


def make_async(
    script: Callable[[httpx.Request, int], httpx.Response],
) -> tuple[AsyncJudgeClient, Recorder, AsyncSleeps]:
    recorder = Recorder(script)
    sleeps = AsyncSleeps()
    client = AsyncJudgeClient(
        BASE,
        transport=httpx.MockTransport(recorder),
        sleep=sleeps,
        retry=RetryPolicy(retries=3, backoff_base=0.1, backoff_cap=1.0),
    )
    return client, recorder, sleeps


async def test_async_grade_retries_429() -> None:
    def script(request: httpx.Request, n: int) -> httpx.Response:
        if n == 1:
            return httpx.Response(429, headers={"Retry-After": "3"})
        return httpx.Response(200, json=result_json("q1"))

    client, rec, sleeps = make_async(script)
    async with client:
        assert (await client.grade(item(1))).id == "q1"
    assert rec.count == 2 and sleeps == [3.0]


async def test_async_grade_many_is_awaited_into_a_list_in_input_order() -> None:
    client, rec, _ = make_async(lambda req, n: batch_response(req, reverse=True))
    async with client:
        results = await client.grade_many(
            (item(i) for i in range(10)), batch_size=3, concurrency=2, progress=False
        )
    assert [r.id for r in results] == [f"q{i}" for i in range(10)]
    assert rec.count == 4


def holds_first_batch(request: httpx.Request) -> bool:
    """Whether ``request`` is the batch holding ``q0``, which the ordering tests hold back."""
    return any(it["id"] == "q0" for it in json.loads(request.content)["items"])


@pytest.mark.parametrize("ordered", [True, False])
def test_grade_stream_yields_positions_in_order_or_as_batches_end(ordered: bool) -> None:
    # The first batch is answered last: after the other two (ordered), or only once the caller
    # has received an outcome (unordered; so that outcome cannot be the first batch's).
    release = threading.Event()
    others: list[int] = []

    def script(request: httpx.Request) -> httpx.Response:
        if holds_first_batch(request):
            assert release.wait(30)
            return batch_response(request)
        others.append(1)
        if ordered and len(others) == 2:
            release.set()
        return batch_response(request)

    with JudgeClient(BASE, transport=httpx.MockTransport(script)) as client:
        placed = []
        for position, outcome in client.grade_stream(
            [item(i) for i in range(6)], batch_size=2, concurrency=3, progress=False,
            ordered=ordered,
        ):
            release.set()
            placed.append((position, outcome.id))
    expected = [(i, f"q{i}") for i in range(6)]
    assert (placed if ordered else sorted(placed)) == expected
    if not ordered:
        assert placed[0][0] >= 2  # a later batch came first


@pytest.mark.parametrize("ordered", [True, False])
async def test_async_grade_stream_yields_positions_in_order_or_as_batches_end(
    ordered: bool,
) -> None:
    release = asyncio.Event()
    others: list[int] = []

    async def script(request: httpx.Request) -> httpx.Response:
        if holds_first_batch(request):
            await asyncio.wait_for(release.wait(), 30)
            return batch_response(request)
        others.append(1)
        if ordered and len(others) == 2:
            release.set()
        return batch_response(request)

    async with AsyncJudgeClient(BASE, transport=httpx.MockTransport(script)) as client:
        placed = []
        async for position, outcome in client.grade_stream(
            [item(i) for i in range(6)], batch_size=2, concurrency=3, progress=False,
            ordered=ordered,
        ):
            release.set()
            placed.append((position, outcome.id))
    expected = [(i, f"q{i}") for i in range(6)]
    assert (placed if ordered else sorted(placed)) == expected
    if not ordered:
        assert placed[0][0] >= 2


async def test_async_grade_many_raises_item_error() -> None:
    client, _, _ = make_async(item_error_script)
    with pytest.raises(ClientItemError) as err:
        await client.grade_many([item(i) for i in range(6)], batch_size=2, progress=False)
    assert err.value.index == 4
    out = await client.grade_many(
        [item(i) for i in range(6)], batch_size=2, progress=False, return_exceptions=True
    )
    assert [type(o).__name__ for o in out] == ["GradeResult"] * 4 + ["ClientItemError"] + [
        "GradeResult"
    ]


async def test_async_grade_stream_yields_item_errors_in_place() -> None:
    client, _, _ = make_async(item_error_script)
    outcomes = [
        outcome
        async for _, outcome in client.grade_stream(
            [item(i) for i in range(6)], batch_size=2, progress=False, ordered=True
        )
    ]
    assert [type(o).__name__ for o in outcomes] == ["GradeResult"] * 4 + [
        "ClientItemError"
    ] + ["GradeResult"]


async def test_async_wait_and_results() -> None:
    states = [job_json("running", 1), job_json("done", 3)]
    lines = results_lines()

    def script(request: httpx.Request, n: int) -> httpx.Response:
        if request.url.path.endswith("/results"):
            return httpx.Response(200, content=ndjson(lines))
        return httpx.Response(200, json=states.pop(0))

    client, _, sleeps = make_async(script)
    async with client:
        assert (await client.wait("job1", poll_interval=0.5)).status == "done"
        entries = [e async for e in client.results("job1")]
    assert sleeps == [0.5] and [e.index for e in entries] == [0, 1, 2]
