"""``JudgeClient``: the workflows driven with blocking httpx calls, batches from a thread pool."""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, ExitStack, closing
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
    SyncRunner,
)
from bonusjudge_client.progress import Tally, progress_bar, total_of
from bonusjudge_client.retry import RetryPolicy
from bonusjudge_client.wire.grading import GradeResult
from bonusjudge_client.workflows import Workflows

T = TypeVar("T")


class SyncHTTPClient(Protocol):
    """What ``JudgeClient`` needs of an injected client.

    ``httpx.Client`` fits, and so does Starlette's ``TestClient``, which is built on the httpx2
    fork and so is not an ``httpx.Client`` subclass. Transport errors are mapped to this
    package's errors for httpx clients only (an in-process test client raises none).
    """

    @property
    def base_url(self) -> Any:
        """The client's base URL (may be empty)."""

    def request(self, method: str, url: str, **args: Unpack[RequestArgs]) -> Any:
        """Send one request and read the whole response."""

    def stream(
        self, method: str, url: str, **args: Unpack[StreamArgs]
    ) -> AbstractContextManager[Any]:
        """Send one request and stream the response body."""

    def close(self) -> None:
        """Release the connections."""


class JudgeClient(Workflows, SyncRunner):
    """Synchronous client of a bonusjudge service.

    Args:
        base_url: Service URL; default the injected client's base URL if it has one, else
            ``$BONUSJUDGE_URL``, else ``http://127.0.0.1:8000``. An explicit value always wins.
            Several replicas sharing a job store and cache: a list of URLs (or one string with
            commas); grading requests go to each in turn, other calls to the first that
            answers, and a URL that refuses connections is skipped for a few seconds.
        api_key: API key sent as ``Authorization: Bearer``; default ``$BONUSJUDGE_API_KEY``.
        http_client: An ``httpx.Client`` to use (e.g. ``fastapi.testclient.TestClient(app)``).
            The caller keeps ownership: ``close()`` leaves it open.
        transport: A transport for the client created here (e.g. ``httpx.MockTransport``).
        timeout: Per-request timeout; default 300 s (10 s to connect) for the client created
            here, the injected client's own timeouts otherwise.
        retry: Retry policy; default ``RetryPolicy()``.
        sleep: Function used to wait between retries and polls (tests pass a recorder).
        clock: Monotonic clock used by ``wait(timeout=...)``.
        rng: Random source of the backoff jitter.

    Example::

        with JudgeClient("http://judge:8000") as client:
            result = client.grade({"question": q, "reference": ref, "response": ans})
    """

    def __init__(
        self,
        base_url: str | Sequence[str] | None = None,
        *,
        api_key: str | None = None,
        http_client: SyncHTTPClient | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float | httpx.Timeout | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(base_url, api_key, http_client, transport, timeout, retry, clock, rng)
        self._http: SyncHTTPClient = http_client or httpx.Client(
            transport=transport, timeout=self._client_timeout()
        )
        self._sleep = sleep

    def close(self) -> None:
        """Close the HTTP client if this object created it (an injected one stays open)."""
        if self._owns_client:
            self._http.close()

    def __enter__(self) -> JudgeClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the driver ----------------------------------------------------------------------------

    def _iterate(self, flow: StreamFlow[T]) -> Iterator[T]:
        """Perform each step of ``flow`` with blocking I/O; yield what it emits."""
        drive = Drive(flow)
        with ExitStack() as stream, closing(flow):
            while (step := drive.step()) is not None:
                if isinstance(step, Emit):
                    yield step.value
                    continue
                try:
                    drive.reply = self._perform(step, drive, stream)
                except Exception as exc:  # the flow decides: retry, report or re-raise
                    drive.error = exc

    def _perform(self, step: Step, drive: Drive[Any], stream: ExitStack) -> Any:
        if isinstance(step, Send):
            call = step.call
            return self._http.request(call.method, self._target(call), **self._request_args(call))
        if isinstance(step, Sleep):
            return self._sleep(step.seconds)
        if isinstance(step, OpenStream):
            call = step.call
            stream.close()  # the flow is done with the previous one
            args = self._request_args(call, stream=True)
            drive.response = stream.enter_context(
                self._http.stream(call.method, self._target(call), **args)
            )
            drive.lines = drive.response.iter_lines()
            return drive.response
        if isinstance(step, NextLine):
            return next(drive.lines, None)
        return drive.response.read()  # ReadBody

    # -- batches in parallel -------------------------------------------------------------------

    @overload
    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        return_exceptions: Literal[False] = ...,
        **options: Unpack[ManyOptions],
    ) -> list[GradeResult]: ...

    @overload
    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        return_exceptions: Literal[True],
        **options: Unpack[ManyOptions],
    ) -> list[GradeResult | ClientItemError]: ...

    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        return_exceptions: bool = False,
        **options: Unpack[ManyOptions],
    ) -> list[GradeResult] | list[GradeResult | ClientItemError]:
        """Grade any number of items in batches, ``concurrency`` requests at a time.

        Items are read lazily, validated, and sent ``batch_size`` per request from a thread pool;
        a tqdm bar (on stderr) counts finished items. An item without an ``id`` gets its 1-based
        position in ``items`` as id. ``AsyncJudgeClient.grade_many`` is the same, awaited. To
        handle each result as its batch ends, iterate ``grade_stream`` instead.

        Args:
            items: The items, as ``GradeRequest``s or mappings of their fields.
            judge: Per-request judge selection applied to every item.
            batch_size: Items per request (at most the service's ``max_batch``).
            concurrency: Batch requests in flight at once.
            progress: Show a progress bar.
            return_exceptions: Put a ``ClientItemError`` in place of each failed item instead of
                raising the first one (as ``asyncio.gather`` does).

        Returns:
            One result per item, in input order.

        Raises:
            ClientInputError: An item is invalid (its index and field are named); nothing more
                is sent once it is found.
            ClientItemError: The service failed an item (unless ``return_exceptions``).
            JudgeClientError: A batch request failed after retries; pending batches are
                cancelled.
        """
        gathered = Gathered(return_exceptions=return_exceptions, url=self._url("/v1/grade/batch"))
        # Closed on the way out: an item error raised here cancels the batches not started.
        with closing(self.grade_stream(items, **options)) as stream:
            for position, outcome in stream:
                gathered.add(position, outcome)
        return gathered.results()

    def grade_stream(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        concurrency: int = 4,
        progress: bool = True,
        ordered: bool = False,
    ) -> Generator[tuple[int, GradeResult | ClientItemError], None, None]:
        """Grade any number of items, yielding each ``(position, outcome)`` as its batch ends.

        For callers that must keep what is graded when a later batch fails (the CLI writes each
        result as it arrives). ``position`` is the item's 0-based index in ``items``. An item the
        service failed comes as a ``ClientItemError``, never raised, so one bad item is that
        item's problem. At most ``concurrency`` batch requests are in flight, so memory stays
        bounded whatever the number of items. ``AsyncJudgeClient.grade_stream`` is the same with
        ``async for``.

        Args:
            items: As in ``grade_many``.
            judge: As in ``grade_many``.
            batch_size: As in ``grade_many``.
            concurrency: As in ``grade_many``.
            progress: As in ``grade_many``.
            ordered: Yield in input order. False (the default) yields each batch as soon as it
                is done, which keeps every request slot busy when batch times vary.

        Raises:
            ClientInputError: An item is invalid; nothing more is sent once it is found.
            JudgeClientError: A batch request failed after retries; pending batches are
                cancelled (what was yielded before stands).
        """
        check_many_args(batch_size, concurrency)
        with (
            progress_bar(total_of(items), progress, "grading") as bar,
            ThreadPoolExecutor(concurrency, thread_name_prefix="bonusjudge") as pool,
        ):
            tally = Tally(bar)
            pending: deque[Future[Placed]] = deque()

            def finished(until: int) -> Iterator[tuple[int, GradeResult | ClientItemError]]:
                # Waits until at most `until` batches are in flight; yields what finished.
                while len(pending) > until:
                    if ordered:
                        done = [pending.popleft()]
                    else:
                        ready, _ = wait(pending, return_when=FIRST_COMPLETED)
                        done = [future for future in pending if future in ready]
                        for future in done:
                            pending.remove(future)
                    for future in done:
                        yield from tally.add(future.result())  # re-raises the batch's error

            try:
                for start, chunk in chunks(items, batch_size):
                    yield from finished(concurrency - 1)
                    pending.append(pool.submit(self._run, self._chunk(start, chunk, judge)))
                yield from finished(0)
            except BaseException:
                # Batches not started yet are dropped; running ones finish (threads cannot be
                # interrupted) and their answers are discarded.
                for future in pending:
                    future.cancel()
                raise
