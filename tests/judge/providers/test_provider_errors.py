"""``map_provider_exception``: every exception the provider stack raises, mapped to an unscored
reason, whether retrying can help, the HTTP status and ``Retry-After``.

One row per exception kind (litellm's, openai's, httpx's and the builtins, constructed as those
libraries construct them) and HTTP status. A wrong row either retries what cannot succeed (a
4xx: a retry storm paid for) or gives up on what would (a 429 or 5xx: items lost to a blip).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import openai
import pytest
from litellm import exceptions as lx

from judge.providers.base import map_provider_exception, retry_after_seconds
from judge.providers.direct import error_for_answer

REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
KW: dict[str, str] = {"model": "openai/gpt-4o-mini", "llm_provider": "openai"}


def response(status: int, retry_after: str | None = None) -> httpx.Response:
    """A provider response with ``status`` (and a ``Retry-After`` header)."""
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return httpx.Response(status, headers=headers, request=REQUEST)


def with_litellm_headers(exc: Exception, headers: Any) -> Exception:
    """``exc`` as litellm raises it: the provider's headers set on the exception afterwards."""
    exc.litellm_response_headers = headers  # type: ignore[attr-defined]
    return exc


Row = tuple[str, Callable[[], BaseException], str, bool, int | None, float | None]

ROWS: list[Row] = [
    # -- litellm -----------------------------------------------------------------------------
    ("litellm timeout", lambda: lx.Timeout("slow", **KW), "timeout", True, 408, None),
    (
        "litellm 429, Retry-After in litellm's headers",
        lambda: with_litellm_headers(lx.RateLimitError("busy", **KW), {"retry-after": "7"}),
        "rate_limited", True, 429, 7.0,
    ),
    (
        "litellm 429, Retry-After in an httpx.Headers",
        lambda: with_litellm_headers(
            lx.RateLimitError("busy", **KW), httpx.Headers({"Retry-After": "1.5"})
        ),
        "rate_limited", True, 429, 1.5,
    ),
    (
        "litellm 429, Retry-After on the response",
        lambda: lx.RateLimitError("busy", response=response(429, "3"), **KW),
        "rate_limited", True, 429, 3.0,
    ),
    (
        "litellm 429, litellm's headers win over the response's",
        lambda: with_litellm_headers(
            lx.RateLimitError("busy", response=response(429, "3"), **KW), {"retry-after": "7"}
        ),
        "rate_limited", True, 429, 7.0,
    ),
    ("litellm 429, no Retry-After", lambda: lx.RateLimitError("busy", **KW),
     "rate_limited", True, 429, None),
    (
        "litellm 429, a Retry-After that is neither a number nor an HTTP date",
        lambda: with_litellm_headers(lx.RateLimitError("busy", **KW), {"retry-after": "soon"}),
        "rate_limited", True, 429, None,
    ),
    (
        "litellm 429, a negative Retry-After",
        lambda: with_litellm_headers(lx.RateLimitError("busy", **KW), {"retry-after": "-5"}),
        "rate_limited", True, 429, 0.0,
    ),
    ("litellm content policy", lambda: lx.ContentPolicyViolationError("no", **KW),
     "refusal", False, 400, None),
    ("litellm connection error", lambda: lx.APIConnectionError("refused", **KW),
     "provider_error", True, 500, None),
    ("litellm 500", lambda: lx.InternalServerError("oops", response=response(500), **KW),
     "provider_error", True, 500, None),
    ("litellm 502", lambda: lx.BadGatewayError("gw", response=response(502), **KW),
     "provider_error", True, 502, None),
    (
        "litellm 503 with Retry-After",
        lambda: lx.ServiceUnavailableError("down", response=response(503, "2"), **KW),
        "provider_error", True, 503, 2.0,
    ),
    ("litellm 504", lambda: lx.APIError(504, "gateway timeout", **KW),
     "provider_error", True, 504, None),
    ("litellm 400", lambda: lx.BadRequestError("bad", **KW), "provider_error", False, 400, None),
    ("litellm 401", lambda: lx.AuthenticationError("key", **KW),
     "provider_error", False, 401, None),
    ("litellm 403", lambda: lx.PermissionDeniedError("no", response=response(403), **KW),
     "provider_error", False, 403, None),
    ("litellm 404", lambda: lx.NotFoundError("model", **KW), "provider_error", False, 404, None),
    (
        "litellm 422",
        lambda: lx.UnprocessableEntityError("schema", response=response(422), **KW),
        "provider_error", False, 422, None,
    ),
    # -- openai (what instructor and litellm wrap) --------------------------------------------
    (
        "openai 429 with Retry-After",
        lambda: openai.RateLimitError("busy", response=response(429, "4"), body=None),
        "rate_limited", True, 429, 4.0,
    ),
    ("openai 500", lambda: openai.InternalServerError("oops", response=response(500), body=None),
     "provider_error", True, 500, None),
    ("openai 400", lambda: openai.BadRequestError("bad", response=response(400), body=None),
     "provider_error", False, 400, None),
    ("openai timeout", lambda: openai.APITimeoutError(request=REQUEST),
     "timeout", True, None, None),
    ("openai connection error", lambda: openai.APIConnectionError(request=REQUEST),
     "provider_error", True, None, None),
    # -- transport and builtins ---------------------------------------------------------------
    ("httpx connect error", lambda: httpx.ConnectError("refused"),
     "provider_error", True, None, None),
    ("httpx read timeout", lambda: httpx.ReadTimeout("slow"), "timeout", True, None, None),
    ("TimeoutError", lambda: TimeoutError("slow"), "timeout", True, None, None),
    ("ConnectionResetError", lambda: ConnectionResetError("reset"),
     "provider_error", True, None, None),
]


