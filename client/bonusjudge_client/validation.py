"""Pydantic validation errors as one field and one line, the same on both sides of the wire.

The service answers a bad request with the first error's field and message; the client checks a
request before sending it and reports it the same way, so a caller reads one wording wherever the
check ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

__all__ = ["field_of", "first_error"]


def field_of(loc: Sequence[int | str]) -> str | None:
    """A pydantic error location as a dotted field name, without the request-part prefix.

    FastAPI prefixes locations with the part of the request (``body``, ``query``...); a bare
    ``("body",)`` means the body as a whole (missing, or not an object).
    """
    parts = list(loc)
    if parts == ["body"]:
        return "body"
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    return ".".join(str(p) for p in parts) or None



def first_error(errors: ValidationError | Sequence[Any]) -> tuple[str | None, str]:
    """The field and a one-line message of the first pydantic validation error.

    Every front end reports one error per bad input (the CLI's one-line message, the API's 4xx
    body, a bad JSONL line), so they all take the first one the same way. The message is prefixed
    with the field when there is one: ``"points.0: String should have at least 1 character"``.

    Args:
        errors: A ``ValidationError`` or the list its ``errors()`` returns (FastAPI hands over
            the list).
    """
    details = list(errors.errors()) if isinstance(errors, ValidationError) else list(errors)
    if not details:
        return None, "invalid value"
    first = details[0]
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return "body", f"body: invalid JSON{': ' + detail if detail else ''}"
    field = field_of(first.get("loc", ()))
    message = str(first.get("msg", "invalid value"))
    return field, f"{field}: {message}" if field else message


