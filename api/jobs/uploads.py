"""Reading job submissions: a JSON body, a JSONL body, or a multipart upload with a ``file``.

Every job kind with items (grading, multiple choice) reads its uploads here, so they accept the
same formats and report bad lines alike: a JSONL line that cannot be read (invalid UTF-8, not
JSON, nested too deeply) is kept as that line's error, by number, and the rest go on. The
grading kind's items are validated here too (``build_items``); other kinds validate theirs in
their service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.datastructures import FormData

from api.errors import UnsupportedMediaType
from api.jobs.items import JobItem
from api.jobs.policy import check_request
from bonusjudge_client.wire.grading import GradeRequest
from bonusjudge_client.wire.schemas import ItemError, JobBody
from core.errors import InputError, first_error
from core.jsonl import BadLine, read_jsonl
from judge.config import JudgeOverrides, Settings
from judge.io import chartom_to_request

JSONL_TYPES = frozenset(
    {
        "application/x-ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/jsonlines",
    }
)
"""Content types read as one JSON item per line."""

RawItem = tuple[int | None, Any, str | None]
"""One submitted item before validation: ``(line or None, parsed JSON or None, error or None)``."""


class _ItemsBody(Protocol):
    @property
    def items(self) -> Sequence[Any]: ...


BodyT = TypeVar("BodyT", bound=BaseModel)
"""The JSON body model of a job kind (it carries the items in ``items``)."""


@dataclass(frozen=True)
class Upload(Generic[BodyT]):
    """A submission as read from the request, before its items are validated.

    Attributes:
        raw: Every non-blank item (``RawItem``), in order.
        body: The parsed JSON body (for a JSON submission), else None.
        form: The multipart form (for a multipart upload), else None.
    """

    raw: list[RawItem]
    body: BodyT | None
    form: FormData | None


@dataclass(frozen=True)
class JobUpload:
    """A grading-job submission as read from the request body, before the judge is resolved.

    Attributes:
        raw: ``(line or None, parsed JSON or None, JSON error or None)`` per non-blank item.
        judge: Judge selection carried in the body (JSON ``judge`` or multipart ``judge`` field).
        max_cost: The JSON body's ``max_cost`` (the job's own cost cap, USD), if any.
    """

    raw: list[RawItem]
    judge: JudgeOverrides | None
    max_cost: float | None = None


def media_type(request: Request) -> str:
    """The request's content type without parameters, lower-cased ("" when absent)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def jsonl_items(data: bytes) -> list[RawItem]:
    """The lines of a JSONL upload as raw items; a line that cannot be read keeps its error."""
    # objects=False: whether an item must be an object is each kind's rule (and message).
    return [
        (entry.line, None, str(entry)) if isinstance(entry, BadLine) else (entry[0], entry[1], None)
        for entry in read_jsonl(data, objects=False)
    ]


async def read_upload(request: Request, body_model: type[BodyT]) -> Upload[BodyT]:
    """Read a submission: a JSON ``body_model`` with ``items``, a JSONL body, or a ``file``.

    Raises:
        InputError: unreadable or invalid JSON body, a missing ``file`` (field named).
        UnsupportedMediaType: another content type.
    """
    media = media_type(request)
    if media == "application/json" or media.endswith("+json"):
        try:
            body = body_model.model_validate_json(await request.body())
        except ValidationError as exc:
            field, message = first_error(exc)
            raise InputError(message, field=field) from None
        # Every kind's body model carries its items in ``items``.
        return Upload([(None, item, None) for item in cast("_ItemsBody", body).items], body, None)
    if media in JSONL_TYPES:
        return Upload(jsonl_items(await request.body()), None, None)
    if media == "multipart/form-data":
        form = await request.form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InputError("file: upload the JSONL file in the form field `file`", field="file")
        return Upload(jsonl_items(await upload.read()), None, form)
    raise UnsupportedMediaType(
        f"content type {media or '(none)'!r} is not accepted: send application/json, "
        "application/x-ndjson (one item per line) or multipart/form-data with a `file` field",
        field="content-type",
    )


JSONL_MEDIA_TYPE = "application/x-ndjson"
"""The content type the OpenAPI document names for JSON Lines (``JSONL_TYPES`` are all read)."""

COMPONENTS = "#/components/schemas/"
"""Where a ``$ref`` of the OpenAPI document finds a named schema."""


def jsonl_schema(lines: dict[str, Any], description: str) -> dict[str, Any]:
    """The schema of a JSON Lines body, one JSON value per line, described by ``lines``.

    OpenAPI 3.1 has no field for the schema of one line (3.2 adds ``itemSchema``); the OpenAPI
    media-type registry models a JSON Lines document as the JSON array of its lines. That array
    is stated with JSON Schema's own keywords for encoded strings (``contentMediaType``,
    ``contentSchema``), on a binary string: what generators read as raw bytes, since none of
    them parses JSON Lines itself (openapi-python-client, with the content-type override of
    ``docs/openapi-python-client.yaml``: a ``File``; openapi-typescript: a string).

    Args:
        lines: The schema of the whole document as an array (``{"type": "array", "items":
            ...}``).
        description: What the lines are.
    """
    return {
        "type": "string",
        "format": "binary",
        "contentMediaType": JSONL_MEDIA_TYPE,
        "contentSchema": lines,
        "description": description,
    }


