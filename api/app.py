"""The app factory: settings -> engine -> routers, error handlers, limits, auth, metrics, jobs.

The service has no grading logic of its own: every route parses its request and calls one
function of the service layer (``api.services``), which grades with ``judge.engine.Grader`` or
stores a job (``api.jobs``). The app owns one grader, one job manager (started and stopped by
the lifespan), one private Prometheus registry, and an encoder warm-up thread for the readiness
check.

Middleware, outermost first: CORS (only when ``settings.cors_origins`` is set), request metrics,
body-size limit, synchronous bodies in flight (``api.limits``), the ledger of a request's graded
items (counted as graded once it is answered with success, else as refused). Both limits are
checked from ``Content-Length`` before anything is read, and again while the body streams in
(chunked uploads have no length).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from importlib import resources
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Lifespan, Message, Receive, Scope, Send

from api.budgets import KeyBudgets, require_price
from api.errors import BodyTooLarge, error_response, install_error_handlers
from api.jobs import JOBS_DB as JOBS_DB  # re-exported: the file's name, for tools and tests
from api.jobs import JobManager, WorkerSettings, open_store
from api.jobs.schema import GRADE
from api.limits import Allowance, SyncBodyLimit, content_length
from api.observability import (
    EncoderWarmup,
    ItemLedgerMiddleware,
    MetricsMiddleware,
    Observability,
)
from api.openapi import install_openapi
from api.routes import (
    calibration,
    estimate,
    grade,
    health,
    jobs,
    mcq,
    metrics,
    rubrics,
    usage,
)
from api.services import calibration as calibration_service
from api.services import grade_jobs
from api.services import mcq as mcq_service
from api.settings import ServiceSettings, load_service_settings
from judge.cache import open_cache
from judge.config import JudgeConfig
from judge.engine import BONUSJUDGE_VERSION, Grader

log = logging.getLogger("bonusjudge.api")

DOCS_STATIC = "/static/docs"
"""Where the Swagger UI and ReDoc assets of ``/docs`` and ``/redoc`` are served from."""

_DESCRIPTION = """\
LLM-as-judge grading with the CharToM-QA bonus-point protocol: bonus-point coverage (BPC),
defects (penalty rate), ROUGE-L and BERTScore, for one item, a batch, or a persisted job.
Multiple-choice scoring (`/v1/mcq`) and calibration against human ratings (`/v1/calibrate`,
`/v1/reports`) run on the same job machinery.

