"""The client's workflows, written once as sans-IO flows that two thin drivers run.

A *flow* is a generator that never touches the network or the clock's sleep: it yields *steps*
(``Send`` a request, ``Sleep``, ``OpenStream``, read the ``NEXT_LINE`` or the ``READ_BODY`` of
the open stream) and gets each step's outcome sent back, or the step's exception thrown in at the
``yield``. A streaming flow also yields ``Emit(value)`` for each value its caller receives.
``JudgeClient`` drives flows with blocking httpx calls and ``AsyncJudgeClient`` with awaited
ones (``SyncRunner`` / ``AsyncRunner``); everything else (building requests, reading answers,
retries and backoff, resuming a broken stream, polling a job) exists once, here and in
``bonusjudge_client.workflows``.

The public methods are declared once too: ``@operation`` (and ``@streaming``) turn a flow into a
method that returns the flow's result on ``JudgeClient`` and a coroutine of it on
``AsyncJudgeClient`` (an iterator or an async iterator for streaming ones), with the flow's own
parameters and docstring.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Generator,
    Iterator,
    Sequence,
)
from dataclasses import dataclass
from importlib import metadata
from typing import (
    Any,
    Concatenate,
    Generic,
    NoReturn,
    ParamSpec,
    TypedDict,
    TypeVar,
    overload,
)

import httpx
import tenacity
from pydantic import BaseModel

from bonusjudge_client.answers import http_error, json_body, line_model, parse
from bonusjudge_client.calls import API_KEY_ENV, DEFAULT_TIMEOUT, DEFAULT_URL, NDJSON, URL_ENV, Call
from bonusjudge_client.errors import (
    ClientConnectionError,
    ClientInputError,
    ClientTimeout,
    JudgeClientError,
)
from bonusjudge_client.retry import NOT_SENT, RetryPolicy
from bonusjudge_client.wire.schemas import CalibrationJob, JobStatus

P = ParamSpec("P")
T = TypeVar("T")
_M = TypeVar("_M", bound=BaseModel)
_Status = TypeVar("_Status", JobStatus, CalibrationJob)

TERMINAL_STATUSES = frozenset({"done", "cancelled", "failed"})
"""Job statuses after which nothing changes any more."""

WAIT_STATUSES = TERMINAL_STATUSES | {"paused"}
"""Job statuses at which ``wait`` returns: the terminal ones, and ``paused`` (a grading job at a
cost budget, which does not go on by itself before the budget opens again, if ever)."""


# -- steps ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    """Send ``call`` and read the whole answer; the outcome is the response."""

    call: Call


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` with the client's sleep function."""

    seconds: float


@dataclass(frozen=True)
class OpenStream:
    """Send ``call`` and leave the answer's body unread; the outcome is the response.

    The stream stays open until the flow opens another or ends.
    """

    call: Call


class NextLine:
    """Read the next line of the open stream; the outcome is the line, or None at its end."""


class ReadBody:
    """Read the rest of the open stream's body (before reading an error answer)."""


NEXT_LINE = NextLine()
"""The one ``NextLine`` step."""

READ_BODY = ReadBody()
"""The one ``ReadBody`` step."""

Step = Send | Sleep | OpenStream | NextLine | ReadBody
"""Everything a flow may ask its driver to do."""


@dataclass(frozen=True)
class Emit(Generic[T]):
    """Hand ``value`` to the caller of a streaming flow; the outcome is None."""

    value: T


Flow = Generator[Step, Any, T]
"""A flow that returns a ``T``."""

StreamFlow = Generator[Step | Emit[T], Any, None]
"""A flow that emits ``T``s."""


def returning(flow: Flow[T]) -> StreamFlow[T]:
    """``flow`` as a streaming flow emitting its result, so one driver loop runs both kinds."""
    yield Emit((yield from flow))


# -- drivers and declared operations ------------------------------------------------------------


class SyncRunner(ABC):
    """A client that drives flows with blocking I/O."""

    @abstractmethod
    def _iterate(self, flow: StreamFlow[T]) -> Iterator[T]:
        """Perform each step of ``flow``; yield what it emits."""

    def _run(self, flow: Flow[T]) -> T:
        (result,) = self._iterate(returning(flow))
        return result


