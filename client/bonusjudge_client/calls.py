"""What the client sends: requests built and checked before anything leaves (no I/O here).

Every argument is validated client-side, so a bad one fails at once, naming its field, before a
round trip; the service still validates everything on its own. A ``Call`` is one logical request
and holds the exact bytes every retried attempt resends.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from bonusjudge_client.errors import ClientInputError
from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.grading import ExtractRequest, GradeRequest
from bonusjudge_client.wire.mcq import McqItem
from bonusjudge_client.wire.options import JudgeOverrides
from bonusjudge_client.wire.schemas import CalibrateBody, CalibrationMetric, MetricPair

URL_ENV = "BONUSJUDGE_URL"
"""Environment variable read for the service URL when none is passed."""

API_KEY_ENV = "BONUSJUDGE_API_KEY"
"""Environment variable read for the API key when none is passed."""

DEFAULT_URL = "http://127.0.0.1:8000"
"""Where ``bonusjudge serve`` listens by default."""

DEFAULT_BATCH_SIZE = 32
"""Items per batch request in ``grade_many`` (the service accepts up to ``max_batch``, 256)."""

DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
"""Timeout of clients this package creates: a batch graded by an LLM judge may take minutes."""

JSON = "application/json"
"""Media type of JSON bodies."""

NDJSON = "application/x-ndjson"
"""Media type of JSONL uploads and of streamed result lines."""

ItemInput = GradeRequest | Mapping[str, Any]
"""One item to grade: a ``GradeRequest``, or a mapping of its fields (validated client-side)."""

JudgeInput = JudgeOverrides | Mapping[str, Any] | None
"""Per-request judge selection: ``JudgeOverrides`` or a mapping of its fields."""

McqInput = McqItem | Mapping[str, Any]
"""One multiple-choice item: an ``McqItem``, or a mapping of its fields (sent as it is: the
service validates items one by one and reports a bad one as an error entry)."""

JobKind = Literal["grade", "mcq"]
"""Which job routes a job lives under: ``/v1/jobs`` (grading) or ``/v1/mcq/jobs``."""

FileInput = str | os.PathLike[str] | bytes
"""A JSONL upload: a path, or the file's bytes."""

PairInput = MetricPair | Mapping[str, Any] | tuple[str, str]
"""One (response, reference) pair for the metrics call."""

_M = TypeVar("_M", bound=BaseModel)


class ManyOptions(TypedDict, total=False):
    """The options of ``grade_many`` in both clients; see ``JudgeClient.grade_many``."""

    judge: JudgeInput
    batch_size: int
    concurrency: int
    progress: bool


@dataclass(frozen=True)
class Call:
    """One logical request; retried attempts resend exactly these bytes.

    Attributes:
        idempotent: The call may be resent after it may have reached the service.
        retry_statuses: Busy answers (429/503) are retried; ``ready`` reads a 503 as an answer.
        spread: Stateless work any replica may take: with several base URLs, each attempt goes
            to the next one in turn (grading requests); other calls go to the first that answers.
    """

    method: str
    path: str
    content: bytes | None = None
    content_type: str | None = None
    params: Mapping[str, Any] | None = None
    form: Mapping[str, str] | None = None
    files: Mapping[str, tuple[str, bytes, str]] | None = None
    idempotent: bool = True
    retry_statuses: bool = True
    accept: str = JSON
    spread: bool = False


