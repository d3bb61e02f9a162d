"""The OpenAPI document as a contract: what FastAPI builds, plus the schemas it cannot see.

FastAPI documents a request body only when a route declares one; the job submission routes read
the raw request instead (JSON, JSON Lines or a multipart ``file``: ``api.jobs.uploads``), so
their three bodies are written by hand (``UploadDoc.operation``) and refer to named schemas that
only this step adds to ``components``. Everything else in the document is FastAPI's own.

The document is a reviewed file of the repository (``docs/openapi.json``, written by
``bonusjudge openapi --out docs/openapi.json``); a test fails when the served document drifts
from it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.models import Schema

from api.jobs.uploads import UploadDoc


def add_schemas(document: dict[str, Any], schemas: dict[str, dict[str, Any]]) -> None:
    """Add named schemas to ``document``'s components, keeping them sorted by name as FastAPI does.

    A name FastAPI already uses must hold the same schema: two different schemas under one name
    would leave one of them undocumented.

    Raises:
        ValueError: a name already holds a different schema.
    """
    components = document.setdefault("components", {}).setdefault("schemas", {})
    for name, given in schemas.items():
        # The form FastAPI writes its own schemas in (no null values, numbers as its models read
        # them), so that a model FastAPI has documented too compares equal.
        schema = jsonable_encoder(Schema.model_validate(given), by_alias=True, exclude_none=True)
        if name in components and components[name] != schema:
            raise ValueError(
                f"two different schemas are named {name!r} in the OpenAPI document; rename one"
            )
        components[name] = schema
    document["components"]["schemas"] = dict(sorted(components.items()))


def install_openapi(
    app: FastAPI, uploads: Iterable[UploadDoc], *, shared: dict[str, Any] | None = None
) -> None:
    """Make ``app.openapi()`` FastAPI's document plus the schemas of the ``uploads``' bodies.

    The document is built once, on first use, as FastAPI's is (``/openapi.json`` serves it).

    Args:
        app: The service, its routes included.
        uploads: The ``UploadDoc`` of every route that reads its own submission.
        shared: For apps whose documents are the same (``api.app.service_app``'s): the document
            of the first that built one (empty until then), which the others copy instead of
            building it again (0.3-0.5 s of CPU each).
    """
    build: Callable[[], dict[str, Any]] = app.openapi
    docs = tuple(uploads)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            if shared:
                app.openapi_schema = copy.deepcopy(shared)  # each app's document is its own
                return app.openapi_schema
            document = build()  # FastAPI's own, which it caches on the app
            for upload in docs:
                add_schemas(document, upload.schemas())
            app.openapi_schema = document
            if shared is not None:
                shared.update(copy.deepcopy(document))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented customisation


def render(document: dict[str, Any]) -> str:
    """The document as the checked-in file holds it: indented JSON, UTF-8 text, final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
