"""The one place where errors become HTTP responses.

Every error body has the same shape, ``{"error": {"type", "message", "field"}}`` (``ErrorBody``).
``ERROR_TABLE`` maps the engine's error tree (``core.errors``) and the service's own errors
(below) to a status and a type; the most specific class listed wins, by MRO. Request validation
becomes 422 naming the field (pydantic's location joined with dots, without the ``body`` prefix);
framework errors (unknown route, wrong method, body too large) keep their status in the same
shape; anything else is logged with its traceback and answered with a bare 500 that reveals
nothing.

Service errors::

    JudgeError
    └── ServiceError
        ├── NotFound               404  unknown job or rubric (or another key's job)
        ├── Unauthorized           401  missing or invalid API key
        ├── Forbidden              403  a valid key that may not do this (an API key on /metrics)
        ├── UnsupportedMediaType   415  a job upload in a format the service does not read
        ├── QuotaExceeded          429  a key's jobs, queued items or stored bytes, or its
        │   │                           synchronous work in flight, at their limit
        │   └── OverBudget         429  budget_exhausted: the key's judge calls reached its
        │                               day's budget (max_cost_per_key_usd)
        └── JudgeNotConfigured     503  the request needs an LLM judge and none is configured

Engine errors: InputError and RubricNotFound are the caller's (422); ConfigError, RubricInvalid
and CacheError are the service's (503); ProviderError and JudgeOutputError are the judge's (502).

Job store errors (SQLAlchemy's ``DBAPIError`` and pool ``TimeoutError``, from SQLite or
Postgres, and raw ``sqlite3`` errors) are answered 503 ``store_unavailable`` with
``Retry-After``: the request was not stored, and neither SQL nor a path nor a URL reaches the
client. The message says which cause it was (``store_cause``): the store locked by another
process, busy, full, out of reach, or failing otherwise. A value the store cannot keep
(``DataError``, e.g. a NUL character in a text field on Postgres) is the caller's: 422
``invalid_input``.
"""

from __future__ import annotations

import errno
import logging
import math
import sqlite3
from collections.abc import Mapping
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException

from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.schemas import ErrorBody, ErrorInfo
from core.errors import (
    CacheError,
    ConfigError,
    InputError,
    JudgeError,
    JudgeOutputError,
    ProviderError,
    RubricInvalid,
    RubricNotFound,
)

log = logging.getLogger("bonusjudge.api")