class AsyncRunner(ABC):
    """A client that drives flows with awaited I/O."""

    @abstractmethod
    def _iterate(self, flow: StreamFlow[T]) -> AsyncIterator[T]:
        """Perform each step of ``flow``; yield what it emits."""

    async def _run(self, flow: Flow[T]) -> T:
        (result,) = [value async for value in self._iterate(returning(flow))]
        return result


@functools.cache
def _signature(flow: Callable[..., Any]) -> inspect.Signature:
    # What the bound method takes: the flow's parameters after `self`, no `Flow[...]` return.
    signature = inspect.signature(flow)
    return signature.replace(
        parameters=list(signature.parameters.values())[1:],
        return_annotation=inspect.Signature.empty,
    )


def _method(flow: Callable[..., Any], client: Any, drive: Callable[[Any], Any]) -> Any:
    """``flow`` bound to ``client`` as a method whose flows ``drive`` runs."""

    @functools.wraps(flow)
    def method(*args: Any, **kwargs: Any) -> Any:
        return drive(flow(client, *args, **kwargs))

    method.__signature__ = _signature(flow)  # type: ignore[attr-defined]
    return method


class operation(Generic[P, T]):
    """A method declared once, as a flow: ``T`` on a ``SyncRunner``, a coroutine on an async one.

    Its parameters and docstring are the flow function's.
    """

    def __init__(self, flow: Callable[Concatenate[Any, P], Flow[T]]) -> None:
        self.flow = flow
        self.__doc__ = flow.__doc__
        self.__wrapped__ = flow  # inspect.signature and help() find the flow's parameters

    @overload
    def __get__(self, client: None, owner: type[Any]) -> operation[P, T]: ...

    @overload
    def __get__(self, client: SyncRunner, owner: type[Any]) -> Callable[P, T]: ...

    @overload
    def __get__(
        self, client: AsyncRunner, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, client: Any, owner: type[Any]) -> Any:
        return self if client is None else _method(self.flow, client, client._run)


class streaming(Generic[P, T]):
    """A method declared once, as a streaming flow: an iterator, or an async iterator, of ``T``.

    The flow function runs at the call (so its argument checks raise there, before iterating);
    the flow it returns runs as the caller iterates.
    """

    def __init__(self, flow: Callable[Concatenate[Any, P], StreamFlow[T]]) -> None:
        self.flow = flow
        self.__doc__ = flow.__doc__
        self.__wrapped__ = flow

    @overload
    def __get__(self, client: None, owner: type[Any]) -> streaming[P, T]: ...

    @overload
    def __get__(self, client: SyncRunner, owner: type[Any]) -> Callable[P, Iterator[T]]: ...

    @overload
    def __get__(
        self, client: AsyncRunner, owner: type[Any]
    ) -> Callable[P, AsyncIterator[T]]: ...

    def __get__(self, client: Any, owner: type[Any]) -> Any:
        return self if client is None else _method(self.flow, client, client._iterate)


class Drive(Generic[T]):
    """One run of a flow by a driver: the outcome to hand it next, and its open stream.

    A driver loops: ``step()``, perform the step, set ``reply`` (or ``error`` if the step
    raised, for the flow to retry, report or re-raise); an ``Emit`` goes to the caller instead.
    """

    def __init__(self, flow: StreamFlow[T]) -> None:
        self.flow = flow
        self.reply: Any = None
        self.error: Exception | None = None
        self.response: Any = None
        """The open streamed response, if any."""
        self.lines: Any = None
        """Its lines (an iterator, or an async iterator)."""

    def step(self) -> Step | Emit[T] | None:
        """The flow's next step, given the last one's outcome; None once the flow has ended."""
        reply, error = self.reply, self.error
        self.reply, self.error = None, None
        try:
            return self.flow.throw(error) if error is not None else self.flow.send(reply)
        except StopIteration:
            return None


