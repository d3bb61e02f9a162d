"""The clients' one implementation: flows stepped by hand, and the two clients kept alike.

Each call is a sans-IO flow (``api.client.flows``) that ``JudgeClient`` and ``AsyncJudgeClient``
only drive, so these tests step flows with no HTTP at all, and pin that both clients expose the
very same declared operations.
"""

from __future__ import annotations

import inspect
import random
from typing import Any

import httpx
import pytest

from api.client import (
    AsyncJudgeClient,
    ClientConnectionError,
    ClientHTTPError,
    ClientInputError,
    JudgeClient,
    RetryPolicy,
)
from api.client.calls import Call
from api.client.flows import NEXT_LINE, READ_BODY, Emit, OpenStream, Send, Sleep, operation
from api.schemas import BatchEntry

BASE = "http://judge.test"


def client(retries: int = 2) -> JudgeClient:
    return JudgeClient(
        BASE,
        transport=httpx.MockTransport(lambda request: httpx.Response(500)),
        retry=RetryPolicy(retries=retries, backoff_base=0.1, backoff_cap=1.0),
        rng=random.Random(0),
    )


def line(index: int) -> str:
    return BatchEntry(index=index, id=f"q{index}").model_dump_json()


class Stepper:
    """Steps a flow by hand: ``step(outcome)`` sends an outcome, ``fail(exc)`` throws one in."""

    def __init__(self, flow: Any) -> None:
        self.flow = flow
        self.current = next(flow)

    def step(self, outcome: Any = None) -> Any:
        self.current = self.flow.send(outcome)
        return self.current

    def fail(self, exc: BaseException) -> Any:
        self.current = self.flow.throw(exc)
        return self.current


def test_both_clients_expose_the_same_declared_operations() -> None:
    def public(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    sync_only = {"grade_stream"}  # the thread-pool variant; async grade_many already streams
    assert public(JudgeClient) - sync_only - {"close"} == public(AsyncJudgeClient) - {
        "close",
        "aclose",
    }
    declared = [name for name in public(JudgeClient) if isinstance(
        inspect.getattr_static(JudgeClient, name), operation
    )]
    assert len(declared) > 25
    for name in declared:  # one object, inherited by both: the workflow exists once
        assert getattr(JudgeClient, name) is getattr(AsyncJudgeClient, name)


def test_a_bound_operation_has_the_flow_parameters_and_docstring() -> None:
    c = client()
    signature = inspect.signature(c.grade)
    assert list(signature.parameters) == ["request", "judge"]
    assert c.grade.__doc__ and "POST /v1/grade" in c.grade.__doc__


def test_send_flow_retries_a_busy_answer_after_retry_after() -> None:
    c = client()
    call = Call("GET", "/healthz")
    stepper = Stepper(c._send(call))
    assert stepper.current == Send(call)
    busy = httpx.Response(429, headers={"Retry-After": "4"})
    assert stepper.step(busy) == Sleep(4.0)
    assert stepper.step() == Send(call)
    ok = httpx.Response(200, json={"status": "ok"})
    with pytest.raises(StopIteration) as end:
        stepper.step(ok)
    assert end.value.value is ok


def test_send_flow_reports_the_attempts_of_a_lost_connection() -> None:
    c = client(retries=1)
    stepper = Stepper(c._send(Call("GET", "/healthz")))
    refused = httpx.ConnectError("refused")
    assert isinstance(stepper.fail(refused), Sleep)
    assert isinstance(stepper.step(), Send)
    with pytest.raises(ClientConnectionError) as err:
        stepper.fail(httpx.ConnectError("refused again"))
    assert err.value.attempts == 2


def test_a_job_submission_is_not_resent_once_it_may_have_arrived() -> None:
    c = client()
    stepper = Stepper(c._send(Call("POST", "/v1/jobs", idempotent=False)))
    with pytest.raises(ClientConnectionError) as err:
        stepper.fail(httpx.ReadError("reset after sending"))
    assert err.value.attempts == 1


def test_stream_flow_resumes_after_the_last_line_even_without_retries() -> None:
    # A stream that delivered lines before breaking renews its retry allowance, so a long
    # results stream survives any number of breaks that each make progress.
    c = client(retries=0)
    stepper = Stepper(c._lines("/v1/jobs/j/results", 0, BatchEntry))
    opened = stepper.current
    assert isinstance(opened, OpenStream) and opened.call.params == {"offset": 0}
    assert stepper.step(httpx.Response(200)) is NEXT_LINE
    emitted = stepper.step(line(0))
    assert isinstance(emitted, Emit) and emitted.value.index == 0
    assert stepper.step() is NEXT_LINE
    assert isinstance(stepper.fail(httpx.ReadError("reset")), Sleep)
    reopened = stepper.step()
    assert isinstance(reopened, OpenStream) and reopened.call.params == {"offset": 1}
    assert stepper.step(httpx.Response(200)) is NEXT_LINE
    with pytest.raises(ClientConnectionError):  # no progress this time: retries=0 holds
        stepper.fail(httpx.ReadError("reset again"))


def test_stream_flow_reads_an_error_body_before_raising() -> None:
    c = client(retries=0)
    stepper = Stepper(c._lines("/v1/jobs/j/results", 0, BatchEntry))
    gone = httpx.Response(404, json={"error": {"type": "not_found", "message": "no job j"}})
    assert stepper.step(gone) is READ_BODY
    with pytest.raises(ClientHTTPError) as err:
        stepper.step()
    assert err.value.status == 404 and err.value.type == "not_found"


def test_stream_arguments_are_checked_at_the_call_for_both_clients() -> None:
    sync, async_ = client(), AsyncJudgeClient(BASE)
    for stream in (sync.results, sync.mcq_results, async_.results, async_.mcq_results):
        with pytest.raises(ClientInputError) as err:
            stream("job1", offset=-1)  # raised before iterating
        assert err.value.field == "offset"


async def test_async_client_maps_a_refused_connection_after_its_retries() -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with AsyncJudgeClient(
        BASE,
        transport=httpx.MockTransport(refuse),
        retry=RetryPolicy(retries=2, backoff_base=0.1),
        sleep=sleep,
    ) as c:
        with pytest.raises(ClientConnectionError) as err:
            await c.health()
    assert err.value.attempts == 3 and len(sleeps) == 2
