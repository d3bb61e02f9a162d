"""Typed Python client of the bonusjudge HTTP service: ``JudgeClient`` and ``AsyncJudgeClient``.

Both clients speak the contract of ``api/app.py`` and return the engine's own models
(``GradeResult``, ``ExtractResult``, ``Summary``), so code written against the in-process
``Grader`` reads the same against a remote service. They run on httpx and accept either a
transport or a whole client (``httpx.Client`` / ``httpx.AsyncClient``, or Starlette's
``TestClient``), so tests drive the app in-process (``TestClient(app)`` or
``httpx.ASGITransport(app=app)``) with no network.

This module imports only httpx, pydantic, tqdm, ``judge`` models and ``api.schemas`` (the service's
wire models, which are plain pydantic), never FastAPI: the CLI uses it on machines that run only
the client. Sharing ``api.schemas`` with the service means the two cannot drift apart.

Retries: idempotent calls (every GET, ``cancel``, and the grading, extraction and metrics POSTs,
whose answers are cached and deterministic per item) are retried on connection errors and on
429/503 answers, with full-jitter exponential backoff floored at the service's ``Retry-After``.
``submit_job`` creates state on the server, so it is retried only when the request never left
(the connection could not be opened); a lost answer is never resent, which could start the job
twice. The same holds for ``submit_mcq_job`` and ``calibrate``; ``mcq`` (pure scoring) is
retried like grading. Read and write timeouts are not retried: the timeout is the caller's stated
patience.

Beyond grading: multiple-choice scoring (``mcq``, ``submit_mcq_job`` then
``wait(id, kind="mcq")``, ``mcq_results``, ``mcq_summary``) and calibration (``calibrate``,
``calibration_status``, ``wait_calibration``, ``reports``, ``report``, ``report_markdown``,
``report_file``).

Errors, one tree::

    JudgeClientError
    ├── ClientHTTPError        the service answered with an error status (status, type, field)
    ├── ClientConnectionError  the service could not be reached, or the connection broke
    ├── ClientTimeout          a request, or wait(), ran out of time
    ├── ClientResponseError    a success answer that does not match the contract
    ├── ClientItemError        one item of a batch failed (index, id, type, field)
    └── ClientInputError       an argument is invalid; raised before any request (field)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import deque
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, overload
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError
from tqdm import tqdm

from api.schemas import (
    BatchEntry,
    CalibrateBody,
    CalibrationJob,
    CalibrationMetric,
    Health,
    ItemError,
    JobList,
    JobState,
    JobStatus,
    McqEntry,
    McqResponse,
    MetricPair,
    MetricsEntry,
    Readiness,
    ReportInfo,
    ReportList,
    RubricDetail,
    RubricList,
    RubricSummary,
)
from judge.aggregate import Summary
from judge.config import JudgeOverrides
from judge.mcq.types import McqItem, McqSummary
from judge.types import ExtractRequest, ExtractResult, GradeRequest, GradeResult

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "TERMINAL_STATUSES",
    "URL_ENV",
    "AsyncHTTPClient",
    "AsyncJudgeClient",
    "BatchEntry",
    "CalibrationJob",
    "ClientConnectionError",
    "ClientHTTPError",
    "ClientInputError",
    "ClientItemError",
    "ClientResponseError",
    "ClientTimeout",
    "Health",
    "ItemError",
    "ItemInput",
    "JobKind",
    "JobList",
    "JobStatus",
    "JudgeClient",
    "JudgeClientError",
    "JudgeInput",
    "McqEntry",
    "McqInput",
    "McqResponse",
    "MetricPair",
    "MetricsEntry",
    "Readiness",
    "ReportInfo",
    "RetryPolicy",
    "RubricDetail",
    "RubricList",
    "RubricSummary",
    "SyncHTTPClient",
    "parse_retry_after",
]

URL_ENV = "BONUSJUDGE_URL"
"""Environment variable read for the service URL when none is passed."""

API_KEY_ENV = "BONUSJUDGE_API_KEY"
"""Environment variable read for the API key when none is passed."""

DEFAULT_URL = "http://127.0.0.1:8000"
"""Where ``bonusjudge serve`` listens by default."""

DEFAULT_BATCH_SIZE = 32
"""Items per batch request in ``grade_many`` (the service accepts up to ``max_batch``, 256)."""

DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
"""Timeout of clients this module creates: a batch graded by an LLM judge may take minutes."""

TERMINAL_STATUSES = frozenset({"done", "cancelled", "failed"})
"""Job statuses after which nothing changes any more."""

_JSON = "application/json"
_NDJSON = "application/x-ndjson"

_M = TypeVar("_M", bound=BaseModel)

_Placed = list[tuple[int, "GradeResult | ClientItemError"]]

ItemInput = GradeRequest | Mapping[str, Any]
"""One item to grade: a ``GradeRequest``, or a mapping of its fields (validated client-side)."""

JudgeInput = JudgeOverrides | Mapping[str, Any] | None
"""Per-request judge selection: ``JudgeOverrides`` or a mapping of its fields."""

McqInput = McqItem | Mapping[str, Any]
"""One multiple-choice item: an ``McqItem``, or a mapping of its fields (sent as it is: the
service validates items one by one and reports a bad one as an error entry)."""

JobKind = Literal["grade", "mcq"]
"""Which job routes a job lives under: ``/v1/jobs`` (grading) or ``/v1/mcq/jobs``."""


# -- injected HTTP clients ----------------------------------------------------------------------


class SyncHTTPClient(Protocol):
    """What ``JudgeClient`` needs of an injected client.

    ``httpx.Client`` fits, and so does Starlette's ``TestClient``, which is built on the httpx2
    fork and so is not an ``httpx.Client`` subclass. Transport errors are mapped to this module's
    errors for httpx clients only (an in-process test client raises none).
    """

    @property
    def base_url(self) -> Any:
        """The client's base URL (may be empty)."""

    def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = ...,
        data: Any = ...,
        files: Any = ...,
        params: Any = ...,
        headers: Any = ...,
    ) -> Any:
        """Send one request and read the whole response."""

    def stream(
        self, method: str, url: str, *, params: Any = ..., headers: Any = ...
    ) -> AbstractContextManager[Any]:
        """Send one request and stream the response body."""

    def close(self) -> None:
        """Release the connections."""


class AsyncHTTPClient(Protocol):
    """What ``AsyncJudgeClient`` needs of an injected client (``httpx.AsyncClient`` fits)."""

    @property
    def base_url(self) -> Any:
        """The client's base URL (may be empty)."""

    async def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = ...,
        data: Any = ...,
        files: Any = ...,
        params: Any = ...,
        headers: Any = ...,
    ) -> Any:
        """Send one request and read the whole response."""

    def stream(
        self, method: str, url: str, *, params: Any = ..., headers: Any = ...
    ) -> AbstractAsyncContextManager[Any]:
        """Send one request and stream the response body."""

    async def aclose(self) -> None:
        """Release the connections."""


# -- errors -------------------------------------------------------------------------------------


class JudgeClientError(Exception):
    """Root of every error this client raises."""


class ClientHTTPError(JudgeClientError):
    """The service answered with an error status (its ``{"error": {...}}`` body, parsed).

    Attributes:
        status: HTTP status code.
        type: The error type the service reported (``invalid_input``, ``not_found``...), or
            ``http_error`` when the body was not the service's error shape (e.g. a proxy page).
        message: The service's message.
        field: Dotted path of the offending field, when the service named one.
        method: HTTP method of the failed request.
        url: URL of the failed request.
        retry_after: Seconds the service asked to wait (429/503), when it said.
    """

    def __init__(
        self,
        *,
        status: int,
        type: str,
        message: str,
        field: str | None = None,
        method: str = "",
        url: str = "",
        retry_after: float | None = None,
    ) -> None:
        where = f" [field: {field}]" if field else ""
        super().__init__(f"{method} {url} -> HTTP {status} {type}: {message}{where}".strip())
        self.status = status
        self.type = type
        self.message = message
        self.field = field
        self.method = method
        self.url = url
        self.retry_after = retry_after


class ClientConnectionError(JudgeClientError):
    """The service could not be reached, or the connection broke mid-request.

    Attributes:
        url: URL of the request.
        attempts: Attempts made, retries included.
    """

    def __init__(self, message: str, *, url: str = "", attempts: int = 1) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts


class ClientTimeout(JudgeClientError):
    """A request timed out, or ``wait()`` gave up before the job finished.

    Attributes:
        url: URL of the request (or of the job polled).
        attempts: Attempts made, retries included.
    """

    def __init__(self, message: str, *, url: str = "", attempts: int = 1) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts


class ClientResponseError(JudgeClientError):
    """A success answer whose body does not match the contract (bad JSON, missing field).

    Attributes:
        url: URL of the request.
        field: Dotted path of the first mismatching field, when known.
    """

    def __init__(self, message: str, *, url: str = "", field: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.field = field


class ClientItemError(JudgeClientError):
    """One item of a batch or job failed while the rest were graded.

    Attributes:
        index: 0-based position of the item in the caller's input.
        id: The item's id, when it had one.
        type: Error type the service reported.
        message: The service's message.
        field: Dotted path of the offending field inside the item, when known.
        line: 1-based line of an uploaded JSONL file the item came from, when it did.
    """

    def __init__(
        self,
        *,
        index: int,
        id: str | None,
        type: str,
        message: str,
        field: str | None = None,
        line: int | None = None,
    ) -> None:
        label = f"item {index}" + (f" (id {id!r})" if id is not None else "")
        if line is not None:
            label += f" (line {line})"
        where = f" [field: {field}]" if field else ""
        super().__init__(f"{label}: {type}: {message}{where}")
        self.index = index
        self.id = id
        self.type = type
        self.message = message
        self.field = field
        self.line = line


class ClientInputError(JudgeClientError, ValueError):
    """An argument is invalid; raised before any request is sent.

    Attributes:
        field: The offending argument or item field (``items.3.question``).
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


# -- retry policy -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How the client retries calls that may be repeated safely.

    Args:
        retries: Retries after the first attempt (0 disables retrying).
        backoff_base: Bound of the first backoff, in seconds; it doubles per retry.
        backoff_cap: Largest backoff bound, in seconds.
        max_retry_after: Longest ``Retry-After`` honoured; a longer one is cut to this, so a
            misconfigured proxy cannot stall a run for hours.
        statuses: Answer statuses that are retried (the service is busy or not ready yet).
    """

    retries: int = 3
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    max_retry_after: float = 120.0
    statuses: frozenset[int] = frozenset({429, 503})

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ClientInputError("retries must be >= 0", field="retry.retries")
        if self.backoff_base < 0 or self.backoff_cap < 0 or self.max_retry_after < 0:
            raise ClientInputError("backoff times must be >= 0", field="retry")

    def delay(
        self, retry: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``retry`` (1-based).

        Full jitter (uniform up to the exponential bound) so many clients failing together do
        not come back in lockstep; the service's ``Retry-After`` is a floor.
        """
        bound = min(self.backoff_cap, self.backoff_base * 2 ** max(0, retry - 1))
        delay = (rng or random).uniform(0.0, bound)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or HTTP-date); None if absent.

    An unparsable header is ignored (None) rather than failing the call: it only tunes backoff.
    """
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


# -- request building shared by both clients ----------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """One logical request; retried attempts resend exactly these bytes."""

    method: str
    path: str
    content: bytes | None = None
    content_type: str | None = None
    params: Mapping[str, Any] | None = None
    form: Mapping[str, str] | None = None
    files: Mapping[str, tuple[str, bytes, str]] | None = None
    idempotent: bool = True
    retry_statuses: bool = True
    accept: str = _JSON


# Never sent: the request did not leave this machine, so any call may be retried.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Broken connection after sending: only calls that may be repeated are retried.
_BROKEN = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.CloseError)


def _may_retry_transport(exc: httpx.TransportError, call: _Call) -> bool:
    if isinstance(exc, _NOT_SENT):
        return True
    return call.idempotent and isinstance(exc, _BROKEN)


def _client_version() -> str:
    try:
        return metadata.version("bonusjudge")
    except metadata.PackageNotFoundError:
        return "0"


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _loc(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def _judge_payload(judge: JudgeInput) -> dict[str, Any] | None:
    if judge is None:
        return None
    if isinstance(judge, JudgeOverrides):
        overrides = judge
    elif isinstance(judge, Mapping):
        try:
            overrides = JudgeOverrides.model_validate(dict(judge))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = "judge." + _loc(first["loc"]) if first["loc"] else "judge"
            raise ClientInputError(f"invalid {field}: {first['msg']}", field=field) from None
    else:
        raise ClientInputError(
            f"judge must be JudgeOverrides or a mapping, not {type(judge).__name__}",
            field="judge",
        )
    dumped = overrides.model_dump(mode="json", exclude_none=True)
    return dumped or None


def _as_model(model: type[_M], value: Any, field: str) -> _M:
    """Validate caller input into ``model``; a failure names ``field`` plus the inner path."""
    if isinstance(value, model):
        return value
    if not isinstance(value, Mapping):
        raise ClientInputError(
            f"{field} must be a {model.__name__} or a mapping, not {type(value).__name__}",
            field=field,
        )
    try:
        return model.model_validate(dict(value))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = f"{field}.{_loc(first['loc'])}" if first["loc"] else field
        raise ClientInputError(f"invalid {where}: {first['msg']}", field=where) from None


def _request_fields(request: BaseModel) -> dict[str, Any]:
    # exclude_none keeps the body small and lets the service apply its own defaults.
    return request.model_dump(mode="json", exclude_none=True)


def _job_item(item: Any, index: int) -> dict[str, Any]:
    # Job items go out as given when they are mappings: the service also accepts CharToM-format
    # lines (answer, context_0...), which are not GradeRequests, and records bad lines one by one.
    if isinstance(item, GradeRequest):
        return _request_fields(item)
    if isinstance(item, Mapping):
        return dict(item)
    raise ClientInputError(
        f"items.{index} must be a GradeRequest or a mapping, not {type(item).__name__}",
        field=f"items.{index}",
    )


def _job_path(job_id: str) -> str:
    if not isinstance(job_id, str) or not job_id.strip():
        raise ClientInputError("job_id must be a non-empty string", field="job_id")
    return f"/v1/jobs/{quote(job_id, safe='')}"


def _mcq_job_path(job_id: str) -> str:
    _job_path(job_id)  # the same check of the id
    return f"/v1/mcq/jobs/{quote(job_id, safe='')}"


def _kind_path(job_id: str, kind: JobKind) -> str:
    if kind == "grade":
        return _job_path(job_id)
    if kind == "mcq":
        return _mcq_job_path(job_id)
    raise ClientInputError(f"kind must be 'grade' or 'mcq', not {kind!r}", field="kind")


def _id_path(prefix: str, value: str, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ClientInputError(f"{field} must be a non-empty string", field=field)
    return f"{prefix}/{quote(value, safe='')}"


def _mcq_item(item: Any, index: int) -> dict[str, Any]:
    if isinstance(item, McqItem):
        return item.model_dump(mode="json", exclude_none=True)
    if isinstance(item, Mapping):
        return dict(item)
    raise ClientInputError(
        f"items.{index} must be an McqItem or a mapping, not {type(item).__name__}",
        field=f"items.{index}",
    )


def _mcq_options(
    aggregate: str, group_by: Sequence[str] | None, llm_extract: bool,
    fuzzy_threshold: float | None,
) -> dict[str, Any]:
    """The scoring options of a multiple-choice call, checked before anything is sent."""
    if aggregate not in ("mean", "majority"):
        raise ClientInputError(
            f"aggregate must be 'mean' or 'majority', not {aggregate!r}", field="aggregate"
        )
    options: dict[str, Any] = {"aggregate": aggregate}
    if group_by is not None:
        fields = [group_by] if isinstance(group_by, str) else list(group_by)
        if not all(isinstance(f, str) and f.strip() for f in fields):
            raise ClientInputError("group_by must hold non-empty field names", field="group_by")
        options["group_by"] = fields
    if llm_extract:
        options["llm_extract"] = True
    if fuzzy_threshold is not None:
        if not 0 <= fuzzy_threshold <= 101:
            raise ClientInputError(
                "fuzzy_threshold must be between 0 and 101", field="fuzzy_threshold"
            )
        options["fuzzy_threshold"] = fuzzy_threshold
    return options


def _file_bytes(file: str | os.PathLike[str] | bytes, what: str) -> tuple[bytes, str]:
    if isinstance(file, bytes):
        content, name = file, "items.jsonl"
    else:
        try:
            content, name = Path(file).read_bytes(), Path(file).name
        except OSError as exc:
            raise ClientInputError(f"cannot read {what} {file}: {exc}", field="file") from None
    if not content.strip():
        raise ClientInputError(f"the {what} is empty", field="file")
    return content, name


def _chunks(
    items: Iterable[ItemInput], batch_size: int
) -> Iterator[tuple[int, list[GradeRequest]]]:
    """Validated items in ``(start index, chunk)`` pieces, read lazily from ``items``."""
    chunk: list[GradeRequest] = []
    start = 0
    for index, item in enumerate(items):
        request = _as_model(GradeRequest, item, f"items.{index}")
        if request.id is None:
            # The service numbers id-less items within their batch; a global 1-based position
            # (the CLI's line-number convention) keeps results identifiable across batches.
            request = request.model_copy(update={"id": str(index + 1)})
        chunk.append(request)
        if len(chunk) == batch_size:
            yield start, chunk
            start, chunk = index + 1, []
    if chunk:
        yield start, chunk


def _check_many_args(batch_size: int, concurrency: int) -> None:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ClientInputError("batch_size must be an integer >= 1", field="batch_size")
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ClientInputError("concurrency must be an integer >= 1", field="concurrency")


def _total(items: Iterable[Any]) -> int | None:
    try:
        return len(items)  # type: ignore[arg-type]
    except TypeError:
        return None  # a generator: the bar counts without a total


def _progress_bar(total: int | None, enabled: bool, desc: str) -> tqdm[Any]:
    return tqdm(total=total, disable=not enabled, unit="item", desc=desc, dynamic_ncols=True)


def _place(entries: list[BatchEntry], start: int, size: int, url: str) -> _Placed:
    """Map one batch answer back to input positions, checking it answers every item once."""
    if len(entries) != size or sorted(e.index for e in entries) != list(range(size)):
        raise ClientResponseError(
            f"batch answer for items {start}..{start + size - 1} has {len(entries)} entries "
            f"with indexes {[e.index for e in entries][:10]}, expected 0..{size - 1}",
            url=url,
            field="results",
        )
    out: list[tuple[int, GradeResult | ClientItemError]] = []
    for entry in sorted(entries, key=lambda e: e.index):
        position = start + entry.index
        if entry.result is not None and entry.error is None:
            out.append((position, entry.result))
            continue
        error = entry.error or ItemError(
            type="invalid_response", message="entry carries neither a result nor an error"
        )
        out.append(
            (
                position,
                ClientItemError(
                    index=position,
                    id=entry.id,
                    type=error.type,
                    message=error.message,
                    field=error.field,
                    line=error.line,
                ),
            )
        )
    return out


class _Base:
    """Configuration and response handling shared by the sync and async clients."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        client_base_url: str | None,
        timeout: float | httpx.Timeout | None,
        retry: RetryPolicy | None,
        rng: random.Random | None,
    ) -> None:
        url = base_url or client_base_url or os.environ.get(URL_ENV) or DEFAULT_URL
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ClientInputError(
                f"base_url must be an http(s) URL with a host, got {url!r}", field="base_url"
            )
        self.base_url = url.rstrip("/")
        """The service URL every path is joined to."""
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._api_key = key or None
        self._timeout = timeout
        self.retry = retry or RetryPolicy()
        """The retry policy in force."""
        self._rng = rng
        self._user_agent = f"bonusjudge-client/{_client_version()}"

    def __repr__(self) -> str:
        # Never show the key: reprs end up in logs.
        auth = "with key" if self._api_key else "no key"
        return f"{type(self).__name__}({self.base_url!r}, {auth})"

    def _url(self, path: str) -> str:
        return self.base_url + path

    def _headers(self, call: _Call) -> dict[str, str]:
        headers = {"Accept": call.accept, "User-Agent": self._user_agent}
        if call.content_type:
            headers["Content-Type"] = call.content_type
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _timeout_kwargs(self) -> dict[str, Any]:
        # An injected client keeps its own timeouts unless the caller set one here; the argument
        # is left out rather than passed as USE_CLIENT_DEFAULT, whose identity differs between
        # httpx and the httpx2 fork Starlette's TestClient is built on.
        return {} if self._timeout is None else {"timeout": self._timeout}

    def _transport_error(
        self, exc: httpx.TransportError, call: _Call, attempts: int
    ) -> JudgeClientError:
        url = self._url(call.path)
        tries = f" after {attempts} attempt(s)" if attempts > 1 else ""
        if isinstance(exc, httpx.TimeoutException):
            return ClientTimeout(
                f"{call.method} {url} timed out{tries}: {type(exc).__name__} {exc}".rstrip(),
                url=url,
                attempts=attempts,
            )
        what = "cannot reach" if isinstance(exc, _NOT_SENT) else "lost the connection to"
        return ClientConnectionError(
            f"{what} bonusjudge at {self.base_url}{tries} ({call.method} {call.path}): "
            f"{type(exc).__name__}: {exc}",
            url=url,
            attempts=attempts,
        )

    @staticmethod
    def _http_error(response: httpx.Response, call: _Call, url: str) -> ClientHTTPError:
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        error_type, message, field = "http_error", response.reason_phrase or "error", None
        try:
            body = response.json()
        except (ValueError, UnicodeDecodeError):
            body = None
        detail = body.get("error") if isinstance(body, dict) else None
        if isinstance(detail, dict) and isinstance(detail.get("message"), str):
            error_type = str(detail.get("type") or error_type)
            message = detail["message"]
            field = detail.get("field") if isinstance(detail.get("field"), str) else None
        else:
            # Not the service's shape (a proxy or load balancer answered): keep a short excerpt.
            text = response.text.strip().replace("\n", " ")
            if text:
                message = f"{message}: {text[:200]}"
        return ClientHTTPError(
            status=response.status_code,
            type=error_type,
            message=message,
            field=field,
            method=call.method,
            url=url,
            retry_after=retry_after,
        )

    @staticmethod
    def _json(response: httpx.Response, url: str) -> Any:
        try:
            return response.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise ClientResponseError(
                f"{url} answered HTTP {response.status_code} with a body that is not JSON: {exc}",
                url=url,
            ) from None

    @staticmethod
    def _model(model: type[_M], data: Any, url: str, what: str | None = None) -> _M:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = _loc(first["loc"]) or None
            raise ClientResponseError(
                f"{url} answered with an invalid {what or model.__name__}: "
                f"{field or 'body'}: {first['msg']}",
                url=url,
                field=field,
            ) from None

    def _field_list(self, data: Any, key: str, url: str) -> list[Any]:
        value = data.get(key) if isinstance(data, dict) else None
        if not isinstance(value, list):
            raise ClientResponseError(f"{url} answer lacks the list {key!r}", url=url, field=key)
        return value

    def _entries(self, data: Any, url: str) -> list[BatchEntry]:
        return [
            self._model(BatchEntry, entry, url, f"results.{i}")
            for i, entry in enumerate(self._field_list(data, "results", url))
        ]

    def _result_line(self, line: str, number: int, url: str) -> BatchEntry:
        return self._line_model(line, number, url, BatchEntry)

    def _line_model(self, line: str, number: int, url: str, model: type[_M]) -> _M:
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise ClientResponseError(
                f"{url}: result line {number} is not JSON: {exc}", url=url, field=f"line {number}"
            ) from None
        return self._model(model, data, url, f"result line {number}")

    def _mcq_response(self, data: Any, url: str, size: int) -> McqResponse:
        answer = self._model(McqResponse, data, url)
        if sorted(entry.index for entry in answer.results) != list(range(size)):
            raise ClientResponseError(
                f"{url} answered {len(answer.results)} entries for {size} items",
                url=url, field="results",
            )
        answer.results.sort(key=lambda entry: entry.index)
        return answer

    @staticmethod
    def _report_dict(data: Any, url: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ClientResponseError(f"{url} answered a report that is not an object", url=url)
        return data

    # -- call builders (pure: the same bytes for every attempt) --------------------------------

    @staticmethod
    def _grade_call(request: ItemInput, judge: JudgeInput) -> _Call:
        body = _request_fields(_as_model(GradeRequest, request, "request"))
        overrides = _judge_payload(judge)
        if overrides:
            body["judge"] = overrides
        return _Call("POST", "/v1/grade", _dumps(body), _JSON)

    @staticmethod
    def _batch_call(items: Iterable[ItemInput], judge: JudgeInput) -> tuple[_Call, int]:
        # Mappings are validated here too: a bad item is the caller's bug, best caught before a
        # round trip; the service still validates each item on its own.
        payload = [
            _request_fields(_as_model(GradeRequest, item, f"items.{i}"))
            for i, item in enumerate(items)
        ]
        if not payload:
            raise ClientInputError("items must hold at least one item", field="items")
        body: dict[str, Any] = {"items": payload}
        overrides = _judge_payload(judge)
        if overrides:
            body["judge"] = overrides
        return _Call("POST", "/v1/grade/batch", _dumps(body), _JSON), len(payload)

    @staticmethod
    def _job_call(
        items: Iterable[ItemInput] | None,
        file: str | os.PathLike[str] | bytes | None,
        judge: JudgeInput,
    ) -> _Call:
        if (items is None) == (file is None):
            raise ClientInputError("give exactly one of items or file", field="items")
        overrides = _judge_payload(judge)
        if items is not None:
            payload = [_job_item(item, i) for i, item in enumerate(items)]
            if not payload:
                raise ClientInputError("items must hold at least one item", field="items")
            body: dict[str, Any] = {"items": payload}
            if overrides:
                body["judge"] = overrides
            return _Call("POST", "/v1/jobs", _dumps(body), _JSON, idempotent=False)
        if file is None:  # unreachable after the check above; spelled out for the type checker
            raise ClientInputError("give items or file", field="file")
        if isinstance(file, bytes):
            content, name = file, "items.jsonl"
        else:
            try:
                content, name = Path(file).read_bytes(), Path(file).name
            except OSError as exc:
                raise ClientInputError(
                    f"cannot read job file {file}: {exc}", field="file"
                ) from None
        if not content.strip():
            raise ClientInputError("the job file is empty", field="file")
        if not overrides:
            return _Call("POST", "/v1/jobs", content, _NDJSON, idempotent=False)
        # A raw JSONL body has no room for options: with a judge selection the file goes as a
        # multipart upload, whose `judge` form field carries it.
        return _Call(
            "POST",
            "/v1/jobs",
            form={"judge": json.dumps(overrides, separators=(",", ":"))},
            files={"file": (name, content, _NDJSON)},
            idempotent=False,
        )

    @staticmethod
    def _extract_call(request: ExtractRequest | Mapping[str, Any], judge: JudgeInput) -> _Call:
        body = _request_fields(_as_model(ExtractRequest, request, "request"))
        overrides = _judge_payload(judge)
        if overrides:
            body["judge"] = overrides
        return _Call("POST", "/v1/bonus-points", _dumps(body), _JSON)

    @staticmethod
    def _metrics_call(
        pairs: Iterable[MetricPair | Mapping[str, Any] | tuple[str, str]],
        metrics: Sequence[Literal["rouge_l", "bertscore"]] | None,
        encoder: str | None,
    ) -> tuple[_Call, int]:
        checked: list[dict[str, Any]] = []
        for i, pair in enumerate(pairs):
            if isinstance(pair, tuple):
                if len(pair) != 2:
                    raise ClientInputError(
                        f"pairs.{i} must be (response, reference)", field=f"pairs.{i}"
                    )
                pair = {"response": pair[0], "reference": pair[1]}
            checked.append(_request_fields(_as_model(MetricPair, pair, f"pairs.{i}")))
        if not checked:
            raise ClientInputError("pairs must hold at least one pair", field="pairs")
        body: dict[str, Any] = {"pairs": checked}
        if metrics is not None:
            if isinstance(metrics, str):
                metrics = [metrics]  # type: ignore[list-item]
            body["metrics"] = list(metrics)
        if encoder is not None:
            body["encoder"] = encoder
        return _Call("POST", "/v1/metrics", _dumps(body), _JSON), len(checked)

    @staticmethod
    def _mcq_call(
        items: Iterable[McqInput],
        aggregate: str,
        group_by: Sequence[str] | None,
        llm_extract: bool,
        fuzzy_threshold: float | None,
        path: str = "/v1/mcq",
    ) -> tuple[_Call, int]:
        options = _mcq_options(aggregate, group_by, llm_extract, fuzzy_threshold)
        payload = [_mcq_item(item, i) for i, item in enumerate(items)]
        if not payload:
            raise ClientInputError("items must hold at least one item", field="items")
        body = {"items": payload, **options}
        # Scoring is deterministic (and judge readings are cached): safe to resend; a job is not.
        return _Call("POST", path, _dumps(body), _JSON, idempotent=path == "/v1/mcq"), len(payload)

    @classmethod
    def _mcq_job_call(
        cls,
        items: Iterable[McqInput] | None,
        file: str | os.PathLike[str] | bytes | None,
        aggregate: str,
        group_by: Sequence[str] | None,
        llm_extract: bool,
        fuzzy_threshold: float | None,
    ) -> _Call:
        if (items is None) == (file is None):
            raise ClientInputError("give exactly one of items or file", field="items")
        if items is not None:
            call, _ = cls._mcq_call(
                items, aggregate, group_by, llm_extract, fuzzy_threshold, path="/v1/mcq/jobs"
            )
            return call
        assert file is not None  # checked above; spelled out for the type checker
        content, _ = _file_bytes(file, "job file")
        # A JSONL body carries only items: the options travel as query parameters.
        options = _mcq_options(aggregate, group_by, llm_extract, fuzzy_threshold)
        params = {
            key: ",".join(value) if key == "group_by" else (
                "true" if value is True else value
            )
            for key, value in options.items()
        }
        return _Call("POST", "/v1/mcq/jobs", content, _NDJSON, params=params, idempotent=False)

    @staticmethod
    def _calibrate_call(
        dataset: str | None,
        items: Iterable[Mapping[str, Any]] | None,
        *,
        name: str | None,
        scale: str | None,
        judges: Sequence[str] | None,
        metrics: Sequence[CalibrationMetric] | None,
        limit: int | None,
        seed: int,
        resamples: int,
        retest: bool,
    ) -> _Call:
        if (dataset is None) == (items is None):
            raise ClientInputError("give exactly one of dataset (a set's name) or items",
                                   field="set")
        body: dict[str, Any] = {"seed": seed, "resamples": resamples}
        if dataset is not None:
            body["set"] = dataset
        else:
            assert items is not None
            body["items"] = [
                dict(item) if isinstance(item, Mapping) else item for item in items
            ]
            if not body["items"]:
                raise ClientInputError("items must hold at least one line", field="items")
        optional = {"name": name, "scale": scale, "limit": limit}
        body.update({key: value for key, value in optional.items() if value is not None})
        if judges is not None:
            body["judges"] = [judges] if isinstance(judges, str) else list(judges)
        if metrics is not None:
            body["metrics"] = [metrics] if isinstance(metrics, str) else list(metrics)
        if retest:
            body["retest"] = True
        try:
            CalibrateBody.model_validate(body)  # the service's own model: fail before sending
        except ValidationError as exc:
            first = exc.errors()[0]
            where = _loc(first["loc"]) or "body"
            raise ClientInputError(f"invalid {where}: {first['msg']}", field=where) from None
        return _Call("POST", "/v1/calibrate", _dumps(body), _JSON, idempotent=False)

    def _readiness(self, response: httpx.Response, call: _Call, url: str) -> Readiness:
        # 503 with a readiness body is an answer ("not ready, because..."), not a failure.
        if response.status_code in (200, 503):
            try:
                data = response.json()
            except (ValueError, UnicodeDecodeError):
                data = None
            if isinstance(data, dict) and "ready" in data:
                return self._model(Readiness, data, url)
        raise self._http_error(response, call, url)

    @staticmethod
    def _check_poll(poll_interval: float, timeout: float | None) -> None:
        if poll_interval <= 0:
            raise ClientInputError("poll_interval must be > 0", field="poll_interval")
        if timeout is not None and timeout < 0:
            raise ClientInputError("timeout must be >= 0", field="timeout")


# -- sync client --------------------------------------------------------------------------------


class JudgeClient(_Base):
    """Synchronous client of a bonusjudge service.

    Args:
        base_url: Service URL; default the injected client's base URL if it has one, else
            ``$BONUSJUDGE_URL``, else ``http://127.0.0.1:8000``. An explicit value always wins.
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
        base_url: str | None = None,
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
        if http_client is not None and transport is not None:
            raise ClientInputError("give http_client or transport, not both", field="transport")
        client_base = str(http_client.base_url) if http_client is not None else None
        super().__init__(base_url, api_key, client_base or None, timeout, retry, rng)
        self._owns_client = http_client is None
        self._http: SyncHTTPClient = http_client or httpx.Client(
            transport=transport, timeout=DEFAULT_TIMEOUT if timeout is None else timeout
        )
        self._sleep = sleep
        self._clock = clock

    # -- plumbing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP client if this object created it (an injected one stays open)."""
        if self._owns_client:
            self._http.close()

    def __enter__(self) -> JudgeClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _send(self, call: _Call) -> httpx.Response:
        """Send ``call``, retrying as its idempotency allows; returns the final response."""
        url = self._url(call.path)
        attempt = 0
        while True:
            attempt += 1
            try:
                response: httpx.Response = self._http.request(
                    call.method,
                    url,
                    content=call.content,
                    data=call.form,
                    files=call.files,
                    params=call.params,
                    headers=self._headers(call),
                    **self._timeout_kwargs(),
                )
            except httpx.TransportError as exc:
                if attempt <= self.retry.retries and _may_retry_transport(exc, call):
                    self._sleep(self.retry.delay(attempt, rng=self._rng))
                    continue
                raise self._transport_error(exc, call, attempt) from exc
            if (
                response.status_code in self.retry.statuses
                and call.idempotent
                and call.retry_statuses
                and attempt <= self.retry.retries
            ):
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                response.close()
                self._sleep(self.retry.delay(attempt, retry_after, self._rng))
                continue
            return response

    def _call_json(self, call: _Call) -> Any:
        response = self._send(call)
        url = self._url(call.path)
        if response.is_error:
            raise self._http_error(response, call, url)
        return self._json(response, url)

    def _get(self, path: str, model: type[_M]) -> _M:
        call = _Call("GET", path)
        return self._model(model, self._call_json(call), self._url(path))

    # -- grading -------------------------------------------------------------------------------

    def grade(self, request: ItemInput, *, judge: JudgeInput = None) -> GradeResult:
        """Grade one response (``POST /v1/grade``).

        Args:
            request: The item, as a ``GradeRequest`` or a mapping of its fields.
            judge: Per-request judge selection (must be allow-listed by the service).

        Raises:
            ClientInputError: ``request`` or ``judge`` is invalid (before any request).
            ClientHTTPError: The service refused it (422 names the field).
        """
        call = self._grade_call(request, judge)
        return self._model(GradeResult, self._call_json(call), self._url(call.path))

    def grade_batch(
        self, items: Iterable[ItemInput], *, judge: JudgeInput = None
    ) -> list[BatchEntry]:
        """Grade a batch in one request (``POST /v1/grade/batch``); one entry per item, in order.

        A failing item does not fail the batch: its entry carries ``error`` instead of
        ``result``. The batch must not exceed the service's ``max_batch`` (default 256); use
        ``grade_many`` for any number of items.
        """
        call, size = self._batch_call(items, judge)
        url = self._url(call.path)
        entries = self._entries(self._call_json(call), url)
        _place(entries, 0, size, url)  # checks the answer covers each item exactly once
        return sorted(entries, key=lambda e: e.index)

    def _grade_chunk(self, start: int, chunk: list[GradeRequest], judge: JudgeInput) -> _Placed:
        call, size = self._batch_call(chunk, judge)
        url = self._url(call.path)
        return _place(self._entries(self._call_json(call), url), start, size, url)

    @overload
    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = ...,
        batch_size: int = ...,
        concurrency: int = ...,
        progress: bool = ...,
        return_exceptions: Literal[False] = ...,
    ) -> list[GradeResult]: ...

    @overload
    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = ...,
        batch_size: int = ...,
        concurrency: int = ...,
        progress: bool = ...,
        return_exceptions: Literal[True],
    ) -> list[GradeResult | ClientItemError]: ...

    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        concurrency: int = 4,
        progress: bool = True,
        return_exceptions: bool = False,
    ) -> list[GradeResult] | list[GradeResult | ClientItemError]:
        """Grade any number of items in batches, ``concurrency`` requests at a time.

        Items are read lazily, validated, and sent ``batch_size`` per request from a thread pool;
        a tqdm bar (on stderr) counts finished items. An item without an ``id`` gets its 1-based
        position in ``items`` as id.

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
        results: list[GradeResult | ClientItemError | None] = []
        for position, outcome in self.grade_stream(
            items, judge=judge, batch_size=batch_size, concurrency=concurrency, progress=progress
        ):
            if isinstance(outcome, ClientItemError) and not return_exceptions:
                raise outcome
            if position >= len(results):
                results.extend([None] * (position + 1 - len(results)))
            results[position] = outcome
        if any(r is None for r in results):  # pragma: no cover - guarded by _place
            raise ClientResponseError("some items got no answer", url=self._url("/v1/grade/batch"))
        return results  # type: ignore[return-value]

    def grade_stream(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        concurrency: int = 4,
        progress: bool = True,
    ) -> Iterator[tuple[int, GradeResult | ClientItemError]]:
        """Grade any number of items, yielding each ``(position, outcome)`` as its batch ends.

        For callers that must keep what is graded when a later batch fails (the CLI writes each
        result as it arrives). An item the service failed comes as a ``ClientItemError``, never
        raised, so one bad item is that item's problem. Arguments as for ``grade_many``.

        Raises:
            ClientInputError: An item is invalid; nothing more is sent once it is found.
            JudgeClientError: A batch request failed after retries; pending batches are
                cancelled (what was yielded before stands).
        """
        _check_many_args(batch_size, concurrency)
        unscored = 0
        with (
            _progress_bar(_total(items), progress, "grading") as bar,
            ThreadPoolExecutor(concurrency, thread_name_prefix="bonusjudge") as pool,
        ):
            pending: set[Future[_Placed]] = set()

            def collect(done: set[Future[_Placed]]) -> list[tuple[int, Any]]:
                nonlocal unscored
                out: list[tuple[int, Any]] = []
                for future in done:
                    placed = future.result()  # re-raises the batch's error
                    for position, outcome in placed:
                        if isinstance(outcome, GradeResult) and outcome.status != "scored":
                            unscored += 1
                        out.append((position, outcome))
                    bar.update(len(placed))
                    if unscored:
                        bar.set_postfix(unscored=unscored, refresh=False)
                return out

            try:
                for start, chunk in _chunks(items, batch_size):
                    while len(pending) >= concurrency:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        yield from collect(done)
                    pending.add(pool.submit(self._grade_chunk, start, chunk, judge))
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    yield from collect(done)
            except BaseException:
                # Batches not started yet are dropped; running ones finish (threads cannot be
                # interrupted) and their answers are discarded.
                for future in pending:
                    future.cancel()
                raise

    def extract_points(
        self, request: ExtractRequest | Mapping[str, Any], *, judge: JudgeInput = None
    ) -> ExtractResult:
        """Split a reference answer into bonus points (``POST /v1/bonus-points``)."""
        call = self._extract_call(request, judge)
        return self._model(ExtractResult, self._call_json(call), self._url(call.path))

    def metrics(
        self,
        pairs: Iterable[MetricPair | Mapping[str, Any] | tuple[str, str]],
        *,
        metrics: Sequence[Literal["rouge_l", "bertscore"]] | None = None,
        encoder: str | None = None,
    ) -> list[MetricsEntry]:
        """ROUGE-L and/or BERTScore of (response, reference) pairs, no judge (``POST /v1/metrics``).

        Args:
            pairs: ``MetricPair``s, mappings of their fields, or ``(response, reference)`` tuples.
            metrics: Which metrics; default both.
            encoder: BERTScore encoder; default the service's.

        Returns:
            One ``MetricsEntry`` per pair, in order.
        """
        call, size = self._metrics_call(pairs, metrics, encoder)
        url = self._url(call.path)
        data = self._field_list(self._call_json(call), "results", url)
        if len(data) != size:
            raise ClientResponseError(
                f"{url} returned {len(data)} results for {size} pairs", url=url, field="results"
            )
        return [self._model(MetricsEntry, r, url, f"results.{i}") for i, r in enumerate(data)]

    # -- jobs ----------------------------------------------------------------------------------

    def submit_job(
        self,
        items: Iterable[ItemInput] | None = None,
        *,
        file: str | os.PathLike[str] | bytes | None = None,
        judge: JudgeInput = None,
    ) -> JobStatus:
        """Start a grading job (``POST /v1/jobs``); returns its status (202).

        Give ``items`` (sent as JSON; mappings go as they are, so CharToM-format lines work) or
        ``file``, a JSONL path or its bytes, sent as an ``application/x-ndjson`` body (as a
        multipart upload when ``judge`` is given, since a raw body cannot carry it). Bad lines do
        not fail the job: they are counted in ``invalid`` and reported in ``results``.

        Never resent once the request may have reached the service (it would start a second
        job); only a failure to connect is retried.
        """
        call = self._job_call(items, file, judge)
        return self._model(JobStatus, self._call_json(call), self._url(call.path))

    def job(self, job_id: str) -> JobStatus:
        """The job's status (``GET /v1/jobs/{id}``); unknown id -> ``ClientHTTPError`` 404."""
        return self._get(_job_path(job_id), JobStatus)

    def jobs(
        self, *, status: JobState | None = None, limit: int = 50, offset: int = 0
    ) -> JobList:
        """One page of the caller's grading jobs, newest first (``GET /v1/jobs``).

        Args:
            status: Only jobs in this status.
            limit: Jobs per page (1 to 500).
            offset: Skip the N newest first: the previous page's ``next_offset`` (None on the
                last page).
        """
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status is not None:
            params["status"] = status
        call = _Call("GET", "/v1/jobs", params=params)
        return self._model(JobList, self._call_json(call), self._url(call.path))

    def wait(
        self,
        job_id: str,
        *,
        poll_interval: float = 1.0,
        timeout: float | None = None,
        progress: bool = False,
        kind: JobKind = "grade",
    ) -> JobStatus:
        """Poll the job until it is done, cancelled or failed; returns the final status.

        A failed or cancelled job is returned, not raised: check ``status``.

        Args:
            job_id: The job.
            poll_interval: Seconds between polls.
            timeout: Give up after this many seconds (``ClientTimeout``); None waits forever.
            progress: Show a progress bar of finished items.
            kind: ``grade`` for a grading job, ``mcq`` for a multiple-choice job.
        """
        self._check_poll(poll_interval, timeout)
        path = _kind_path(job_id, kind)
        deadline = None if timeout is None else self._clock() + timeout
        with _progress_bar(None, progress, f"job {job_id}") as bar:
            while True:
                status = self._get(path, JobStatus)
                bar.total = status.total
                bar.update(status.done - bar.n)
                if status.status in TERMINAL_STATUSES:
                    return status
                now = self._clock()
                if deadline is not None and now >= deadline:
                    raise ClientTimeout(
                        f"job {job_id} not finished after {timeout} s: {status.status}, "
                        f"{status.done}/{status.total} items done",
                        url=self._url(path),
                    )
                delay = poll_interval if deadline is None else min(poll_interval, deadline - now)
                self._sleep(delay)

    def results(self, job_id: str, *, offset: int = 0) -> Iterator[BatchEntry]:
        """Stream the job's finished lines (``GET /v1/jobs/{id}/results``, NDJSON).

        Partial while the job runs. If the connection breaks mid-stream, the stream resumes
        after the last line received (``?offset=``), so no line is lost or repeated.

        Args:
            job_id: The job.
            offset: Skip the first ``offset`` finished lines.
        """
        if offset < 0:
            raise ClientInputError("offset must be >= 0", field="offset")
        path = _job_path(job_id) + "/results"
        return self._stream_results(path, offset)

    def _stream_results(self, path: str, offset: int) -> Iterator[BatchEntry]:
        return self._stream_lines(path, offset, BatchEntry)

    def _stream_lines(self, path: str, offset: int, model: type[_M]) -> Iterator[_M]:
        url = self._url(path)
        received = 0
        attempt = 0
        while True:
            attempt += 1
            call = _Call("GET", path, params={"offset": offset + received}, accept=_NDJSON)
            before = received
            try:
                with self._http.stream(
                    "GET",
                    url,
                    params=call.params,
                    headers=self._headers(call),
                    **self._timeout_kwargs(),
                ) as response:
                    if response.status_code in self.retry.statuses and (
                        attempt <= self.retry.retries
                    ):
                        retry_after = parse_retry_after(response.headers.get("Retry-After"))
                        self._sleep(self.retry.delay(attempt, retry_after, self._rng))
                        continue
                    if response.is_error:
                        response.read()
                        raise self._http_error(response, call, url)
                    for line in response.iter_lines():
                        if not line.strip():
                            continue
                        entry = self._line_model(line, offset + received + 1, url, model)
                        received += 1
                        yield entry
                return
            except httpx.TransportError as exc:
                if received > before:
                    attempt = 0  # progress was made: the retry allowance starts afresh
                if attempt < self.retry.retries + 1 and _may_retry_transport(exc, call):
                    self._sleep(self.retry.delay(max(attempt, 1), rng=self._rng))
                    continue
                raise self._transport_error(exc, call, max(attempt, 1)) from exc

    def summary(self, job_id: str) -> Summary:
        """Aggregates of the job's finished items so far (``GET /v1/jobs/{id}/summary``)."""
        return self._get(_job_path(job_id) + "/summary", Summary)

    def cancel(self, job_id: str) -> JobStatus:
        """Cancel the job (``DELETE /v1/jobs/{id}``); finished results are kept."""
        path = _job_path(job_id)
        call = _Call("DELETE", path)
        return self._model(JobStatus, self._call_json(call), self._url(path))

    def retry_unscored(self, job_id: str) -> JobStatus:
        """Grade a finished job's unscored items again (``POST /v1/jobs/{id}/retry-unscored``).

        Their results leave the stream until graded again: ``wait`` for the job, then read
        ``results`` from offset 0.
        """
        path = _job_path(job_id) + "/retry-unscored"
        call = _Call("POST", path, idempotent=False)
        return self._model(JobStatus, self._call_json(call), self._url(path))

    # -- multiple choice -----------------------------------------------------------------------

    def mcq(
        self,
        items: Iterable[McqInput],
        *,
        aggregate: Literal["mean", "majority"] = "mean",
        group_by: Sequence[str] | None = None,
        llm_extract: bool = False,
        fuzzy_threshold: float | None = None,
    ) -> McqResponse:
        """Score multiple-choice answers in one call (``POST /v1/mcq``).

        A bad item does not fail the call: its entry carries ``error`` (and it is listed in the
        summary's ``bad_lines``); the others are scored.

        Args:
            items: ``McqItem``s or mappings of their fields (up to the service's
                ``max_job_items``).
            aggregate: How permuted runs of a question combine: ``mean`` or ``majority``.
            group_by: Breakdown fields; default task, ability, tom_dimension, language, tags.
            llm_extract: Let the service's judge read the answers the rules cannot parse.
            fuzzy_threshold: rapidfuzz threshold (0-100; 101 disables); default the service's.

        Returns:
            One entry per item, in input order, and the summary.
        """
        call, size = self._mcq_call(items, aggregate, group_by, llm_extract, fuzzy_threshold)
        url = self._url(call.path)
        return self._mcq_response(self._call_json(call), url, size)

    def submit_mcq_job(
        self,
        items: Iterable[McqInput] | None = None,
        *,
        file: str | os.PathLike[str] | bytes | None = None,
        aggregate: Literal["mean", "majority"] = "mean",
        group_by: Sequence[str] | None = None,
        llm_extract: bool = False,
        fuzzy_threshold: float | None = None,
    ) -> JobStatus:
        """Start a multiple-choice job (``POST /v1/mcq/jobs``); returns its status (202).

        Give ``items`` (sent as JSON) or ``file`` (a JSONL path or its bytes, sent as an
        ``application/x-ndjson`` body with the options as query parameters). Follow it with
        ``wait(job_id, kind="mcq")``, ``mcq_results`` and ``mcq_summary``. Never resent once the
        request may have reached the service.
        """
        call = self._mcq_job_call(items, file, aggregate, group_by, llm_extract, fuzzy_threshold)
        return self._model(JobStatus, self._call_json(call), self._url(call.path))

    def mcq_job(self, job_id: str) -> JobStatus:
        """A multiple-choice job's status (``GET /v1/mcq/jobs/{id}``)."""
        return self._get(_mcq_job_path(job_id), JobStatus)

    def mcq_results(self, job_id: str, *, offset: int = 0) -> Iterator[McqEntry]:
        """Stream a multiple-choice job's finished lines (NDJSON); resumes like ``results``."""
        if offset < 0:
            raise ClientInputError("offset must be >= 0", field="offset")
        return self._stream_lines(_mcq_job_path(job_id) + "/results", offset, McqEntry)

    def mcq_summary(self, job_id: str) -> McqSummary:
        """Summary of a multiple-choice job's results so far, with its skipped lines."""
        return self._get(_mcq_job_path(job_id) + "/summary", McqSummary)

    def cancel_mcq_job(self, job_id: str) -> JobStatus:
        """Cancel a multiple-choice job (``DELETE /v1/mcq/jobs/{id}``)."""
        path = _mcq_job_path(job_id)
        return self._model(JobStatus, self._call_json(_Call("DELETE", path)), self._url(path))

    # -- calibration ---------------------------------------------------------------------------

    def calibrate(
        self,
        dataset: str | None = None,
        *,
        items: Iterable[Mapping[str, Any]] | None = None,
        name: str | None = None,
        scale: str | None = None,
        judges: Sequence[str] | None = None,
        metrics: Sequence[CalibrationMetric] | None = None,
        limit: int | None = None,
        seed: int = 0,
        resamples: int = 1000,
        retest: bool = False,
    ) -> CalibrationJob:
        """Start a calibration run (``POST /v1/calibrate``); returns its job (202).

        Args:
            dataset: A shared set's name or a bundled one (``example``...): the body's ``set``.
            items: Instead of ``dataset``, an uploaded set (calibration or CharToM lines).
            name: Name of an uploaded set in the report.
            scale: Score scale of an uploaded set whose lines lack ``score_scale``.
            judges: Judge models to calibrate (allow-listed); default the service's judge.
            metrics: Any of rouge_l, bertscore, coverage; default all three.
            limit: Use only the first ``limit`` items.
            seed: Seed of the bootstraps and folds.
            resamples: Bootstrap resamples (100 to 2000).
            retest: Grade each judge twice with the cache off (test-retest).
        """
        call = self._calibrate_call(
            dataset, items, name=name, scale=scale, judges=judges, metrics=metrics, limit=limit,
            seed=seed, resamples=resamples, retest=retest,
        )
        return self._model(CalibrationJob, self._call_json(call), self._url(call.path))

    def calibration_status(self, job_id: str) -> CalibrationJob:
        """A calibration run's status (``GET /v1/calibrate/{id}``)."""
        return self._get(_id_path("/v1/calibrate", job_id, "job_id"), CalibrationJob)

    def wait_calibration(
        self, job_id: str, *, poll_interval: float = 2.0, timeout: float | None = None
    ) -> CalibrationJob:
        """Poll a calibration run until it ends; a failed run is returned, not raised."""
        self._check_poll(poll_interval, timeout)
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            status = self.calibration_status(job_id)
            if status.status in TERMINAL_STATUSES:
                return status
            now = self._clock()
            if deadline is not None and now >= deadline:
                raise ClientTimeout(
                    f"calibration {job_id} not finished after {timeout} s: {status.status}",
                    url=self._url(_id_path("/v1/calibrate", job_id, "job_id")),
                )
            self._sleep(poll_interval if deadline is None else min(poll_interval, deadline - now))

    def reports(self) -> list[ReportInfo]:
        """The caller's stored calibration reports, newest first (``GET /v1/reports``)."""
        return self._get("/v1/reports", ReportList).reports

    def report(self, report_id: str) -> dict[str, Any]:
        """A report's ``report.json`` (``GET /v1/reports/{id}``)."""
        path = _id_path("/v1/reports", report_id, "report_id")
        return self._report_dict(self._call_json(_Call("GET", path)), self._url(path))

    def report_markdown(self, report_id: str) -> str:
        """A report as Markdown (``GET /v1/reports/{id}/report.md``)."""
        return self._raw(_id_path("/v1/reports", report_id, "report_id") + "/report.md",
                         "text/markdown").text

    def report_file(self, report_id: str, name: str) -> bytes:
        """A file of a report (a PNG plot, ``mappings/<metric>.json``...) as bytes."""
        if not isinstance(name, str) or not name.strip():
            raise ClientInputError("name must be a non-empty string", field="name")
        path = _id_path("/v1/reports", report_id, "report_id") + "/files/" + quote(name, safe="/")
        return self._raw(path, "*/*").content

    def _raw(self, path: str, accept: str) -> httpx.Response:
        call = _Call("GET", path, accept=accept)
        response = self._send(call)
        if response.is_error:
            raise self._http_error(response, call, self._url(path))
        return response

    # -- service -------------------------------------------------------------------------------

    def rubrics(self) -> RubricList:
        """The service's rubric library (``GET /v1/rubrics``)."""
        return self._get("/v1/rubrics", RubricList)

    def rubric(self, rubric_id: str) -> RubricDetail:
        """One rubric with its prompts (``GET /v1/rubrics/{id}``); unknown -> 404."""
        if not rubric_id or not rubric_id.strip():
            raise ClientInputError("rubric_id must be a non-empty string", field="rubric_id")
        return self._get(f"/v1/rubrics/{quote(rubric_id, safe='')}", RubricDetail)

    def health(self) -> Health:
        """Liveness (``GET /healthz``, no auth)."""
        return self._get("/healthz", Health)

    def ready(self) -> Readiness:
        """Readiness (``GET /readyz``); a 503 "not ready" answer is returned, not raised."""
        call = _Call("GET", "/readyz", retry_statuses=False)
        url = self._url(call.path)
        return self._readiness(self._send(call), call, url)

    def prometheus(self) -> str:
        """The service's Prometheus metrics text (``GET /metrics``)."""
        call = _Call("GET", "/metrics", accept="text/plain")
        response = self._send(call)
        if response.is_error:
            raise self._http_error(response, call, self._url(call.path))
        return response.text