def dumps(payload: Any) -> bytes:
    """Compact UTF-8 JSON, as every JSON body is sent."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def invalid(exc: ValidationError, prefix: str | None) -> ClientInputError:
    """The first validation error of an argument, named ``prefix.field`` (or ``body``)."""
    field, message = first_error(exc)
    if field is None:
        where = prefix or "body"
        return ClientInputError(f"invalid {where}: {message}", field=where)
    where = f"{prefix}.{field}" if prefix else field
    return ClientInputError(f"invalid {prefix + '.' if prefix else ''}{message}", field=where)


def judge_payload(judge: JudgeInput) -> dict[str, Any] | None:
    """The judge selection as sent (``JudgeOverrides`` fields that are set), or None.

    The one place the judge options are checked: ``JudgeOverrides`` defines them (model,
    temperature, rubric, metrics, length_control, context_window) for the service too.
    """
    if judge is None:
        return None
    if isinstance(judge, JudgeOverrides):
        overrides = judge
    elif isinstance(judge, Mapping):
        try:
            overrides = JudgeOverrides.model_validate(dict(judge))
        except ValidationError as exc:
            raise invalid(exc, "judge") from None
    else:
        raise ClientInputError(
            f"judge must be JudgeOverrides or a mapping, not {type(judge).__name__}",
            field="judge",
        )
    dumped = overrides.model_dump(mode="json", exclude_none=True)
    return dumped or None


def with_judge(body: dict[str, Any], judge: JudgeInput) -> dict[str, Any]:
    """``body`` with the judge selection added when there is one."""
    overrides = judge_payload(judge)
    if overrides:
        body["judge"] = overrides
    return body


def as_model(model: type[_M], value: Any, field: str) -> _M:
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
        raise invalid(exc, field) from None


def request_fields(request: BaseModel) -> dict[str, Any]:
    """A model as sent: null fields left out, so the service applies its own defaults.

    A required field is sent even when null: a null ``response`` is an answer the service
    grades (flag ``null_response``), where leaving it out would be a missing field.
    """
    fields = request.model_dump(mode="json", exclude_none=True)
    for name, info in type(request).model_fields.items():
        if info.is_required() and name not in fields:
            fields[name] = None
    return fields


def _as_given(item: Any, index: int, model: type[BaseModel], what: str) -> dict[str, Any]:
    """An item of a job or of a multiple-choice call as sent: a mapping goes as it is.

    The service validates such items one by one and reports a bad one in its place; for jobs it
    also accepts CharToM-format lines (answer, context_0...), which are not ``GradeRequest``s.
    """
    if isinstance(item, model):
        return request_fields(item)
    if isinstance(item, Mapping):
        return dict(item)
    raise ClientInputError(
        f"items.{index} must be {what} or a mapping, not {type(item).__name__}",
        field=f"items.{index}",
    )


def _non_empty(payload: list[Any], field: str, what: str = "item") -> list[Any]:
    if not payload:
        raise ClientInputError(f"{field} must hold at least one {what}", field=field)
    return payload


def id_path(prefix: str, value: str, field: str) -> str:
    """``prefix/<value>``, the id checked and quoted so it cannot escape its path."""
    if not isinstance(value, str) or not value.strip():
        raise ClientInputError(f"{field} must be a non-empty string", field=field)
    return f"{prefix}/{quote(value, safe='')}"


def job_path(job_id: str, kind: JobKind = "grade") -> str:
    """The path of a grading (``/v1/jobs/{id}``) or multiple-choice (``/v1/mcq/jobs/{id}``) job."""
    if kind not in ("grade", "mcq"):
        raise ClientInputError(f"kind must be 'grade' or 'mcq', not {kind!r}", field="kind")
    return id_path("/v1/jobs" if kind == "grade" else "/v1/mcq/jobs", job_id, "job_id")


def file_bytes(file: FileInput, what: str) -> tuple[bytes, str]:
    """The bytes and file name of an upload; a missing or empty file fails here."""
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


def check_poll(poll_interval: float, timeout: float | None) -> None:
    """Check the arguments of a polling wait."""
    if poll_interval <= 0:
        raise ClientInputError("poll_interval must be > 0", field="poll_interval")
    if timeout is not None and timeout < 0:
        raise ClientInputError("timeout must be >= 0", field="timeout")


def check_offset(offset: int) -> None:
    """Check the starting line of a results stream."""
    if offset < 0:
        raise ClientInputError("offset must be >= 0", field="offset")


# -- grading ------------------------------------------------------------------------------------


def grade_call(request: ItemInput, judge: JudgeInput) -> Call:
    """``POST /v1/grade``: the item's fields at the top level, plus the judge selection."""
    body = with_judge(request_fields(as_model(GradeRequest, request, "request")), judge)
    return Call("POST", "/v1/grade", dumps(body), JSON, spread=True)


