"""What the client makes of answers: errors, typed models, batch entries (no I/O here).

A success answer that does not match the contract is a ``ClientResponseError`` naming the first
mismatching field; an error answer is a ``ClientHTTPError`` carrying the service's error body.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from bonusjudge_client.calls import Call
from bonusjudge_client.errors import ClientHTTPError, ClientItemError, ClientResponseError
from bonusjudge_client.retry import parse_retry_after
from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.grading import GradeResult
from bonusjudge_client.wire.schemas import BatchEntry, ItemError, McqResponse, Readiness

_M = TypeVar("_M", bound=BaseModel)

Placed = list[tuple[int, GradeResult | ClientItemError]]
"""A batch's outcomes at their positions in the caller's input."""


def http_error(response: Any, call: Call, url: str) -> ClientHTTPError:
    """The error an error answer stands for (its body must have been read)."""
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    error_type, message, field = "http_error", response.reason_phrase or "error", None
    body = _json_or_none(response)
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


def _json_or_none(response: Any) -> Any:
    try:
        return response.json()
    except (ValueError, UnicodeDecodeError):
        return None


def json_body(response: Any, url: str) -> Any:
    """The answer's JSON body."""
    try:
        return response.json()
    except (ValueError, UnicodeDecodeError) as exc:
        raise ClientResponseError(
            f"{url} answered HTTP {response.status_code} with a body that is not JSON: {exc}",
            url=url,
        ) from None


def parse(model: type[_M], data: Any, url: str, what: str | None = None) -> _M:
    """``data`` validated into ``model``; ``what`` names it in the error (default the model)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        field, message = first_error(exc)
        raise ClientResponseError(
            f"{url} answered with an invalid {what or model.__name__}: "
            f"{message if field else 'body: ' + message}",
            url=url,
            field=field,
        ) from None


def field_list(data: Any, key: str, url: str) -> list[Any]:
    """The list under ``key`` of an answer object."""
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, list):
        raise ClientResponseError(f"{url} answer lacks the list {key!r}", url=url, field=key)
    return value


def entries(data: Any, url: str) -> list[BatchEntry]:
    """The entries of a batch answer, each validated."""
    return [
        parse(BatchEntry, entry, url, f"results.{i}")
        for i, entry in enumerate(field_list(data, "results", url))
    ]


def line_model(line: str, number: int, url: str, model: type[_M]) -> _M:
    """One streamed result line (``number`` is 1-based, counted from offset 0)."""
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise ClientResponseError(
            f"{url}: result line {number} is not JSON: {exc}", url=url, field=f"line {number}"
        ) from None
    return parse(model, data, url, f"result line {number}")


def mcq_response(data: Any, url: str, size: int) -> McqResponse:
    """A multiple-choice answer, checked to hold one entry per item, in input order."""
    answer = parse(McqResponse, data, url)
    if sorted(entry.index for entry in answer.results) != list(range(size)):
        raise ClientResponseError(
            f"{url} answered {len(answer.results)} entries for {size} items",
            url=url,
            field="results",
        )
    answer.results.sort(key=lambda entry: entry.index)
    return answer


def report_dict(data: Any, url: str) -> dict[str, Any]:
    """A calibration report, which must be a JSON object."""
    if not isinstance(data, dict):
        raise ClientResponseError(f"{url} answered a report that is not an object", url=url)
    return data


def readiness(response: Any, call: Call, url: str) -> Readiness:
    """The readiness answer; a 503 with a readiness body is an answer ("not ready, because...")."""
    if response.status_code in (200, 503):
        data = _json_or_none(response)
        if isinstance(data, dict) and "ready" in data:
            return parse(Readiness, data, url)
    raise http_error(response, call, url)


def place(batch: list[BatchEntry], start: int, size: int, url: str) -> Placed:
    """Map one batch answer back to input positions, checking it answers every item once."""
    if len(batch) != size or sorted(e.index for e in batch) != list(range(size)):
        raise ClientResponseError(
            f"batch answer for items {start}..{start + size - 1} has {len(batch)} entries "
            f"with indexes {[e.index for e in batch][:10]}, expected 0..{size - 1}",
            url=url,
            field="results",
        )
    out: Placed = []
    for entry in sorted(batch, key=lambda e: e.index):
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


class Gathered:
    """The outcomes of ``grade_stream`` gathered into ``grade_many``'s list, in input order.

    Both clients' ``grade_many`` are this over their own ``grade_stream``, so the list they
    return is built, and an item error raised, the same way.

    Args:
        return_exceptions: Keep a ``ClientItemError`` in its item's place instead of raising it.
        url: The batch route, named if an item never got an answer.
    """

    def __init__(self, *, return_exceptions: bool, url: str) -> None:
        self._return_exceptions = return_exceptions
        self._url = url
        self._outcomes: list[GradeResult | ClientItemError | None] = []

    def add(self, position: int, outcome: GradeResult | ClientItemError) -> None:
        """Place one outcome.

        Raises:
            ClientItemError: ``outcome`` is an item error and ``return_exceptions`` is off.
        """
        if isinstance(outcome, ClientItemError) and not self._return_exceptions:
            raise outcome
        if position >= len(self._outcomes):
            self._outcomes.extend([None] * (position + 1 - len(self._outcomes)))
        self._outcomes[position] = outcome

    def results(self) -> list[GradeResult | ClientItemError]:
        """One outcome per item, in input order.

        Raises:
            ClientResponseError: an item got no answer (``place`` checks every batch answer, so
                this means a batch was lost).
        """
        missing = [n for n, outcome in enumerate(self._outcomes) if outcome is None]
        if missing:
            raise ClientResponseError(
                f"items {missing[:10]} got no answer", url=self._url, field="results"
            )
        return [outcome for outcome in self._outcomes if outcome is not None]