# -- async client -------------------------------------------------------------------------------


async def _async_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


class AsyncJudgeClient(_Base):
    """Asynchronous client of a bonusjudge service; the same methods as ``JudgeClient``.

    Args:
        base_url: Service URL; default the injected client's base URL if it has one, else
            ``$BONUSJUDGE_URL``, else ``http://127.0.0.1:8000``. An explicit value always wins.
        api_key: API key sent as ``Authorization: Bearer``; default ``$BONUSJUDGE_API_KEY``.
        http_client: An ``httpx.AsyncClient`` to use; the caller keeps ownership.
        transport: A transport for the client created here (e.g.
            ``httpx.ASGITransport(app=app)`` to run the service in-process).
        timeout: Per-request timeout; default 300 s (10 s to connect) for the client created
            here, the injected client's own timeouts otherwise.
        retry: Retry policy; default ``RetryPolicy()``.
        sleep: Coroutine function used to wait between retries and polls.
        clock: Monotonic clock used by ``wait(timeout=...)``.
        rng: Random source of the backoff jitter.
    """

    def __init__(
        self,
        base_url: str | None = None,
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
        if http_client is not None and transport is not None:
            raise ClientInputError("give http_client or transport, not both", field="transport")
        client_base = str(http_client.base_url) if http_client is not None else None
        super().__init__(base_url, api_key, client_base or None, timeout, retry, rng)
        self._owns_client = http_client is None
        self._http: AsyncHTTPClient = http_client or httpx.AsyncClient(
            transport=transport, timeout=DEFAULT_TIMEOUT if timeout is None else timeout
        )
        self._sleep = sleep
        self._clock = clock

    # -- plumbing ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it (an injected one stays open)."""
        if self._owns_client:
            await self._http.aclose()

    async def close(self) -> None:
        """Alias of ``aclose()``."""
        await self.aclose()

    async def __aenter__(self) -> AsyncJudgeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send(self, call: _Call) -> httpx.Response:
        """Send ``call``, retrying as its idempotency allows; returns the final response."""
        url = self._url(call.path)
        attempt = 0
        while True:
            attempt += 1
            try:
                response: httpx.Response = await self._http.request(
                    call.method,
                    url,
                    content=call.content,
                    data=call.form,
                    files=call.files,
                    params=call.params,
                    headers=self._headers(call),
                    **self._timeout_kwargs(),
                )
            except httpx.TransportError as exc:
                if attempt <= self.retry.retries and _may_retry_transport(exc, call):
                    await self._sleep(self.retry.delay(attempt, rng=self._rng))
                    continue
                raise self._transport_error(exc, call, attempt) from exc
            if (
                response.status_code in self.retry.statuses
                and call.idempotent
                and call.retry_statuses
                and attempt <= self.retry.retries
            ):
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                await response.aclose()
                await self._sleep(self.retry.delay(attempt, retry_after, self._rng))
                continue
            return response

    async def _call_json(self, call: _Call) -> Any:
        response = await self._send(call)
        url = self._url(call.path)
        if response.is_error:
            raise self._http_error(response, call, url)
        return self._json(response, url)

    async def _get(self, path: str, model: type[_M]) -> _M:
        call = _Call("GET", path)
        return self._model(model, await self._call_json(call), self._url(path))

    # -- grading -------------------------------------------------------------------------------

    async def grade(self, request: ItemInput, *, judge: JudgeInput = None) -> GradeResult:
        """Grade one response (``POST /v1/grade``); see ``JudgeClient.grade``."""
        call = self._grade_call(request, judge)
        return self._model(GradeResult, await self._call_json(call), self._url(call.path))

    async def grade_batch(
        self, items: Iterable[ItemInput], *, judge: JudgeInput = None
    ) -> list[BatchEntry]:
        """Grade a batch in one request; see ``JudgeClient.grade_batch``."""
        call, size = self._batch_call(items, judge)
        url = self._url(call.path)
        entries = self._entries(await self._call_json(call), url)
        _place(entries, 0, size, url)
        return sorted(entries, key=lambda e: e.index)

    async def _grade_chunk(
        self, start: int, chunk: list[GradeRequest], judge: JudgeInput
    ) -> _Placed:
        call, size = self._batch_call(chunk, judge)
        url = self._url(call.path)
        return _place(self._entries(await self._call_json(call), url), start, size, url)

    @overload
    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = ...,
        batch_size: int = ...,
        concurrency: int = ...,
        progress: bool = ...,
        ordered: bool = ...,
        return_exceptions: Literal[False] = ...,
    ) -> AsyncIterator[GradeResult]: ...

    @overload
    def grade_many(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = ...,
        batch_size: int = ...,
        concurrency: int = ...,
        progress: bool = ...,
        ordered: bool = ...,
        return_exceptions: Literal[True],
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

        At most ``concurrency`` batch requests are in flight, so memory stays bounded whatever
        the number of items. Breaking out of the loop cancels the batches in flight.

        Args:
            items: The items, as ``GradeRequest``s or mappings of their fields.
            judge: Per-request judge selection applied to every item.
            batch_size: Items per request (at most the service's ``max_batch``).
            concurrency: Batch requests in flight at once.
            progress: Show a progress bar.
            ordered: Yield in input order (default); False yields each batch as soon as it is
                done, which keeps every request slot busy when batch times vary.
            return_exceptions: Yield a ``ClientItemError`` in place of each failed item instead
                of raising the first one.

        Yields:
            One result per item (``GradeResult.id`` identifies it when ``ordered`` is False).

        Raises:
            ClientInputError: An item is invalid (its index and field are named).
            ClientItemError: The service failed an item (unless ``return_exceptions``).
            JudgeClientError: A batch request failed after retries.
        """
        _check_many_args(batch_size, concurrency)
        in_flight: deque[asyncio.Task[_Placed]] = deque()
        unscored = 0
        with _progress_bar(_total(items), progress, "grading") as bar:
            try:
                chunks = _chunks(items, batch_size)
                exhausted = False
                while True:
                    while not exhausted and len(in_flight) < concurrency:
                        nxt = next(chunks, None)
                        if nxt is None:
                            exhausted = True
                            break
                        in_flight.append(asyncio.create_task(self._grade_chunk(*nxt, judge)))
                    if not in_flight:
                        return
                    if ordered:
                        finished = [in_flight.popleft()]
                        await asyncio.wait(finished)
                    else:
                        done, _ = await asyncio.wait(in_flight, return_when=FIRST_COMPLETED)
                        finished = [t for t in in_flight if t in done]
                        for task in finished:
                            in_flight.remove(task)
                    for task in finished:
                        placed = task.result()
                        for _, outcome in placed:
                            if isinstance(outcome, ClientItemError) and not return_exceptions:
                                raise outcome
                            if isinstance(outcome, GradeResult) and outcome.status != "scored":
                                unscored += 1
                            bar.update(1)
                            yield outcome
                        if unscored:
                            bar.set_postfix(unscored=unscored, refresh=False)
            finally:
                for task in in_flight:
                    task.cancel()
                if in_flight:
                    await asyncio.gather(*in_flight, return_exceptions=True)

    async def extract_points(
        self, request: ExtractRequest | Mapping[str, Any], *, judge: JudgeInput = None
    ) -> ExtractResult:
        """Split a reference answer into bonus points (``POST /v1/bonus-points``)."""
        call = self._extract_call(request, judge)
        return self._model(ExtractResult, await self._call_json(call), self._url(call.path))

    async def metrics(
        self,
        pairs: Iterable[MetricPair | Mapping[str, Any] | tuple[str, str]],
        *,
        metrics: Sequence[Literal["rouge_l", "bertscore"]] | None = None,
        encoder: str | None = None,
    ) -> list[MetricsEntry]:
        """ROUGE-L and/or BERTScore of pairs (``POST /v1/metrics``); see ``JudgeClient.metrics``."""
        call, size = self._metrics_call(pairs, metrics, encoder)
        url = self._url(call.path)
        data = self._field_list(await self._call_json(call), "results", url)
        if len(data) != size:
            raise ClientResponseError(
                f"{url} returned {len(data)} results for {size} pairs", url=url, field="results"
            )
        return [self._model(MetricsEntry, r, url, f"results.{i}") for i, r in enumerate(data)]

    # -- jobs ----------------------------------------------------------------------------------

    async def submit_job(
        self,
        items: Iterable[ItemInput] | None = None,
        *,
        file: str | os.PathLike[str] | bytes | None = None,
        judge: JudgeInput = None,
    ) -> JobStatus:
        """Start a grading job (``POST /v1/jobs``); see ``JudgeClient.submit_job``."""
        call = self._job_call(items, file, judge)
        return self._model(JobStatus, await self._call_json(call), self._url(call.path))

    async def job(self, job_id: str) -> JobStatus:
        """The job's status (``GET /v1/jobs/{id}``)."""
        return await self._get(_job_path(job_id), JobStatus)

    async def jobs(
        self, *, status: JobState | None = None, limit: int = 50, offset: int = 0
    ) -> JobList:
        """One page of the caller's grading jobs (``GET /v1/jobs``); see ``JudgeClient.jobs``."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status is not None:
            params["status"] = status
        call = _Call("GET", "/v1/jobs", params=params)
        return self._model(JobList, await self._call_json(call), self._url(call.path))

    async def wait(
        self,
        job_id: str,
        *,
        poll_interval: float = 1.0,
        timeout: float | None = None,
        progress: bool = False,
        kind: JobKind = "grade",
    ) -> JobStatus:
        """Poll until the job is done, cancelled or failed; see ``JudgeClient.wait``."""
        self._check_poll(poll_interval, timeout)
        path = _kind_path(job_id, kind)
        deadline = None if timeout is None else self._clock() + timeout
        with _progress_bar(None, progress, f"job {job_id}") as bar:
            while True:
                status = await self._get(path, JobStatus)
                bar.total = status.total
                bar.update(status.done - bar.n)
                if status.status in TERMINAL_STATUSES:
                    return status
                now = self._clock()
                if deadline is not None and now >= deadline:
                    raise ClientTimeout(
                        f"job {job_id} not finished after {timeout} s: {status.status}, "
                        f"{status.done}/{status.total} items done",
                        url=self._url(path),
                    )
                delay = poll_interval if deadline is None else min(poll_interval, deadline - now)
                await self._sleep(delay)

    def results(self, job_id: str, *, offset: int = 0) -> AsyncIterator[BatchEntry]:
        """Stream the job's finished lines (NDJSON); see ``JudgeClient.results``.

        Use as ``async for entry in client.results(job_id)``.
        """
        if offset < 0:
            raise ClientInputError("offset must be >= 0", field="offset")
        return self._stream_results(_job_path(job_id) + "/results", offset)

    def _stream_results(self, path: str, offset: int) -> AsyncIterator[BatchEntry]:
        return self._stream_lines(path, offset, BatchEntry)

    async def _stream_lines(self, path: str, offset: int, model: type[_M]) -> AsyncIterator[_M]:
        url = self._url(path)
        received = 0
        attempt = 0
        while True:
            attempt += 1
            call = _Call("GET", path, params={"offset": offset + received}, accept=_NDJSON)
            before = received
            try:
                async with self._http.stream(
                    "GET",
                    url,
                    params=call.params,
                    headers=self._headers(call),
                    **self._timeout_kwargs(),
                ) as response:
                    if response.status_code in self.retry.statuses and (
                        attempt <= self.retry.retries
                    ):
                        retry_after = parse_retry_after(response.headers.get("Retry-After"))
                        await self._sleep(self.retry.delay(attempt, retry_after, self._rng))
                        continue
                    if response.is_error:
                        await response.aread()
                        raise self._http_error(response, call, url)
                    async for line in response.aiter_lines():
                        if not line.strip():
                            continue
                        entry = self._line_model(line, offset + received + 1, url, model)
                        received += 1
                        yield entry
                return
            except httpx.TransportError as exc:
                if received > before:
                    attempt = 0
                if attempt < self.retry.retries + 1 and _may_retry_transport(exc, call):
                    await self._sleep(self.retry.delay(max(attempt, 1), rng=self._rng))
                    continue
                raise self._transport_error(exc, call, max(attempt, 1)) from exc

    async def summary(self, job_id: str) -> Summary:
        """Aggregates of the job's finished items so far (``GET /v1/jobs/{id}/summary``)."""
        return await self._get(_job_path(job_id) + "/summary", Summary)

    async def cancel(self, job_id: str) -> JobStatus:
        """Cancel the job (``DELETE /v1/jobs/{id}``); finished results are kept."""
        path = _job_path(job_id)
        call = _Call("DELETE", path)
        return self._model(JobStatus, await self._call_json(call), self._url(path))

    async def retry_unscored(self, job_id: str) -> JobStatus:
        """Grade a finished job's unscored items again (``POST /v1/jobs/{id}/retry-unscored``).

        Their results leave the stream until graded again: ``wait`` for the job, then read
        ``results`` from offset 0.
        """
        path = _job_path(job_id) + "/retry-unscored"
        call = _Call("POST", path, idempotent=False)
        return self._model(JobStatus, await self._call_json(call), self._url(path))

    # -- multiple choice -----------------------------------------------------------------------

    async def mcq(
        self,
        items: Iterable[McqInput],
        *,
        aggregate: Literal["mean", "majority"] = "mean",
        group_by: Sequence[str] | None = None,
        llm_extract: bool = False,
        fuzzy_threshold: float | None = None,
    ) -> McqResponse:
        """Score multiple-choice answers in one call; see ``JudgeClient.mcq``."""
        call, size = self._mcq_call(items, aggregate, group_by, llm_extract, fuzzy_threshold)
        url = self._url(call.path)
        return self._mcq_response(await self._call_json(call), url, size)

    async def submit_mcq_job(
        self,
        items: Iterable[McqInput] | None = None,
        *,
        file: str | os.PathLike[str] | bytes | None = None,
        aggregate: Literal["mean", "majority"] = "mean",
        group_by: Sequence[str] | None = None,
        llm_extract: bool = False,
        fuzzy_threshold: float | None = None,
    ) -> JobStatus:
        """Start a multiple-choice job; see ``JudgeClient.submit_mcq_job``."""
        call = self._mcq_job_call(items, file, aggregate, group_by, llm_extract, fuzzy_threshold)
        return self._model(JobStatus, await self._call_json(call), self._url(call.path))

    async def mcq_job(self, job_id: str) -> JobStatus:
        """A multiple-choice job's status (``GET /v1/mcq/jobs/{id}``)."""
        return await self._get(_mcq_job_path(job_id), JobStatus)

    def mcq_results(self, job_id: str, *, offset: int = 0) -> AsyncIterator[McqEntry]:
        """Stream a multiple-choice job's finished lines; use with ``async for``."""
        if offset < 0:
            raise ClientInputError("offset must be >= 0", field="offset")
        return self._stream_lines(_mcq_job_path(job_id) + "/results", offset, McqEntry)

    async def mcq_summary(self, job_id: str) -> McqSummary:
        """Summary of a multiple-choice job's results so far, with its skipped lines."""
        return await self._get(_mcq_job_path(job_id) + "/summary", McqSummary)

    async def cancel_mcq_job(self, job_id: str) -> JobStatus:
        """Cancel a multiple-choice job (``DELETE /v1/mcq/jobs/{id}``)."""
        path = _mcq_job_path(job_id)
        data = await self._call_json(_Call("DELETE", path))
        return self._model(JobStatus, data, self._url(path))

    # -- calibration ---------------------------------------------------------------------------

    async def calibrate(
        self,
        dataset: str | None = None,
        *,
        items: Iterable[Mapping[str, Any]] | None = None,
        name: str | None = None,
        scale: str | None = None,
        judges: Sequence[str] | None = None,
        metrics: Sequence[CalibrationMetric] | None = None,
        limit: int | None = None,
        seed: int = 0,
        resamples: int = 1000,
        retest: bool = False,
    ) -> CalibrationJob:
        """Start a calibration run; see ``JudgeClient.calibrate``."""
        call = self._calibrate_call(
            dataset, items, name=name, scale=scale, judges=judges, metrics=metrics, limit=limit,
            seed=seed, resamples=resamples, retest=retest,
        )
        return self._model(CalibrationJob, await self._call_json(call), self._url(call.path))

    async def calibration_status(self, job_id: str) -> CalibrationJob:
        """A calibration run's status (``GET /v1/calibrate/{id}``)."""
        return await self._get(_id_path("/v1/calibrate", job_id, "job_id"), CalibrationJob)

    async def wait_calibration(
        self, job_id: str, *, poll_interval: float = 2.0, timeout: float | None = None
    ) -> CalibrationJob:
        """Poll a calibration run until it ends; see ``JudgeClient.wait_calibration``."""
        self._check_poll(poll_interval, timeout)
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            status = await self.calibration_status(job_id)
            if status.status in TERMINAL_STATUSES:
                return status
            now = self._clock()
            if deadline is not None and now >= deadline:
                raise ClientTimeout(
                    f"calibration {job_id} not finished after {timeout} s: {status.status}",
                    url=self._url(_id_path("/v1/calibrate", job_id, "job_id")),
                )
            await self._sleep(
                poll_interval if deadline is None else min(poll_interval, deadline - now)
            )

    async def reports(self) -> list[ReportInfo]:
        """The caller's stored calibration reports, newest first (``GET /v1/reports``)."""
        return (await self._get("/v1/reports", ReportList)).reports

    async def report(self, report_id: str) -> dict[str, Any]:
        """A report's ``report.json`` (``GET /v1/reports/{id}``)."""
        path = _id_path("/v1/reports", report_id, "report_id")
        return self._report_dict(await self._call_json(_Call("GET", path)), self._url(path))

    async def report_markdown(self, report_id: str) -> str:
        """A report as Markdown (``GET /v1/reports/{id}/report.md``)."""
        path = _id_path("/v1/reports", report_id, "report_id") + "/report.md"
        return (await self._raw(path, "text/markdown")).text

    async def report_file(self, report_id: str, name: str) -> bytes:
        """A file of a report (a PNG plot, ``mappings/<metric>.json``...) as bytes."""
        if not isinstance(name, str) or not name.strip():
            raise ClientInputError("name must be a non-empty string", field="name")
        path = _id_path("/v1/reports", report_id, "report_id") + "/files/" + quote(name, safe="/")
        return (await self._raw(path, "*/*")).content

    async def _raw(self, path: str, accept: str) -> httpx.Response:
        call = _Call("GET", path, accept=accept)
        response = await self._send(call)
        if response.is_error:
            raise self._http_error(response, call, self._url(path))
        return response

    # -- service -------------------------------------------------------------------------------

    async def rubrics(self) -> RubricList:
        """The service's rubric library (``GET /v1/rubrics``)."""
        return await self._get("/v1/rubrics", RubricList)

    async def rubric(self, rubric_id: str) -> RubricDetail:
        """One rubric with its prompts (``GET /v1/rubrics/{id}``); unknown -> 404."""
        if not rubric_id or not rubric_id.strip():
            raise ClientInputError("rubric_id must be a non-empty string", field="rubric_id")
        return await self._get(f"/v1/rubrics/{quote(rubric_id, safe='')}", RubricDetail)

    async def health(self) -> Health:
        """Liveness (``GET /healthz``, no auth)."""
        return await self._get("/healthz", Health)

    async def ready(self) -> Readiness:
        """Readiness (``GET /readyz``); a 503 "not ready" answer is returned, not raised."""
        call = _Call("GET", "/readyz", retry_statuses=False)
        return self._readiness(await self._send(call), call, self._url(call.path))

    async def prometheus(self) -> str:
        """The service's Prometheus metrics text (``GET /metrics``)."""
        call = _Call("GET", "/metrics", accept="text/plain")
        response = await self._send(call)
        if response.is_error:
            raise self._http_error(response, call, self._url(call.path))
        return response.text