def batch_call(items: Iterable[ItemInput], judge: JudgeInput) -> tuple[Call, int]:
    """``POST /v1/grade/batch`` and the number of items it carries."""
    # Mappings are validated here too: a bad item is the caller's bug, best caught before a
    # round trip; the service still validates each item on its own.
    requests = [as_model(GradeRequest, item, f"items.{i}") for i, item in enumerate(items)]
    payload = _non_empty([request_fields(request) for request in requests], "items")
    body = with_judge({"items": payload}, judge)
    return Call("POST", "/v1/grade/batch", dumps(body), JSON, spread=True), len(payload)


def chunks(
    items: Iterable[ItemInput], batch_size: int
) -> Iterator[tuple[int, list[GradeRequest]]]:
    """Validated items in ``(start index, chunk)`` pieces, read lazily from ``items``."""
    chunk: list[GradeRequest] = []
    start = 0
    for index, item in enumerate(items):
        request = as_model(GradeRequest, item, f"items.{index}")
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


def check_many_args(batch_size: int, concurrency: int) -> None:
    """Check the batching arguments of ``grade_many``."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ClientInputError("batch_size must be an integer >= 1", field="batch_size")
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ClientInputError("concurrency must be an integer >= 1", field="concurrency")


def _finite_cost(value: object) -> bool:
    """Whether ``value`` is a USD amount: a finite number >= 0 (infinity would be no cap)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


def job_call(
    items: Iterable[ItemInput] | None, file: FileInput | None, judge: JudgeInput,
    max_cost: float | None = None,
) -> Call:
    """``POST /v1/jobs`` from items (JSON) or a JSONL file (raw, or multipart with a judge).

    ``max_cost`` (the job's own cost cap, USD) goes in the JSON body, or as a query parameter
    with a file.
    """
    if (items is None) == (file is None):
        raise ClientInputError("give exactly one of items or file", field="items")
    if max_cost is not None and not _finite_cost(max_cost):
        raise ClientInputError("max_cost must be a finite number >= 0", field="max_cost")
    overrides = judge_payload(judge)
    if items is not None:
        given = [_as_given(item, i, GradeRequest, "a GradeRequest") for i, item in enumerate(items)]
        body: dict[str, Any] = {"items": _non_empty(given, "items")}
        if overrides:
            body["judge"] = overrides
        if max_cost is not None:
            body["max_cost"] = max_cost
        return Call("POST", "/v1/jobs", dumps(body), JSON, idempotent=False)
    assert file is not None  # checked above; spelled out for the type checker
    content, name = file_bytes(file, "job file")
    params = None if max_cost is None else {"max_cost": max_cost}
    if not overrides:
        return Call("POST", "/v1/jobs", content, NDJSON, params=params, idempotent=False)
    # A raw JSONL body has no room for options: with a judge selection the file goes as a
    # multipart upload, whose `judge` form field carries it.
    return Call(
        "POST",
        "/v1/jobs",
        form={"judge": json.dumps(overrides, separators=(",", ":"))},
        files={"file": (name, content, NDJSON)},
        params=params,
        idempotent=False,
    )


def estimate_call(
    items: Iterable[ItemInput], judge: JudgeInput, price_in: float | None, price_out: float | None
) -> Call:
    """``POST /v1/estimate``: a job's items (mappings as they are), the judge and any prices."""
    given = [_as_given(item, i, GradeRequest, "a GradeRequest") for i, item in enumerate(items)]
    body = with_judge({"items": _non_empty(given, "items")}, judge)
    for name, price in (("price_in", price_in), ("price_out", price_out)):
        if price is not None:
            if not _finite_cost(price):
                raise ClientInputError(f"{name} must be a finite number >= 0", field=name)
            body[name] = price
    # Nothing is graded or stored: asking again is safe.
    return Call("POST", "/v1/estimate", dumps(body), JSON, spread=True)