Errors always have the body `{"error": {"type", "message", "field"}}`. When API keys are
configured, every route but `/healthz` and `/readyz` needs `Authorization: Bearer <key>`.
"""


class BodyLimitMiddleware:
    """Rejects request bodies larger than ``limit`` bytes with 413 (uniform error body).

    Args:
        app: The wrapped app.
        limit: Largest accepted body, in bytes.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = content_length(scope)
        if declared is not None and declared > self.limit:
            response = error_response(
                413, "payload_too_large",
                f"request body of {declared} bytes exceeds the limit of {self.limit} bytes",
            )
            await response(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as exc:
            # Normally the error handlers answer first; this covers a body read outside them.
            if started:
                raise
            response = error_response(413, "payload_too_large", str(exc.detail))
            await response(scope, receive, send)


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with assets from this installation.

    FastAPI's own pages load their JavaScript, CSS and favicon from CDNs, so they are blank on a
    machine without internet. The assets here are the files the ``fastapi-offline`` package
    ships, mounted under ``DOCS_STATIC``. Like ``/openapi.json``, the pages and the assets need
    no API key: they describe the API and hold no data.

    Args:
        app: An app built with ``docs_url=None, redoc_url=None``.
    """
    assets = resources.files("fastapi_offline") / "static"
    app.mount(DOCS_STATIC, StaticFiles(directory=str(assets)), name="docs-static")
    openapi_url = app.openapi_url or "/openapi.json"

    def swagger_ui(spec: str, static: str) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=spec, title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{static}/swagger-ui-bundle.js",
            swagger_css_url=f"{static}/swagger-ui.css",
            swagger_favicon_url=f"{static}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    def redoc(spec: str, static: str) -> HTMLResponse:
        # No Google Fonts either: ReDoc falls back to the browser's fonts.
        return get_redoc_html(
            openapi_url=spec, title=f"{app.title} - ReDoc",
            redoc_js_url=f"{static}/redoc.standalone.js",
            redoc_favicon_url=f"{static}/favicon.png", with_google_fonts=False,
        )

    def served(page: Callable[[str, str], HTMLResponse]) -> Callable[..., Awaitable[HTMLResponse]]:
        async def route(request: Request) -> HTMLResponse:
            # Behind a proxy serving the app under a prefix, every URL the page loads needs it.
            root = str(request.scope.get("root_path", "")).rstrip("/")
            return page(root + openapi_url, root + DOCS_STATIC)

        return route

    for path, page in (("/docs", swagger_ui), ("/redoc", redoc)):
        app.add_api_route(path, served(page), methods=["GET"], include_in_schema=False)


def build_grader(settings: ServiceSettings) -> Grader:
    """The engine for these settings: the default judge and the cache they choose.

    The cache is open even when the default judge config has caching off: a request may turn
    it on (its ``cache`` option decides per call).

    Raises:
        ConfigError: ``cache_url`` is not a Redis URL redis-py can read.
    """
    return Grader(
        settings.judge, cache=open_cache(settings), cache_scope=settings.resolved_cache_scope()
    )


_serving: ContextVar[FastAPI] = ContextVar("bonusjudge_serving_app")
"""The app handling the current request (``_ServingApp`` sets it), for its overrides."""


class _ServingAppOverrides:
    """``dependency_overrides`` of whichever app is handling the current request.

    The routes below are shared by every app of the process (see ``_SERVICE_ROUTES``), so the
    object FastAPI asks for dependency overrides cannot be one app: it is this, which answers
    with the serving app's own ``app.dependency_overrides``, as a route included per app would.
    """

    @property
    def dependency_overrides(self) -> dict[Callable[..., Any], Callable[..., Any]]:
        """The serving app's overrides; none outside a request."""
        app = _serving.get(None)
        return app.dependency_overrides if app is not None else {}


class _ServingApp:
    """Marks, for the routes' dependency overrides, which app handles each request.

    Args:
        app: The wrapped ASGI app.
        owner: The FastAPI app this middleware belongs to.
    """

    def __init__(self, app: ASGIApp, owner: FastAPI) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection as ``owner``'s."""
        token = _serving.set(self.owner)
        try:
            await self.app(scope, receive, send)
        finally:
            _serving.reset(token)


def _service_routes() -> list[BaseRoute]:
    """Every route module's router, included once per process.

    An included router builds its routes (dependencies, request and response models) on its
    first request: 0.08-0.13 s of CPU, which ``app.include_router`` made every app pay again
    (the tests build hundreds). These included routers are built once and shared by every app;
    they are what ``include_router`` gives an app, the app adding no prefix, tag or dependency,
    so the paths, models and OpenAPI document are the same.
    """
    shared = APIRouter(dependency_overrides_provider=_ServingAppOverrides())
    for module in (grade, estimate, jobs, mcq, calibration, metrics, rubrics, usage, health):
        shared.include_router(module.router)
    return list(shared.routes)


_SERVICE_ROUTES = _service_routes()

_DOCUMENT: dict[str, Any] = {}
"""The OpenAPI document of ``service_app``'s apps, once the first has built it: every app of a
process serves the same routes (``_SERVICE_ROUTES``), so they serve the same document."""


def service_app(lifespan: Lifespan[FastAPI] | None = None) -> FastAPI:
    """The service's routes, API documentation and error handlers, without state or middleware.

    What ``create_app`` serves, and all the OpenAPI document depends on: the document is the
    same whatever the settings, so ``openapi_document`` builds it from this alone, and the
    apps of one process build it once (``_DOCUMENT``).

    Args:
        lifespan: What runs around the app's life (``create_app``'s starts the job runner).
    """
    app = FastAPI(
        title="bonusjudge",
        version=BONUSJUDGE_VERSION,
        description=_DESCRIPTION,
        lifespan=lifespan,
        # FastAPI's pages load from CDNs; install_docs serves them from installed files.
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    install_docs(app)
    app.router.routes.extend(_SERVICE_ROUTES)
    app.add_middleware(_ServingApp, owner=app)
    install_openapi(app, [jobs.UPLOAD, mcq.UPLOAD], shared=_DOCUMENT)
    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document the service serves at ``/openapi.json`` (no settings, no state)."""
    return service_app().openapi()


def create_app(
    settings: ServiceSettings | None = None,
    *,
    grader: Grader | None = None,
    lease_seconds: float | None = None,
    poll_seconds: float = 1.0,
    drain_timeout: float = 30.0,
    warm_up: Callable[[JudgeConfig], None] | None = None,
) -> FastAPI:
    """Build the grading service.

    Args:
        settings: Service settings (default: ``load_service_settings()`` from the environment / the
            ``BONUSJUDGE_SETTINGS_FILE``; a bad setting raises ``ConfigError`` naming it).
        grader: The engine (default: one built from ``settings.judge`` with the on-disk cache).
            Its config is the default judge. Tests inject one with a ``FakeProvider``.
        lease_seconds: Job lease length (another worker takes over a job this long after its
            runner stopped renewing); default ``settings.job_lease_seconds``.
        poll_seconds: How often the job runner renews leases and looks for unclaimed jobs.
        drain_timeout: On shutdown, how long in-flight job items may take to finish.
        warm_up: What the start-up warm-up runs on the default judge config (default:
            ``judge.loading.warm_up``, the loader ``Grader.prepare`` uses). Tests inject a slow
            one to hold the service in its warm-up.

    Returns:
        The FastAPI app. Jobs start running in its lifespan.
    """
    settings = settings if settings is not None else load_service_settings()
    owns_grader = grader is None
    engine = grader if grader is not None else build_grader(settings)
    data_dir = settings.resolved_data_dir()
    require_price(settings.max_cost_per_key_usd, engine.config)
    store = open_store(settings)
    worker_settings = WorkerSettings(
        lease_seconds=settings.job_lease_seconds if lease_seconds is None else lease_seconds,
        poll_seconds=poll_seconds, drain_timeout=drain_timeout,
        retention_seconds=settings.retention_days * 86_400,
    )
    manager = JobManager(store, engine, worker_settings=worker_settings)
    # The budgets are the service's policy: the synchronous routes and every job runner charge
    # the same books (their spend is kept in the store's rows).
    budgets = KeyBudgets(store, max_cost_per_key=settings.max_cost_per_key_usd)
    # Every job kind shares the store and the leases; this process runs them all. Grading jobs
    # stop feeding items when halted, so they can make room for other keys.
    manager.register(GRADE, grade_jobs.grade_runner(budgets), yields=True)
    manager.register(mcq_service.MCQ, mcq_service.mcq_runner(budgets))
    manager.register(
        calibration_service.CALIBRATE, calibration_service.make_runner(settings, budgets),
        purge=calibration_service.report_remover(settings),
    )
    observability = Observability(engine, store.status_counts)
    default = engine.config
    warmup = EncoderWarmup(default, loader=warm_up)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        warmup.start()
        await budgets.start()
        await manager.start()
        log.info(
            "bonusjudge %s serving: judge=%s, auth=%s, data=%s", BONUSJUDGE_VERSION,
            default.model or "(none)", "api keys" if settings.api_keys else "off", data_dir,
        )
        try:
            yield
        finally:
            await manager.stop()
            await budgets.stop()  # what the stopped runners' judge calls spent, written last
            if owns_grader:
                await engine.aclose()
                engine.caller.cache.close()
            store.close()

    app = service_app(lifespan)
    app.state.settings = settings
    app.state.grader = engine
    app.state.jobs = manager
    app.state.budgets = budgets
    app.state.observability = observability
    app.state.warmup = warmup
    app.state.sync_items = Allowance.items(settings)
    app.state.sync_bytes = Allowance.body_bytes(settings)
    # add_middleware prepends: the last added is the outermost. A body over max_body_bytes is
    # refused (413) before it is held against the synchronous-work limits. Innermost, a
    # request's graded items are counted once its answer's status is known.
    app.add_middleware(ItemLedgerMiddleware)
    app.add_middleware(SyncBodyLimit, settings=settings, allowance=app.state.sync_bytes)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, observability=observability)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    return app


def app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory api.app:app_from_env`` (one call per worker process).

    Settings come from ``BONUSJUDGE_*`` variables and ``BONUSJUDGE_SETTINGS_FILE``.
    """
    return create_app(load_service_settings())
