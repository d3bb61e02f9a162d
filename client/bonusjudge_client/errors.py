"""The client's error tree: every error ``JudgeClient`` and ``AsyncJudgeClient`` raise.

::

    JudgeClientError
    ├── ClientHTTPError        the service answered with an error status (status, type, field)
    ├── ClientConnectionError  the service could not be reached, or the connection broke
    ├── ClientTimeout          a request, or wait(), ran out of time
    ├── ClientResponseError    a success answer that does not match the contract
    ├── ClientItemError        one item of a batch failed (index, id, type, field)
    └── ClientInputError       an argument is invalid; raised before any request (field)
"""

from __future__ import annotations


class JudgeClientError(Exception):
    """Root of every error this client raises."""


class _Reported(JudgeClientError):
    """An error the service reported in its error shape: ``type``, ``message``, ``field``."""

    def __init__(self, text: str, *, type: str, message: str, field: str | None) -> None:
        super().__init__(text)
        self.type = type
        self.message = message
        self.field = field


def _where(field: str | None) -> str:
    return f" [field: {field}]" if field else ""


class ClientHTTPError(_Reported):
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
        super().__init__(
            f"{method} {url} -> HTTP {status} {type}: {message}{_where(field)}".strip(),
            type=type, message=message, field=field,
        )
        self.status = status
        self.method = method
        self.url = url
        self.retry_after = retry_after


class _Unanswered(JudgeClientError):
    """A request got no answer; ``url`` and ``attempts`` say which, and how often it was tried."""

    def __init__(self, message: str, *, url: str = "", attempts: int = 1) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts


class ClientConnectionError(_Unanswered):
    """The service could not be reached, or the connection broke mid-request.

    Attributes:
        url: URL of the request.
        attempts: Attempts made, retries included.
    """


class ClientTimeout(_Unanswered):
    """A request timed out, or ``wait()`` gave up before the job finished.

    Attributes:
        url: URL of the request (or of the job polled).
        attempts: Attempts made, retries included.
    """


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


class ClientItemError(_Reported):
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
        super().__init__(
            f"{label}: {type}: {message}{_where(field)}", type=type, message=message, field=field
        )
        self.index = index
        self.id = id
        self.line = line


class ClientInputError(JudgeClientError, ValueError):
    """An argument is invalid; raised before any request is sent.

    Attributes:
        field: The offending argument or item field (``items.3.question``).
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
