"""Reading job submissions: a JSON body, a JSONL body, or a multipart upload with a ``file``.

Every job kind with items (grading, multiple choice) reads its uploads here, so they accept the
same formats and report bad lines alike: a JSONL line that cannot be read (invalid UTF-8, not
JSON, nested too deeply) is kept as that line's error, by number, and the rest go on. The
grading kind's items are validated here too (``GradeItems``); other kinds validate theirs in
their service.

A submission is never held whole in memory nor parsed on the event loop: its body goes to a
temporary file as it arrives (``api.jobs.spool``), a JSON body is split into its items and its
other members in an upload thread (``api.jobs.staging.in_upload_thread``), and the items are read
from the file one at a time when the job is staged. ``receive_upload`` is an async context
manager: the files are deleted when its block ends.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import IO, Any, Generic, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.datastructures import FormData

from api.errors import UnsupportedMediaType
from api.jobs.items import JobItem
from api.jobs.policy import check_request
from api.jobs.spool import RawItem, SpooledLines, split_json_body, spooled
from api.jobs.staging import ItemLimit, in_upload_thread
from api.settings import ServiceSettings
from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.grading import GradeRequest
from bonusjudge_client.wire.schemas import ItemError, JobBody
from core.errors import InputError
from judge.config import JudgeOverrides
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

BodyT = TypeVar("BodyT", bound=BaseModel)
"""The JSON body model of a job kind (it carries the items in ``items``)."""


@dataclass
class Upload(Generic[BodyT]):
    """A submission as read from the request, before its items are validated.

    Attributes:
        raw: Every non-blank item (``RawItem``), in order: read from the upload's file each
            time it is iterated (``SpooledLines``), or a list.
        body: The JSON body's members other than its items, validated by its model (whose
            ``items`` is then empty), for a JSON submission; else None.
        form: The multipart form (for a multipart upload), else None.
    """

    raw: Iterable[RawItem]
    body: BodyT | None
    form: FormData | None

    async def aclose(self) -> None:
        """Delete the upload's files."""
        if isinstance(self.raw, SpooledLines):
            self.raw.close()
        if self.form is not None:
            await self.form.close()


@dataclass(frozen=True)
class JobUpload:
    """A grading-job submission as read from the request body, before the judge is resolved.

    Attributes:
        raw: ``(line or None, parsed JSON or None, JSON error or None)`` per non-blank item
            (``Upload.raw``).
        judge: Judge selection carried in the body (JSON ``judge`` or multipart ``judge`` field).
        max_cost: The JSON body's ``max_cost`` (the job's own cost cap, USD), if any.
    """

    raw: Iterable[RawItem]
    judge: JudgeOverrides | None
    max_cost: float | None = None


def media_type(request: Request) -> str:
    """The request's content type without parameters, lower-cased ("" when absent)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def jsonl_items(data: bytes) -> list[RawItem]:
    """The lines of a JSONL upload as raw items; a line that cannot be read keeps its error."""
    return list(SpooledLines(io.BytesIO(data), numbered=True))


async def _spool(request: Request) -> IO[bytes]:
    """The request's body in a temporary file, written as it arrives (rewound)."""
    file = spooled()
    try:
        async for chunk in request.stream():
            file.write(chunk)  # a page-cache write of one chunk: no longer than reading it
    except BaseException:
        file.close()
        raise
    file.seek(0)
    return file


def _read_json(body: IO[bytes], lines: IO[bytes], body_model: type[BodyT]) -> BodyT:
    """Split a JSON submission's items to ``lines``; its other members, validated.

    Blocking (an upload thread): the items are parsed one by one, and the members validated
    with a stand-in for the items (read later, one at a time), so a bad member, and an empty or
    missing ``items``, is answered as before.
    """
    members, count = split_json_body(body, lines)
    probe = members if count is None else {**members, "items": [None] * min(count, 1)}
    try:
        model = body_model.model_validate(probe)
    except ValidationError as exc:
        field_name, message = first_error(exc)
        raise InputError(message, field=field_name) from None
    return model.model_copy(update={"items": []})


async def _json_upload(request: Request, body_model: type[BodyT]) -> Upload[BodyT]:
    """A JSON submission: its items split to a file of lines, its other members validated."""
    body = await _spool(request)
    lines = spooled()
    try:
        model = await in_upload_thread(_read_json, body, lines, body_model)
    except BaseException:
        lines.close()
        raise
    finally:
        body.close()
    return Upload(SpooledLines(lines, numbered=False), model, None)


