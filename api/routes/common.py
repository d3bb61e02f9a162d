"""What several routers share: a guarded ``/v1`` router, and the stream of a job's results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from api.deps import JobsDep, OwnerDep
from api.errors import ERROR_RESPONSES, error_responses
from api.jobs.uploads import COMPONENTS, JSONL_MEDIA_TYPE, jsonl_schema


def guarded_router(prefix: str, tag: str, guard: Callable[..., Any]) -> APIRouter:
    """A router whose every route runs ``guard`` first and documents the error answers.

    Args:
        prefix: The routes' common path (``/v1``, ``/v1/rubrics``).
        tag: The OpenAPI tag the routes are listed under.
        guard: The dependency that authenticates the caller (``require_owner``, ``bind_tenant``).
    """
    return APIRouter(
        prefix=prefix, tags=[tag], dependencies=[Depends(guard)], responses=ERROR_RESPONSES
    )


def add_results_route(
    router: APIRouter, path: str, *, kind: str, entry: type[BaseModel], summary: str,
    operation_id: str,
) -> None:
    """Add ``GET path``: the results of a ``kind`` job, one ``entry`` JSON object per line.

    Args:
        router: The job kind's router.
        path: The route's path (with ``{job_id}``).
        kind: The job kind (``grade``, ``mcq``); a job of another kind is not found.
        entry: The model of a line (``BatchEntry``); the document names it, so some route must
            return it in JSON too (it is then among the document's schemas).
        summary: The route's summary.
        operation_id: The route's OpenAPI operation id (``getJobResults``).
    """

    async def results(
        job_id: str,
        jobs: JobsDep,
        owner: OwnerDep,
        offset: Annotated[int, Query(ge=0, description="Skip the first N finished entries.")] = 0,
    ) -> StreamingResponse:
        lines = await jobs.entries(job_id, owner, offset, kind)
        return StreamingResponse(lines, media_type="application/x-ndjson")

    router.add_api_route(
        path,
        results,
        methods=["GET"],
        operation_id=operation_id,
        summary=summary,
        description="Entries finished so far, one JSON line each, in finishing order (partial "
        "while running).",
        response_class=StreamingResponse,
        responses={
            200: {
                "content": {JSONL_MEDIA_TYPE: {"schema": jsonl_schema(
                    {"type": "array", "items": {"$ref": COMPONENTS + entry.__name__}},
                    f"One `{entry.__name__}` JSON object per line.",
                )}},
                "description": f"One `{entry.__name__}` JSON object per line.",
            },
            **error_responses(404),
        },
    )