class ServiceError(JudgeError):
    """An error the service itself raises; ``ERROR_TABLE`` gives its status.

    Args:
        message: Human-readable explanation (must not contain secrets).
        field: The input field at fault, when there is one.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFound(ServiceError):
    """No such job or rubric (a job of another API key is reported the same way)."""


class Unauthorized(ServiceError):
    """The request lacks a valid API key."""


class Forbidden(ServiceError):
    """The key is valid, but not one that may do this (a tenant's API key on ``/metrics``)."""


class UnsupportedMediaType(ServiceError):
    """A body in a format the route does not read."""


class Unavailable(ServiceError):
    """The service cannot do this now, but will: answered 503 with ``Retry-After``.

    Args:
        message: What is unavailable and why.
        retry_after: Seconds after which trying again makes sense.
        field: The input field concerned, if any.
    """

    def __init__(self, message: str, *, retry_after: float, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after = retry_after


class ProviderOutage(Unavailable):
    """The judge provider keeps failing and its circuit breaker is open."""


class QuotaExceeded(ServiceError):
    """A per-key limit (jobs, queued items, stored bytes) would be exceeded: answered 429.

    Args:
        message: Which limit, and the key's current use of it.
        retry_after: Seconds after which trying again may succeed (``Retry-After``), or None
            when waiting alone does not help (stored bytes wait for retention).
        field: The input field concerned, if any.
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, field: str | None = None
    ) -> None:
        super().__init__(message, field=field)
        self.retry_after = retry_after


class OverBudget(QuotaExceeded):
    """The key's judge calls reached its budget (``max_cost_per_key_usd`` per UTC day): 429.

    The message names the limit and the key's spend today; ``Retry-After`` is the time to the
    next UTC midnight, when the day's budget opens again.
    """


class Conflict(ServiceError):
    """The request does not fit the resource's current state (e.g. a job still running)."""


class JudgeNotConfigured(ServiceError):
    """The request needs an LLM judge, and the service has none configured."""


class BodyTooLarge(HTTPException):
    """Raised while reading a request body that exceeds the limit.

    It is an ``HTTPException`` because FastAPI re-raises those from body parsing untouched (any
    other exception there becomes a generic 400).
    """

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds the limit of {limit} bytes")


class RefusedWhileReading(HTTPException):
    """A service error raised while a request body is read, answered as that error.

    A limit on bodies in flight (``api.limits``) can only refuse a chunked body as it streams
    in, from inside FastAPI's body parsing, which re-raises ``HTTPException`` untouched and turns
    anything else into a generic 400. This carries the real error through.

    Args:
        error: The error to answer with (a ``QuotaExceeded`` or an ``Unavailable``).
    """

    def __init__(self, error: ServiceError) -> None:
        super().__init__(classify(error)[0], str(error))
        self.error = error


ERROR_TABLE: dict[type[BaseException], tuple[int, str]] = {
    # The service's own errors.
    NotFound: (404, "not_found"),
    Unauthorized: (401, "unauthorized"),
    Forbidden: (403, "forbidden"),
    UnsupportedMediaType: (415, "unsupported_media_type"),
    Conflict: (409, "conflict"),
    QuotaExceeded: (429, "quota_exceeded"),
    OverBudget: (429, "budget_exhausted"),
    ProviderOutage: (503, "provider_outage"),
    Unavailable: (503, "unavailable"),
    JudgeNotConfigured: (503, "judge_not_configured"),
    # The engine's tree. A RubricNotFound here comes from a request's judge selection or
    # language, so it is bad input (422); the rubrics route turns its own miss into NotFound.
    RubricNotFound: (422, "unknown_rubric"),
    InputError: (422, "invalid_input"),
    # Request options are checked in api.deps.select_judge and raised as InputError; a
    # ConfigError that reaches here is the service's own configuration failing (a missing
    # model file, an encoder not available offline): not the caller's fault.
    ConfigError: (503, "service_misconfigured"),
    RubricInvalid: (503, "rubric_invalid"),
    CacheError: (503, "cache_unavailable"),
    ProviderError: (502, "provider_error"),
    JudgeOutputError: (502, "judge_output_error"),
    JudgeError: (500, "judge_error"),
}
"""Error class -> (HTTP status, error type). Looked up along the MRO: the most specific wins."""

_HTTP_TYPES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
}


def classify(exc: BaseException) -> tuple[int, str]:
    """The (status, type) of an error, from the first class of its MRO in ``ERROR_TABLE``."""
    for cls in type(exc).__mro__:
        if cls in ERROR_TABLE:
            return ERROR_TABLE[cls]
    return 500, "internal_error"


def error_response(
    status: int,
    type_: str,
    message: str,
    *,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A response with the uniform error body."""
    body = ErrorBody(error=ErrorInfo(type=type_, message=message, field=field))
    return JSONResponse(
        body.model_dump(), status_code=status, headers=dict(headers) if headers else None
    )


async def _judge_error(request: Request, exc: Exception) -> JSONResponse:
    status, _ = classify(exc)
    if status >= 500 and not isinstance(exc, ServiceError):
        # Engine errors that reach here mean the service is misconfigured or broken: keep the
        # details in the log, out of the body.
        log.error("%s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
    return judge_error_response(exc)


def judge_error_response(exc: Exception) -> JSONResponse:
    """The answer to an error of the tree: its status and type, ``Retry-After`` when it has one.

    For the handlers, and for middleware that refuses a request before the app sees it.
    """
    status, type_ = classify(exc)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    if isinstance(exc, Unavailable):
        headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
    if isinstance(exc, QuotaExceeded) and exc.retry_after is not None:
        headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
    field = getattr(exc, "field", None)
    return error_response(status, type_, str(exc), field=field, headers=headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    field, message = first_error(list(exc.errors()))
    return error_response(422, "invalid_input", message, field=field)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if isinstance(exc, RefusedWhileReading):
        return judge_error_response(exc.error)
    type_ = _HTTP_TYPES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else type_.replace("_", " ")
    return error_response(exc.status_code, type_, message, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal error; see the service log")


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that give every error the uniform body."""
    app.add_exception_handler(JudgeError, _judge_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(sqlite3.Error, _store_error)
    app.add_exception_handler(DBAPIError, _store_error)
    app.add_exception_handler(PoolTimeout, _store_error)
    app.add_exception_handler(DataError, _store_data_error)
    app.add_exception_handler(Exception, _internal_error)


STORE_RETRY_AFTER = 10
"""Seconds a caller is told to wait when the job store cannot be written (``Retry-After``)."""


StoreCause = Literal["locked", "busy", "full", "io", "unreachable", "failing"]
"""Why the job store failed: its lock held elsewhere, no connection or row lock free in time, no
room to write, a read or write its disk refused, the database out of reach, or another failure
of the driver."""

_SQLITE_CAUSES: dict[int, StoreCause] = {
    5: "locked",  # SQLITE_BUSY: another connection (process) holds the write lock
    6: "locked",  # SQLITE_LOCKED: a table locked by this process's other connection
    10: "io",  # SQLITE_IOERR: a write past the file-size limit (EFBIG) ends here, for one
    13: "full",  # SQLITE_FULL: no space left on its disk
    14: "unreachable",  # SQLITE_CANTOPEN: the file or its folder cannot be opened
}
"""SQLite's primary result codes (``sqlite_errorcode & 0xff``) and what they mean here."""

_POSTGRES_CAUSES: dict[str, StoreCause] = {
    "53100": "full",  # disk_full
    "53300": "busy",  # too_many_connections
    "55P03": "busy",  # lock_not_available
    "57014": "busy",  # query_canceled (a statement or lock timeout)
    "40001": "busy",  # serialization_failure
    "40P01": "busy",  # deadlock_detected
    "57P01": "unreachable",  # admin_shutdown
    "57P02": "unreachable",  # crash_shutdown
    "57P03": "unreachable",  # cannot_connect_now (starting up or shutting down)
}
"""Postgres SQLSTATEs and what they mean here (class 08, a connection exception, is out of
reach too, as is an error without a SQLSTATE: the connection failed before the server spoke)."""

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def store_cause(exc: BaseException) -> tuple[StoreCause, str]:
    """Why the job store failed, from the driver's error: the cause, and a sentence naming it.

    The sentence says which store (``sqlite`` or ``postgres``, from the driver) and what went
    wrong, never the database's path or URL, the SQL, or the driver's text (which names the
    host): it goes to callers who need no key (``/readyz``).
    """
    original: BaseException = getattr(exc, "orig", None) or exc
    module = type(original).__module__
    kind = "postgres" if module.startswith("psycopg") else "sqlite" if (
        isinstance(original, sqlite3.Error)) else ""
    store = f"the {kind} job store" if kind else "the job store"
    cause = _cause(exc, original, kind)
    sentence = {
        "locked": f"{store} is locked: another process or connection has held its write lock "
        "longer than a write waits for it (a backup, a second program, a long transaction)",
        "busy": f"{store} is busy: no connection or lock on its rows was free in time",
        "full": f"{store} is full: its disk (or the database's file-size limit) has no room to "
        "write",
        "io": f"{store} could not write its file (disk I/O error): its disk is full, at this "
        "process's file-size limit, or failing",
        "unreachable": f"{store} cannot be reached: its database refused or lost the connection, "
        "or is not running" if kind != "sqlite" else f"{store} cannot be opened",
        "failing": f"{store} cannot be written right now ({type(original).__name__})",
    }[cause]
    return cause, sentence


def _cause(exc: BaseException, original: BaseException, kind: str) -> StoreCause:
    """The cause of ``store_cause``: by error code, then by the driver's class and text."""
    if isinstance(exc, PoolTimeout):
        return "busy"  # every pooled connection in use for the pool's whole timeout
    code = getattr(original, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _SQLITE_CAUSES:
        return _SQLITE_CAUSES[code & 0xFF]
    sqlstate = getattr(original, "sqlstate", None)
    if isinstance(sqlstate, str):
        if sqlstate in _POSTGRES_CAUSES:
            return _POSTGRES_CAUSES[sqlstate]
        if sqlstate.startswith("08"):
            return "unreachable"
    chain: BaseException | None = original
    while chain is not None:
        if isinstance(chain, OSError) and chain.errno in _FULL_ERRNOS:
            return "full"
        chain = chain.__cause__ or chain.__context__
    text = str(original).lower()
    if "disk is full" in text or "no space left" in text:
        return "full"
    if "locked" in text or "busy" in text:
        return "locked"
    if kind == "postgres" and sqlstate is None and "OperationalError" in type(original).__name__:
        return "unreachable"  # no SQLSTATE: the server never answered (refused, lost, timed out)
    return "failing"


def _store_reason(exc: Exception) -> str:
    # The driver's own error, first line: SQLAlchemy's text would add the statement.
    original = getattr(exc, "orig", None) or exc
    lines = str(original).strip().splitlines()
    return f"{type(original).__name__}: {lines[0] if lines else ''}"


async def _store_error(request: Request, exc: Exception) -> JSONResponse:
    # A full disk, a long lock, an unreachable or exhausted database: temporary, and the
    # caller's request was not stored. The message says which (the code stays
    # store_unavailable); the database's path or URL and the driver's text stay in the log.
    cause, sentence = store_cause(exc)
    log.error("job store error (%s) on %s %s: %s", cause, request.method, request.url.path,
              _store_reason(exc))
    return error_response(
        503, "store_unavailable", f"{sentence}; try again later",
        headers={"Retry-After": str(STORE_RETRY_AFTER)},
    )


async def _store_data_error(request: Request, exc: Exception) -> JSONResponse:
    # The database refused a value of the request (Postgres keeps no NUL in text): retrying the
    # same request cannot help, so this is not a 503.
    log.warning("job store refused a value on %s %s: %s", request.method, request.url.path,
                _store_reason(exc))
    return error_response(
        422, "invalid_input",
        "the job store cannot keep a value of this request (e.g. a NUL character in a text "
        "field such as an item id)",
    )


ERROR_STATUSES: dict[int, str] = {
    401: "Missing or invalid API key (when keys are configured).",
    403: "A valid key that may not do this: an API key on an operator's route (`/metrics`).",
    404: "No such job, report or rubric (another key's job is not found either).",
    409: "The request does not fit the resource's current state (e.g. the job is still running).",
    413: "Request body larger than `max_body_bytes`.",
    415: "A body in a content type the route does not read; the message lists those it does.",
    422: "Invalid input; `error.field` names the field.",
    429: "A per-key quota (jobs, unfinished items, stored bytes) or limit on synchronous work "
    "in flight (items, body bytes) would be exceeded; the message names the limit and the key's "
    "use, `Retry-After` says when to try again.",
    500: "An unexpected error; the body says nothing more (the service log has the details).",
    503: "Not now: the judge provider is in an outage, the encoder is still loading, the job "
    "store cannot be written or the service holds its limit of synchronous request bodies (each "
    "with `Retry-After`); or the judge this request needs is not "
    "configured, or the service's own configuration fails (e.g. a model file is missing).",
}
"""Every error status the service documents, with what it means; its body is ``ErrorBody``."""


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries of these error statuses, each answering ``ErrorBody``.

    Args:
        statuses: Keys of ``ERROR_STATUSES``.
    """
    return {status: {"model": ErrorBody, "description": ERROR_STATUSES[status]}
            for status in statuses}


ERROR_RESPONSES = error_responses(401, 413, 422, 500, 503)
"""The error answers every ``/v1`` route may give (its router documents them)."""
