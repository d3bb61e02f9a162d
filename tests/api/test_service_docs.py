"""docs/service.md documents every route of the service, and no route the service lacks.

The route table there is what users read to call the service; a route added or renamed in
``api/`` without its row (or a row left for a route that is gone) fails here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from starlette.routing import Route

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"
# `| GET | `/v1/jobs/{id}` | ...`; one row may list several paths (`/docs`, `/redoc`, ...).
ROW = re.compile(r"^\| (GET|POST|PUT|PATCH|DELETE) \| (`[^|]+`) \|", re.M)


def normalized(path: str) -> str:
    """A path with every parameter written `{id}`, as the docs write them (`{name:path}` too)."""
    path = re.sub(r"\{name(:path)?\}", "{name}", path)
    return re.sub(r"\{(job_id|report_id|rubric_id)\}", "{id}", path)


def documented() -> set[tuple[str, str]]:
    """The (method, path) pairs of the route table of docs/service.md."""
    pairs = set()
    for method, cell in ROW.findall(DOC.read_text(encoding="utf-8")):
        for path in re.findall(r"`([^`]+)`", cell):
            pairs.add((method, path))
    return pairs


def served(app: FastAPI) -> set[tuple[str, str]]:
    """The (method, path) pairs the app answers, HEAD aside.

    The routers' routes are read from the OpenAPI schema (FastAPI keeps included routers as
    private objects); the routes outside it (the API docs' pages) from the app's own list.
    """
    pairs = {
        (method.upper(), normalized(path))
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    for route in app.routes:
        if isinstance(route, Route):
            pairs |= {(method, normalized(route.path)) for method in route.methods or ()}
    return {(method, path) for method, path in pairs if method != "HEAD"}


def test_every_route_is_documented(make_app: Callable[..., FastAPI]) -> None:
    routes = served(make_app())
    assert len(routes) >= 25  # the app was read, not an empty router
    assert routes - documented() == set(), "routes missing from docs/service.md's table"


def test_no_documented_route_is_missing_from_the_service(
    make_app: Callable[..., FastAPI],
) -> None:
    assert documented() - served(make_app()) == set(), "docs/service.md lists routes not served"