@pytest.mark.parametrize(
    ("make", "reason", "retryable", "status", "retry_after"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_provider_exception_mapping(
    make: Callable[[], BaseException],
    reason: str,
    retryable: bool,
    status: int | None,
    retry_after: float | None,
) -> None:
    exc = make()
    error = map_provider_exception(exc)
    assert (error.reason, error.retryable, error.status, error.retry_after) == (
        reason,
        retryable,
        status,
        retry_after,
    )
    # The message names the exception class, so a log line says what the provider raised.
    assert str(error).startswith(f"{type(exc).__name__}: ")


def test_the_message_is_bounded() -> None:
    error = map_provider_exception(lx.BadRequestError("x" * 5_000, **KW))
    assert len(str(error)) < 600


# -- the direct transport: HTTP answers (judge.providers.direct.error_for_answer)
# --------------------------
# The same table over what the direct transport sees: a status, OpenAI's error body and the
# Retry-After header. Each row's expectation is its litellm row's above (tests/judge/
# test_direct_errors.py checks the pairs over HTTP against the stand-in).


def openai_error(
    message: str, kind: str = "invalid_request_error", code: str | None = None
) -> bytes:
    """OpenAI's error body."""
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}
    ).encode()


DirectRow = tuple[str, int, bytes, float | None, str, bool, int | None, float | None]

DIRECT_ROWS: list[DirectRow] = [
    ("direct 429 with Retry-After", 429, openai_error("busy", "requests"), 7.0,
     "rate_limited", True, 429, 7.0),
    ("direct 429, no Retry-After", 429, openai_error("busy", "requests"), None,
     "rate_limited", True, 429, None),
    ("direct 400 content policy", 400,
     openai_error("blocked", code="content_policy_violation"), None, "refusal", False, 400, None),
    ("direct 400", 400, openai_error("bad"), None, "provider_error", False, 400, None),
    ("direct 400 with a Retry-After (ignored)", 400, openai_error("bad"), 3.0,
     "provider_error", False, 400, None),
    ("direct 401", 401, openai_error("key", code="invalid_api_key"), None,
     "provider_error", False, 401, None),
    ("direct 403", 403, openai_error("no"), None, "provider_error", False, 403, None),
    ("direct 404", 404, openai_error("model", code="model_not_found"), None,
     "provider_error", False, 404, None),
    ("direct 408", 408, b"", None, "timeout", True, 408, None),
    ("direct 422", 422, openai_error("schema"), None, "provider_error", False, 422, None),
    ("direct 500", 500, openai_error("oops", "server_error"), None,
     "provider_error", True, 500, None),
    ("direct 502, not JSON", 502, b"<html>bad gateway</html>", None,
     "provider_error", True, 502, None),
    ("direct 503 with Retry-After", 503, openai_error("down", "server_error"), 2.0,
     "provider_error", True, 503, 2.0),
    ("direct 504", 504, b"", None, "timeout", True, 504, None),
]


@pytest.mark.parametrize(
    ("status", "body", "header", "reason", "retryable", "expected_status", "retry_after"),
    [row[1:] for row in DIRECT_ROWS],
    ids=[row[0] for row in DIRECT_ROWS],
)
def test_direct_answer_mapping(
    status: int,
    body: bytes,
    header: float | None,
    reason: str,
    retryable: bool,
    expected_status: int | None,
    retry_after: float | None,
) -> None:
    error = error_for_answer(status, body, header)
    assert (error.reason, error.retryable, error.status, error.retry_after) == (
        reason,
        retryable,
        expected_status,
        retry_after,
    )
    assert str(error).startswith(f"HTTP {status}: ")
    assert len(str(error)) < 600


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("7", 7.0), ("1.5", 1.5), ("-5", 0.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("soon", None),
     (None, None)],
)
def test_retry_after_header(value: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(value) == seconds


def test_retry_after_http_date_is_the_wait_until_then() -> None:
    """The engine reads the header's date form as the client does (one parser)."""
    when = datetime.now(UTC) + timedelta(seconds=90)
    seconds = retry_after_seconds(format_datetime(when, usegmt=True))
    assert seconds is not None
    assert 80.0 <= seconds <= 90.0