@asynccontextmanager
async def receive_upload(request: Request, body_model: type[BodyT]) -> AsyncIterator[Upload[BodyT]]:
    """Receive a submission: a JSON ``body_model`` with ``items``, a JSONL body, or a ``file``.

    The body is kept in a temporary file, deleted when the block ends; its items are read from
    it one at a time (``Upload.raw``).

    Raises:
        InputError: unreadable or invalid JSON body, a missing ``file`` (field named).
        UnsupportedMediaType: another content type.
    """
    media = media_type(request)
    upload: Upload[BodyT]
    if media == "application/json" or media.endswith("+json"):
        upload = await _json_upload(request, body_model)
    elif media in JSONL_TYPES:
        upload = Upload(SpooledLines(await _spool(request), numbered=True), None, None)
    elif media == "multipart/form-data":
        # Starlette writes the file to a temporary file of its own (on disk past 1 MB).
        form = await request.form()
        file = form.get("file")
        if file is None or isinstance(file, str):
            await form.close()
            raise InputError("file: upload the JSONL file in the form field `file`", field="file")
        upload = Upload(SpooledLines(file.file, numbered=True), None, form)
    else:
        raise UnsupportedMediaType(
            f"content type {media or '(none)'!r} is not accepted: send application/json, "
            "application/x-ndjson (one item per line) or multipart/form-data with a `file` "
            "field",
            field="content-type",
        )
    try:
        yield upload
    finally:
        await upload.aclose()


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
    """The OpenAPI description of a route that reads its submission with :func:`receive_upload`.

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


@asynccontextmanager
async def receive_job_upload(request: Request) -> AsyncIterator[JobUpload]:
    """Receive a grading-job submission: JSON ``{"items", "judge"}``, JSONL, or a ``file``.

    As ``receive_upload``: the upload's files are deleted when the block ends.

    Raises:
        InputError: unreadable JSON, a bad ``judge``, a missing ``file`` (field named).
        UnsupportedMediaType: another content type.
    """
    async with receive_upload(request, JobBody) as upload:
        if upload.body is not None:
            yield JobUpload(upload.raw, upload.body.judge, upload.body.max_cost)
        else:
            form = upload.form
            yield JobUpload(upload.raw, _judge_field(form.get("judge")) if form else None)


def storable_id(declared: object) -> str | None:
    """The id an invalid item is stored and answered under: its own, NUL made visible.

    Item validation refuses a NUL in an id, but the refused item is still kept (its error entry,
    under the id it declared) and PostgreSQL's text cannot hold NUL: stored as U+FFFD, the entry
    is the same on every store and still names the item.
    """
    if declared is None:
        return None
    return str(declared).replace("\x00", "\ufffd")


def grade_limit(settings: ServiceSettings) -> ItemLimit:
    """How many items a grading job may have (``max_job_items``), and the messages beyond."""
    return ItemLimit(
        settings.max_job_items, "items: the job has no items",
        "items: {count} items exceed the limit of {most} per job",
    )


class GradeItems:
    """Validates a grading job's items one at a time (an ``api.jobs.staging.ItemCheck``).

    A bad item becomes an error entry (its line, for uploads), the others grading requests; an
    id already taken by a valid item is refused as a duplicate.

    Args:
        context_window: The judge's context window (which CharToM context a line grades with).
        settings: The service's limits on one request.
    """

    def __init__(self, *, context_window: int | None, settings: ServiceSettings) -> None:
        self.context_window = context_window
        self.settings = settings
        self.seen: set[str] = set()

    def __call__(self, index: int, raw: RawItem) -> JobItem:
        """The ``index``-th item (0-based, in input order) validated."""
        line, obj, problem = raw
        position = line if line is not None else index + 1
        declared_id = storable_id(obj.get("id") if isinstance(obj, dict) else None)
        error: ItemError | None = None
        request: GradeRequest | None = None
        if problem is not None:
            error = ItemError(type="invalid_input", message=problem, line=line)
        else:
            try:
                request = check_request(
                    chartom_to_request(obj, self.context_window, line=line), self.settings
                )
            except InputError as exc:
                error = ItemError(
                    type="invalid_input", message=with_line(str(exc), line), field=exc.field,
                    line=line,
                )
        item_id = (request.id if request is not None else declared_id) or str(position)
        if request is not None:
            if item_id in self.seen:
                request = None
                error = ItemError(
                    type="invalid_input", message=with_line(f"id: duplicate id {item_id!r}", line),
                    field="id", line=line,
                )
            self.seen.add(item_id)
        return JobItem(index, item_id, line, request, error)


def build_items(
    upload: JobUpload, *, context_window: int | None, settings: ServiceSettings
) -> list[JobItem]:
    """Validate every item of an upload at once (``GradeItems``), for a caller that needs them all.

    Raises:
        InputError: (field ``items``) no items, or more than ``settings.max_job_items``.
    """
    check = GradeItems(context_window=context_window, settings=settings)
    return [check(index, raw)
            for index, raw in enumerate(grade_limit(settings).counted(upload.raw))]


def with_line(message: str, line: int | None) -> str:
    """Prefix ``message`` with its 1-based line number when it came from an uploaded file."""
    return message if line is None or message.startswith("line ") else f"line {line}: {message}"