@dataclass(frozen=True)
class UploadDoc:
    """The OpenAPI description of a route that reads its submission with :func:`read_upload`.

    FastAPI cannot see the formats such a route accepts (it reads the raw request), so the route
    passes :attr:`operation` as ``openapi_extra``, and the app adds :meth:`schemas` to the
    document: each of the three forms is a named schema, a JSON body (``body``), JSON Lines
    (``lines``, one item of the JSON body's ``items`` per line) and a multipart ``file``
    (``form``).

    Attributes:
        body: The JSON body model (``JobBody``); it carries the items in ``items``.
        lines: Name of the JSON Lines body's schema (``JobLines``).
        form: Name of the multipart body's schema (``JobForm``).
        example: An example JSON body.
        jsonl_example: An example JSON Lines body.
        form_fields: Multipart fields besides ``file``, with their descriptions.
    """

    body: type[BaseModel]
    lines: str
    form: str
    example: dict[str, Any]
    jsonl_example: str
    form_fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def operation(self) -> dict[str, Any]:
        """The route's ``openapi_extra``: its request body in the three content types."""
        return {
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": COMPONENTS + self.body.__name__},
                        "example": self.example,
                    },
                    JSONL_MEDIA_TYPE: {
                        "schema": {"$ref": COMPONENTS + self.lines},
                        "example": self.jsonl_example,
                    },
                    "multipart/form-data": {"schema": {"$ref": COMPONENTS + self.form}},
                },
            }
        }

    def schemas(self) -> dict[str, dict[str, Any]]:
        """The named schemas :attr:`operation` refers to, and those they refer to in turn."""
        body = self.body.model_json_schema(ref_template=COMPONENTS + "{model}")
        named: dict[str, dict[str, Any]] = body.pop("$defs", {})
        items = {key: value for key, value in body["properties"]["items"].items()
                 if key not in ("title", "description")}
        properties: dict[str, Any] = {
            "file": {"type": "string", "format": "binary",
                     "description": "JSON Lines file, one item per line."},
        }
        for name, description in self.form_fields.items():
            properties[name] = {"type": "string", "description": description}
        named[self.body.__name__] = body
        named[self.lines] = jsonl_schema(
            items, f"One item per line: what one entry of `{self.body.__name__}.items` holds. A "
            "line that cannot be read is that item's error; the others are still taken.",
        )
        named[self.form] = {
            "type": "object", "required": ["file"], "properties": properties,
            "description": f"A multipart upload: `file` in the format of `{self.lines}`.",
        }
        return named


def _judge_field(value: Any) -> JudgeOverrides | None:
    """The multipart ``judge`` field (a JSON object), with errors named under ``judge``."""
    if value is None or value == "":
        return None
    try:
        return JudgeOverrides.model_validate_json(value if isinstance(value, str) else bytes(value))
    except ValidationError as exc:
        field, message = first_error(exc)
        if field in (None, "body"):  # the field as a whole: not JSON, or not an object
            raise InputError(f"judge: {message.removeprefix('body: ')}", field="judge") from None
        raise InputError(f"judge.{message}", field=f"judge.{field}") from None


async def read_job_upload(request: Request) -> JobUpload:
    """Read a grading-job submission: JSON ``{"items", "judge"}``, JSONL, or a multipart ``file``.

    Raises:
        InputError: unreadable JSON, a bad ``judge``, a missing ``file`` (field named).
        UnsupportedMediaType: another content type.
    """
    upload = await read_upload(request, JobBody)
    if upload.body is not None:
        return JobUpload(upload.raw, upload.body.judge, upload.body.max_cost)
    judge = _judge_field(upload.form.get("judge")) if upload.form is not None else None
    return JobUpload(upload.raw, judge)


def storable_id(declared: object) -> str | None:
    """The id an invalid item is stored and answered under: its own, NUL made visible.

    Item validation refuses a NUL in an id, but the refused item is still kept (its error entry,
    under the id it declared) and PostgreSQL's text cannot hold NUL: stored as U+FFFD, the entry
    is the same on every store and still names the item.
    """
    if declared is None:
        return None
    return str(declared).replace("\x00", "\ufffd")


def build_items(
    upload: JobUpload, *, context_window: int | None, settings: Settings
) -> list[JobItem]:
    """Validate every item of an upload; bad ones become error entries, the rest requests.

    Raises:
        InputError: (field ``items``) no items, or more than ``settings.max_job_items``.
    """
    if not upload.raw:
        raise InputError("items: the job has no items", field="items")
    if len(upload.raw) > settings.max_job_items:
        raise InputError(
            f"items: {len(upload.raw)} items exceed the limit of {settings.max_job_items} per job",
            field="items",
        )
    seen: set[str] = set()
    out: list[JobItem] = []
    for index, (line, obj, problem) in enumerate(upload.raw):
        position = line if line is not None else index + 1
        declared_id = storable_id(obj.get("id") if isinstance(obj, dict) else None)
        error: ItemError | None = None
        request: GradeRequest | None = None
        if problem is not None:
            error = ItemError(type="invalid_input", message=problem, line=line)
        else:
            try:
                request = check_request(
                    chartom_to_request(obj, context_window, line=line), settings
                )
            except InputError as exc:
                error = ItemError(
                    type="invalid_input", message=with_line(str(exc), line), field=exc.field,
                    line=line,
                )
        item_id = (request.id if request is not None else declared_id) or str(position)
        if request is not None:
            if item_id in seen:
                request = None
                error = ItemError(
                    type="invalid_input", message=with_line(f"id: duplicate id {item_id!r}", line),
                    field="id", line=line,
                )
            seen.add(item_id)
        out.append(JobItem(index, item_id, line, request, error))
    return out


def with_line(message: str, line: int | None) -> str:
    """Prefix ``message`` with its 1-based line number when it came from an uploaded file."""
    return message if line is None or message.startswith("line ") else f"line {line}: {message}"