def extract_call(request: ExtractRequest | Mapping[str, Any], judge: JudgeInput) -> Call:
    """``POST /v1/bonus-points``: the request's fields plus the judge selection."""
    body = with_judge(request_fields(as_model(ExtractRequest, request, "request")), judge)
    return Call("POST", "/v1/bonus-points", dumps(body), JSON)


def metrics_call(
    pairs: Iterable[PairInput],
    metrics: Sequence[Literal["rouge_l", "bertscore"]] | None,
    encoder: str | None,
) -> tuple[Call, int]:
    """``POST /v1/metrics`` and the number of pairs it carries."""
    checked: list[dict[str, Any]] = []
    for i, pair in enumerate(pairs):
        if isinstance(pair, tuple):
            if len(pair) != 2:
                raise ClientInputError(
                    f"pairs.{i} must be (response, reference)", field=f"pairs.{i}"
                )
            pair = {"response": pair[0], "reference": pair[1]}
        checked.append(request_fields(as_model(MetricPair, pair, f"pairs.{i}")))
    body: dict[str, Any] = {"pairs": _non_empty(checked, "pairs", "pair")}
    if metrics is not None:
        body["metrics"] = [metrics] if isinstance(metrics, str) else list(metrics)
    if encoder is not None:
        body["encoder"] = encoder
    return Call("POST", "/v1/metrics", dumps(body), JSON), len(checked)


# -- multiple choice and calibration ------------------------------------------------------------


def _mcq_options(
    aggregate: str,
    group_by: Sequence[str] | None,
    llm_extract: bool,
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


def mcq_call(
    items: Iterable[McqInput],
    aggregate: str,
    group_by: Sequence[str] | None,
    llm_extract: bool,
    fuzzy_threshold: float | None,
    path: str = "/v1/mcq",
) -> tuple[Call, int]:
    """``POST /v1/mcq`` (or a job of it) and the number of items it carries."""
    options = _mcq_options(aggregate, group_by, llm_extract, fuzzy_threshold)
    given = [_as_given(item, i, McqItem, "an McqItem") for i, item in enumerate(items)]
    payload = _non_empty(given, "items")
    body = {"items": payload, **options}
    # Scoring is deterministic (and judge readings are cached): safe to resend; a job is not.
    return Call("POST", path, dumps(body), JSON, idempotent=path == "/v1/mcq"), len(payload)


def mcq_job_call(
    items: Iterable[McqInput] | None,
    file: FileInput | None,
    aggregate: str,
    group_by: Sequence[str] | None,
    llm_extract: bool,
    fuzzy_threshold: float | None,
) -> Call:
    """``POST /v1/mcq/jobs`` from items (JSON) or a JSONL file (options as query parameters)."""
    if (items is None) == (file is None):
        raise ClientInputError("give exactly one of items or file", field="items")
    if items is not None:
        call, _ = mcq_call(
            items, aggregate, group_by, llm_extract, fuzzy_threshold, path="/v1/mcq/jobs"
        )
        return call
    assert file is not None  # checked above; spelled out for the type checker
    content, _ = file_bytes(file, "job file")
    # A JSONL body carries only items: the options travel as query parameters.
    options = _mcq_options(aggregate, group_by, llm_extract, fuzzy_threshold)
    params = {
        key: ",".join(value) if key == "group_by" else ("true" if value is True else value)
        for key, value in options.items()
    }
    return Call("POST", "/v1/mcq/jobs", content, NDJSON, params=params, idempotent=False)


def calibrate_call(
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
) -> Call:
    """``POST /v1/calibrate``, checked against the service's own ``CalibrateBody``."""
    if (dataset is None) == (items is None):
        raise ClientInputError(
            "give exactly one of dataset (a set's name) or items", field="set"
        )
    body: dict[str, Any] = {"seed": seed, "resamples": resamples}
    if dataset is not None:
        body["set"] = dataset
    else:
        assert items is not None
        lines = [dict(item) if isinstance(item, Mapping) else item for item in items]
        body["items"] = _non_empty(lines, "items", "line")
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
        raise invalid(exc, None) from None
    return Call("POST", "/v1/calibrate", dumps(body), JSON, idempotent=False)
