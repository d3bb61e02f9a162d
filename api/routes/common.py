"""What several routers share: a guarded ``/v1`` router, and the stream of a job's results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from api.deps import JobsDep, OwnerDep
from api.errors import ERROR_RESPONSES


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
    router: APIRouter, path: str, *, kind: str, entry: str, summary: str, name: str
) -> None:
    """Add ``GET path``: the results of a ``kind`` job, one ``entry`` JSON object per line.

    Args:
        router: The job kind's router.
        path: The route's path (with ``{job_id}``).
        kind: The job kind (``grade``, ``mcq``); a job of another kind is not found.
        entry: The schema of a line, for the OpenAPI page (``BatchEntry``).
        summary: The route's summary.
        name: The route's name (its OpenAPI operation id is made from it).
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
        name=name,
        summary=summary,
        description="Entries finished so far, one JSON line each, in finishing order (partial "
        "while running).",
        response_class=StreamingResponse,
        responses={200: {"content": {"application/x-ndjson": {}},
                         "description": f"One `{entry}` JSON object per line."}},
    )