# -- the shared core ------------------------------------------------------------------------------


class StreamArgs(TypedDict, total=False):
    """The keyword arguments an injected HTTP client's ``stream`` is given."""

    params: Any
    headers: Any


class RequestArgs(StreamArgs, total=False):
    """The keyword arguments an injected HTTP client's ``request`` is given."""

    content: bytes | None
    data: Any
    files: Any


def _client_version() -> str:
    try:
        return metadata.version("bonusjudge")
    except metadata.PackageNotFoundError:
        return "0"


class Replicas:
    """The service's base URLs, spread over by grading requests, skipped while unreachable.

    Several replicas of the service share one job store and one cache, so any of them answers
    any call. A ``spread`` call (grading: stateless, the bulk of the work) goes to the next
    URL in turn; any other call to the first URL that is not marked down, so a job's polls and
    its results stream stay on one replica while it answers. A URL whose connection failed
    (nothing was sent) is skipped for ``DOWN_SECONDS``; when every URL is down, all are tried.

    Args:
        value: One URL, several separated by commas (as ``$BONUSJUDGE_URL`` may hold), or a
            sequence of URLs.
        clock: Monotonic clock.

    Raises:
        ClientInputError: a URL is not http(s) with a host, or none is given.
    """

    DOWN_SECONDS = 5.0
    """How long an unreachable URL is left out before it is tried again."""

    def __init__(self, value: str | Sequence[str], clock: Callable[[], float]) -> None:
        parts = value.split(",") if isinstance(value, str) else list(value)
        urls: list[str] = []
        for part in parts:
            url = str(part).strip()
            if not url:
                continue  # "a,b," or "a, ,b": a stray comma names no URL
            parsed = httpx.URL(url)
            if parsed.scheme not in ("http", "https") or not parsed.host:
                raise ClientInputError(
                    f"base_url must be an http(s) URL with a host, got {url!r}", field="base_url"
                )
            if url.rstrip("/") not in urls:
                urls.append(url.rstrip("/"))
        if not urls:
            raise ClientInputError("base_url names no URL", field="base_url")
        self.urls: tuple[str, ...] = tuple(urls)
        """The base URLs, in the order given."""
        self._clock = clock
        self._turn = itertools.count()
        self._down_until: dict[str, float] = {}
        # Threads of the sync client's pool pick and mark at once; the async client is one loop.
        self._lock = threading.Lock()

    def pick(self, spread: bool) -> str:
        """The base URL of the next attempt: in turn for ``spread`` calls, else the first up."""
        if len(self.urls) == 1:
            return self.urls[0]
        now = self._clock()
        with self._lock:
            up = [url for url in self.urls if self._down_until.get(url, 0.0) <= now]
            choices = up or list(self.urls)
            return choices[next(self._turn) % len(choices)] if spread else choices[0]

    def unreachable(self, exc: httpx.TransportError) -> None:
        """Leave out the URL ``exc`` could not connect to, for ``DOWN_SECONDS``."""
        if len(self.urls) == 1:
            return
        try:
            failed = str(exc.request.url)
        except RuntimeError:  # an error raised without its request: nothing to mark
            return
        with self._lock:
            for url in self.urls:
                if failed.startswith(url + "/") or failed == url:
                    self._down_until[url] = self._clock() + self.DOWN_SECONDS


