"""``AsyncJudgeClient``: the workflows driven with awaited httpx calls, batches as tasks."""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, aclosing, closing
from typing import Any, Literal, Protocol, TypeVar, Unpack, overload

import httpx

from bonusjudge_client.answers import Gathered, Placed
from bonusjudge_client.calls import (
    DEFAULT_BATCH_SIZE,
    ItemInput,
    JudgeInput,
    ManyOptions,
    check_many_args,
    chunks,
)
from bonusjudge_client.errors import ClientItemError
from bonusjudge_client.flows import (
    AsyncRunner,
    Drive,
    Emit,
    NextLine,
    OpenStream,
    RequestArgs,
    Send,
    Sleep,
    Step,
    StreamArgs,
    StreamFlow,
)
from bonusjudge_client.progress import Tally, progress_bar, total_of
from bonusjudge_client.retry import RetryPolicy
from bonusjudge_client.wire.grading import GradeResult
from bonusjudge_client.workflows import Workflows

T = TypeVar("T")


class AsyncHTTPClient(Protocol):
    """What ``AsyncJudgeClient`` needs of an injected client (``httpx.AsyncClient`` fits)."""

    @property
    def base_url(self) -> Any:
        """The client's base URL (may be empty)."""

    async def request(self, method: str, url: str, **args: Unpack[RequestArgs]) -> Any:
        """Send one request and read the whole response."""

    def stream(
        self, method: str, url: str, **args: Unpack[StreamArgs]
    ) -> AbstractAsyncContextManager[Any]:
        """Send one request and stream the response body."""

    async def aclose(self) -> None:
        """Release the connections."""


async def _async_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


class AsyncJudgeClient(Workflows, AsyncRunner):
    """Asynchronous client of a bonusjudge service; the same methods as ``JudgeClient``.

    Each method returns a coroutine of what ``JudgeClient``'s returns (``await
    client.grade_many(items)`` is the list of results); the streaming ones, ``grade_stream``,
    ``results`` and ``mcq_results``, return async iterators of what ``JudgeClient``'s iterate.
    The arguments are ``JudgeClient``'s, but ``http_client`` is an ``httpx.AsyncClient`` (the
    caller keeps ownership), ``transport`` an async one (e.g. ``httpx.ASGITransport(app=app)``
    to run the service in-process) and ``sleep`` a coroutine function.
    """

    def __init__(
        self,
        base_url: str | Sequence[str] | None = None,
        *,
        api_key: str | None = None,
        http_client: AsyncHTTPClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float | httpx.Timeout | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = _async_sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(base_url, api_key, http_client, transport, timeout, retry, clock, rng)
        self._http: AsyncHTTPClient = http_client or httpx.AsyncClient(
            transport=transport, timeout=self._client_timeout()
        )
        self._sleep = sleep

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it (an injected one stays open)."""
        if self._owns_client:
            await self._http.aclose()

    async def close(self) -> None:
        """Alias of ``aclose()``."""
        await self.aclose()

    async def __aenter__(self) -> AsyncJudgeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the driver ----------------------------------------------------------------------------

    async def _iterate(self, flow: StreamFlow[T]) -> AsyncIterator[T]:
        """Perform each step of ``flow`` with awaited I/O; yield what it emits."""
        drive = Drive(flow)
        async with AsyncExitStack() as stream:
            with closing(flow):
                while (step := drive.step()) is not None:
                    if isinstance(step, Emit):
                        yield step.value
                        continue
                    try:
                        drive.reply = await self._perform(step, drive, stream)
                    except Exception as exc:  # the flow decides: retry, report or re-raise
                        drive.error = exc

    async def _perform(self, step: Step, drive: Drive[Any], stream: AsyncExitStack) -> Any:
        if isinstance(step, Send):
            call = step.call
            url = self._target(call)
            return await self._http.request(call.method, url, **self._request_args(call))
        if isinstance(step, Sleep):
            return await self._sleep(step.seconds)
        if isinstance(step, OpenStream):
            call = step.call
            await stream.aclose()  # the flow is done with the previous one
            args = self._request_args(call, stream=True)
            drive.response = await stream.enter_async_context(
                self._http.stream(call.method, self._target(call), **args)
            )
            drive.lines = drive.response.aiter_lines()
            return drive.response
        if isinstance(step, NextLine):
            return await anext(drive.lines, None)
        return await drive.response.aread()  # ReadBody

    # -- batches in parallel -------------------------------------------------------------------

    @overload
    async def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        return_exceptions: Literal[False] = ...,
        **options: Unpack[ManyOptions],
    ) -> list[GradeResult]: ...

    @overload
    async def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        return_exceptions: Literal[True],
        **options: Unpack[ManyOptions],
    ) -> list[GradeResult | ClientItemError]: ...

    async def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        return_exceptions: bool = False,
        **options: Unpack[ManyOptions],
    ) -> list[GradeResult] | list[GradeResult | ClientItemError]:
        """Grade any number of items in batches, ``concurrency`` requests at a time.

        ``JudgeClient.grade_many``, awaited: ``await client.grade_many(items)`` is the list of
        results in input order; the batches are tasks of the running loop. To handle each result
        as its batch ends, iterate ``grade_stream`` instead. Arguments, results and errors as
        for ``JudgeClient.grade_many``.
        """
        gathered = Gathered(return_exceptions=return_exceptions, url=self._url("/v1/grade/batch"))
        # Closed on the way out: an item error raised here cancels the batches in flight at once
        # (an async generator left open would keep them running until it is collected).
        async with aclosing(self.grade_stream(items, **options)) as stream:
            async for position, outcome in stream:
                gathered.add(position, outcome)
        return gathered.results()

    async def grade_stream(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        concurrency: int = 4,
        progress: bool = True,
        ordered: bool = False,
    ) -> AsyncGenerator[tuple[int, GradeResult | ClientItemError], None]:
        """Grade any number of items, yielding each ``(position, outcome)`` as its batch ends.

        ``JudgeClient.grade_stream`` with ``async for``: ``position`` is the item's 0-based
        index in ``items``, an item the service failed comes as a ``ClientItemError`` (never
        raised), ``ordered`` yields in input order, and at most ``concurrency`` batch requests
        are in flight. Breaking out of the loop cancels the batches in flight. Arguments and
        errors as for ``JudgeClient.grade_stream``.
        """
        check_many_args(batch_size, concurrency)
        in_flight: deque[asyncio.Task[Placed]] = deque()
        with progress_bar(total_of(items), progress, "grading") as bar:
            tally = Tally(bar)
            try:
                batches = chunks(items, batch_size)
                exhausted = False
                while True:
                    while not exhausted and len(in_flight) < concurrency:
                        nxt = next(batches, None)
                        if nxt is None:
                            exhausted = True
                            break
                        start, chunk = nxt
                        flow = self._chunk(start, chunk, judge)
                        in_flight.append(asyncio.create_task(self._run(flow)))
                    if not in_flight:
                        return
                    if ordered:
                        finished = [in_flight.popleft()]
                        await asyncio.wait(finished)
                    else:
                        done, _ = await asyncio.wait(
                            in_flight, return_when=asyncio.FIRST_COMPLETED
                        )
                        finished = [t for t in in_flight if t in done]
                        for task in finished:
                            in_flight.remove(task)
                    for task in finished:
                        for placed in tally.add(task.result()):  # re-raises the batch's error
                            yield placed
            finally:
                for task in in_flight:
                    task.cancel()
                if in_flight:
                    await asyncio.gather(*in_flight, return_exceptions=True)
