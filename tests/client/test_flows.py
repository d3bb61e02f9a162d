"""The clients' one implementation: flows stepped by hand, and the two clients kept alike.

Each call is a sans-IO flow (``bonusjudge_client.flows``) that ``JudgeClient`` and
``AsyncJudgeClient`` only drive, so these tests step flows with no HTTP at all, and pin that
both clients mirror each other: the very same declared operations, and the same methods with the
same results, awaited.
"""

from __future__ import annotations

import collections.abc
import inspect
import random
import typing
from typing import Any

import httpx
import pytest

from bonusjudge_client import (
    AsyncJudgeClient,
    ClientConnectionError,
    ClientHTTPError,
    ClientInputError,
    JudgeClient,
    RetryPolicy,
)
from bonusjudge_client.calls import Call
from bonusjudge_client.flows import (
    NEXT_LINE,
    READ_BODY,
    Emit,
    OpenStream,
    Send,
    Sleep,
    operation,
    streaming,
)
from bonusjudge_client.wire.schemas import BatchEntry

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


ASYNC_ONLY = {"aclose"}
"""The async spelling of ``close`` (as ``httpx.AsyncClient`` has it); ``close`` exists in both."""


def public(cls: type) -> set[str]:
    """The public attribute names of a client class."""
    return {name for name in dir(cls) if not name.startswith("_")}


def test_both_clients_have_the_same_public_methods() -> None:
    assert public(AsyncJudgeClient) - ASYNC_ONLY == public(JudgeClient)
    declared = [name for name in public(JudgeClient) if isinstance(
        inspect.getattr_static(JudgeClient, name), operation
    )]
    assert len(declared) > 25
    for name in declared:  # one object, inherited by both: the workflow exists once
        assert getattr(JudgeClient, name) is getattr(AsyncJudgeClient, name)


def parameters(function: Any) -> list[tuple[str, Any, Any, Any]]:
    """Name, kind, default and resolved annotation of each parameter after ``self``."""
    hints = typing.get_type_hints(function)
    return [
        (p.name, p.kind, p.default, hints.get(p.name))
        for p in list(inspect.signature(function).parameters.values())[1:]
    ]


def awaited_result(function: Any) -> Any:
    """What an async client method gives its caller, in the sync client's terms.

    A coroutine function returning ``T`` gives ``T``; an async generator function of
    ``AsyncIterator[T]`` gives ``Iterator[T]``, and of ``AsyncGenerator[T, S]``,
    ``Generator[T, S, None]``.
    """
    returns = typing.get_type_hints(function)["return"]
    if inspect.isasyncgenfunction(function):
        origin, args = typing.get_origin(returns), typing.get_args(returns)
        if origin is collections.abc.AsyncGenerator:
            return collections.abc.Generator[(*args, None)]  # type: ignore[misc]
        assert origin is collections.abc.AsyncIterator, returns
        return collections.abc.Iterator[args]  # type: ignore[misc]
    assert inspect.iscoroutinefunction(function), f"{function.__qualname__} is not async"
    return returns


@pytest.mark.parametrize("name", sorted(public(JudgeClient)))
def test_each_async_method_mirrors_the_sync_one(name: str) -> None:
    # Issue 28: `await client.grade_many(items)` raised TypeError, an async generator there and
    # a list here. Where the sync method returns T, the async one is a coroutine function of T;
    # where it returns Iterator[T], an async generator function of AsyncIterator[T].
    sync = inspect.getattr_static(JudgeClient, name)
    aio = inspect.getattr_static(AsyncJudgeClient, name)
    if isinstance(sync, operation | streaming):
        # Declared once as a flow: the descriptor's __get__ types it per driver.
        assert aio is sync
        return
    sync_forms = [sync, *typing.get_overloads(sync)]
    async_forms = [aio, *typing.get_overloads(aio)]
    assert len(sync_forms) == len(async_forms), "not the same overloads"
    for sync_form, async_form in zip(sync_forms, async_forms, strict=True):
        assert parameters(async_form) == parameters(sync_form)
        assert awaited_result(async_form) == typing.get_type_hints(sync_form)["return"]


async def test_grade_stream_iterates_and_grade_many_returns_a_list_in_both() -> None:
    # Nothing is sent for an empty input: both streams end at once.
    with JudgeClient(BASE) as sync_client:
        stream = sync_client.grade_stream([], progress=False)
        assert isinstance(stream, collections.abc.Iterator)
        assert list(stream) == []
        assert sync_client.grade_many([], progress=False) == []
    async with AsyncJudgeClient(BASE) as async_client:
        astream = async_client.grade_stream([], progress=False)
        assert isinstance(astream, collections.abc.AsyncIterator)
        assert [placed async for placed in astream] == []
        assert await async_client.grade_many([], progress=False) == []


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