class FlowCore:
    """Configuration, and the flows every workflow is made of: send, retry, stream, poll.

    Args:
        base_url: Service URL; see ``JudgeClient``.
        api_key: API key; default ``$BONUSJUDGE_API_KEY``.
        http_client: The injected HTTP client, if any (the caller keeps ownership).
        transport: The transport of the HTTP client the subclass creates, if any.
        timeout: Per-request timeout passed to the HTTP client (None: the client's own).
        retry: Retry policy; default ``RetryPolicy()``.
        clock: Monotonic clock used by the waits.
        rng: Random source of the backoff jitter.
    """

    def __init__(
        self,
        base_url: str | Sequence[str] | None,
        api_key: str | None,
        http_client: Any,
        transport: Any,
        timeout: float | httpx.Timeout | None,
        retry: RetryPolicy | None,
        clock: Callable[[], float],
        rng: random.Random | None,
    ) -> None:
        if http_client is not None and transport is not None:
            raise ClientInputError("give http_client or transport, not both", field="transport")
        client_base = str(http_client.base_url) if http_client is not None else None
        self.replicas = Replicas(
            base_url or client_base or os.environ.get(URL_ENV) or DEFAULT_URL, clock
        )
        """The service URLs and which of them answer (``Replicas``)."""
        self.base_url = self.replicas.urls[0]
        """The first service URL (the one named in messages)."""
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._api_key = key or None
        self._timeout = timeout
        self._owns_client = http_client is None
        self.retry = retry or RetryPolicy()
        """The retry policy in force."""
        self._clock = clock
        self._rng = rng
        self._user_agent = f"bonusjudge-client/{_client_version()}"

    def __repr__(self) -> str:
        # Never show the key: reprs end up in logs.
        auth = "with key" if self._api_key else "no key"
        urls = ", ".join(self.replicas.urls)
        return f"{type(self).__name__}({urls!r}, {auth})"

    # -- what drivers send ---------------------------------------------------------------------

    def _url(self, path: str) -> str:
        return self.base_url + path

    def _target(self, call: Call) -> str:
        """The full URL this attempt of ``call`` goes to (``Replicas.pick``)."""
        return self.replicas.pick(call.spread) + call.path

    def _client_timeout(self) -> float | httpx.Timeout:
        """The timeout of an HTTP client created here."""
        return DEFAULT_TIMEOUT if self._timeout is None else self._timeout

    def _request_args(self, call: Call, *, stream: bool = False) -> dict[str, Any]:
        """Keyword arguments of ``request`` (or ``stream``) for ``call``, after method and URL."""
        args: dict[str, Any] = {"params": call.params, "headers": self._headers(call)}
        if not stream:
            args.update(content=call.content, data=call.form, files=call.files)
        # An injected client keeps its own timeouts unless the caller set one here; the argument
        # is left out rather than passed as USE_CLIENT_DEFAULT, whose identity differs between
        # httpx and the httpx2 fork Starlette's TestClient is built on.
        if self._timeout is not None:
            args["timeout"] = self._timeout
        return args

    def _headers(self, call: Call) -> dict[str, str]:
        headers = {"Accept": call.accept, "User-Agent": self._user_agent}
        if call.content_type:
            headers["Content-Type"] = call.content_type
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _transport_error(
        self, exc: httpx.TransportError, call: Call, attempts: int
    ) -> JudgeClientError:
        url = self._url(call.path)
        tries = f" after {attempts} attempt(s)" if attempts > 1 else ""
        if isinstance(exc, httpx.TimeoutException):
            return ClientTimeout(
                f"{call.method} {url} timed out{tries}: {type(exc).__name__} {exc}".rstrip(),
                url=url,
                attempts=attempts,
            )
        what = "cannot reach" if isinstance(exc, NOT_SENT) else "lost the connection to"
        return ClientConnectionError(
            f"{what} bonusjudge at {self.base_url}{tries} ({call.method} {call.path}): "
            f"{type(exc).__name__}: {exc}",
            url=url,
            attempts=attempts,
        )

    # -- flows ---------------------------------------------------------------------------------

    def _retried(
        self,
        call: Call,
        attempt: Callable[[], Generator[Any, Any, Any]],
        progress_at: Callable[[], int] = lambda: 0,
    ) -> Generator[Any, Any, Any]:
        """Run ``attempt`` under the retry policy; return the last attempt's outcome.

        Tenacity decides (``RetryPolicy.retrying``); its waits become ``Sleep`` steps. A
        transport error that is not retried, or the last one, is raised as the client's
        ``ClientConnectionError`` or ``ClientTimeout`` naming the attempts made.
        """
        retrying = self.retry.retrying(
            idempotent=call.idempotent,
            retry_statuses=call.retry_statuses,
            rng=self._rng,
            progress_at=progress_at,
        )
        retrying.begin()
        state = tenacity.RetryCallState(retrying, fn=None, args=(), kwargs={})
        while True:
            try:
                action = retrying.iter(state)  # re-raises the last error when it stands
            except httpx.TransportError as exc:
                attempts = max(state.attempt_number - progress_at(), 1)
                raise self._transport_error(exc, call, attempts) from exc
            if isinstance(action, tenacity.DoAttempt):
                try:
                    state.set_result((yield from attempt()))
                except httpx.TransportError as exc:
                    if isinstance(exc, NOT_SENT):
                        self.replicas.unreachable(exc)  # the retry goes to another replica
                    state.set_exception((type(exc), exc, exc.__traceback__))
            elif isinstance(action, tenacity.DoSleep):
                state.prepare_for_next_attempt()
                yield Sleep(float(action))
            else:
                return action

    def _send(self, call: Call) -> Flow[Any]:
        """Send ``call``, retrying as its idempotency allows; returns the final response."""

        def attempt() -> Flow[Any]:
            return (yield Send(call))

        return (yield from self._retried(call, attempt))

    def _call_json(self, call: Call) -> Flow[Any]:
        response = yield from self._send(call)
        url = self._url(call.path)
        if response.is_error:
            raise http_error(response, call, url)
        return json_body(response, url)

    def _call_model(self, call: Call, model: type[_M]) -> Flow[_M]:
        data = yield from self._call_json(call)
        return parse(model, data, self._url(call.path))

    def _get(self, path: str, model: type[_M]) -> Flow[_M]:
        return (yield from self._call_model(Call("GET", path), model))

    def _raw(self, path: str, accept: str) -> Flow[Any]:
        """A GET whose answer is not JSON (Markdown, a file, metrics text): the response."""
        call = Call("GET", path, accept=accept)
        response = yield from self._send(call)
        if response.is_error:
            raise http_error(response, call, self._url(path))
        return response

    def _lines(self, path: str, offset: int, model: type[_M]) -> StreamFlow[_M]:
        """Stream NDJSON result lines from ``offset``, resuming after a broken connection.

        A resumed stream asks for the lines after the last one received (``?offset=``), so no
        line is lost or repeated; an attempt that received lines renews the retry allowance.
        """
        url = self._url(path)
        first = Call("GET", path, accept=NDJSON)
        received = 0  # lines emitted so far
        attempts = 0
        progress_at = 0  # the last attempt that received a line

        def attempt() -> Generator[Any, Any, Any]:
            nonlocal received, attempts, progress_at
            attempts += 1
            call = Call("GET", path, params={"offset": offset + received}, accept=NDJSON)
            response = yield OpenStream(call)
            if response.status_code in self.retry.statuses:
                return response  # busy: retried, or reported once the retries are spent
            if response.is_error:
                yield from self._fail(response, call)
            while (line := (yield NEXT_LINE)) is not None:
                if not line.strip():
                    continue
                entry = line_model(line, offset + received + 1, url, model)
                received += 1
                progress_at = attempts
                yield Emit(entry)
            return None

        busy = yield from self._retried(first, attempt, lambda: progress_at)
        if busy is not None:
            yield from self._fail(busy, first)

    def _fail(self, response: Any, call: Call) -> Generator[Step, Any, NoReturn]:
        yield READ_BODY
        raise http_error(response, call, self._url(call.path))

    def _poll(
        self,
        fetch: Callable[[], Flow[_Status]],
        poll_interval: float,
        timeout: float | None,
        late: Callable[[_Status], ClientTimeout],
        seen: Callable[[_Status], None] = lambda status: None,
        until: frozenset[str] = TERMINAL_STATUSES,
    ) -> Flow[_Status]:
        """Fetch a status until it is one of ``until``; ``late(status)`` after ``timeout``."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            status = yield from fetch()
            seen(status)
            if status.status in until:
                return status
            now = self._clock()
            if deadline is not None and now >= deadline:
                raise late(status)
            yield Sleep(poll_interval if deadline is None else min(poll_interval, deadline - now))
