"""``AsyncJudgeClient``: the workflows driven with awaited httpx calls, batches as tasks."""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, closing
from typing import Any, Literal, Protocol, TypeVar, Unpack, overload

import httpx

from api.client.answers import Placed
from api.client.calls import (
    DEFAULT_BATCH_SIZE,
    ItemInput,
    JudgeInput,
    ManyOptions,
    check_many_args,
    chunks,
)
from api.client.errors import ClientItemError
from api.client.flows import (
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
from api.client.progress import Tally, progress_bar, total_of
from api.client.retry import RetryPolicy
from api.client.workflows import Workflows
from judge.types import GradeResult

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


class AsyncManyOptions(ManyOptions, total=False):
    """The options of ``AsyncJudgeClient.grade_many``: the shared ones, and ``ordered``."""

    ordered: bool


async def _async_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


class AsyncJudgeClient(Workflows, AsyncRunner):
    """Asynchronous client of a bonusjudge service; the same methods as ``JudgeClient``.

    Each method returns a coroutine of what ``JudgeClient``'s returns; ``results`` and
    ``mcq_results`` return async iterators, and ``grade_many`` is an async iterator of results.
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
    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        return_exceptions: Literal[False] = ...,
        **options: Unpack[AsyncManyOptions],
    ) -> AsyncIterator[GradeResult]: ...

    @overload
    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        return_exceptions: Literal[True],
        **options: Unpack[AsyncManyOptions],
    ) -> AsyncIterator[GradeResult | ClientItemError]: ...

    async def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        concurrency: int = 4,
        progress: bool = True,
        ordered: bool = True,
        return_exceptions: bool = False,
    ) -> AsyncIterator[GradeResult | ClientItemError]:
        """Grade any number of items in batches, yielding results as batches finish.

        Arguments as for ``JudgeClient.grade_many``, plus ``ordered``: True (the default)
        yields in input order; False yields each batch as soon as it is done, which keeps every
        request slot busy when batch times vary. At most ``concurrency`` batch requests are in
        flight, so memory stays bounded whatever the number of items. Breaking out of the loop
        cancels the batches in flight.

        Yields:
            One result per item (``GradeResult.id`` identifies it when ``ordered`` is False), or
            a ``ClientItemError`` in its place with ``return_exceptions``.

        Raises:
            ClientInputError: An item is invalid (its index and field are named).
            ClientItemError: The service failed an item (unless ``return_exceptions``).
            JudgeClientError: A batch request failed after retries.
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
                        for _, outcome in tally.add(task.result()):
                            if isinstance(outcome, ClientItemError) and not return_exceptions:
                                raise outcome
                            yield outcome
            finally:
                for task in in_flight:
                    task.cancel()
                if in_flight:
                    await asyncio.gather(*in_flight, return_exceptions=True)
