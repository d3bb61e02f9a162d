"""Typed Python client of the bonusjudge HTTP service: ``JudgeClient`` and ``AsyncJudgeClient``.

Both clients speak the contract of ``api/app.py`` and return the engine's own models
(``GradeResult``, ``ExtractResult``, ``Summary``), so code written against the in-process
``Grader`` reads the same against a remote service. They run on httpx and accept either a
transport or a whole client (``httpx.Client`` / ``httpx.AsyncClient``, or Starlette's
``TestClient``), so tests drive the app in-process (``TestClient(app)`` or
``httpx.ASGITransport(app=app)``) with no network.

This package imports only httpx, pydantic, tqdm, tenacity, ``judge`` models and ``api.schemas``
(the service's wire models, which are plain pydantic), never FastAPI: the CLI uses it on
machines that run only the client. Sharing ``api.schemas`` with the service means the two cannot
drift apart.

One implementation serves both clients (sans-IO): every call is written once as a flow that
yields steps (send this request, sleep, read a streamed line) and reads their outcomes; the sync
client performs the steps with blocking calls, the async one awaits them. The package, by
responsibility:

``calls``      building and checking requests (``Call``), before anything is sent.
``answers``    reading answers: typed models, batch entries, the error an error answer means.
``retry``      ``RetryPolicy``, the one retry policy (tenacity), and ``parse_retry_after``.
``flows``      the steps, the shared core (send with retries, resume a stream, poll) and the
               ``@operation`` / ``@streaming`` declarations that make one flow a method of both.
``workflows``  every call of the contract, declared once.
``sync``       ``JudgeClient``: the blocking driver, and ``grade_stream`` on a thread pool.
``aio``        ``AsyncJudgeClient``: the awaited driver, and ``grade_stream`` as tasks.
``errors``     the error tree.

The two clients have the same methods, with the same arguments and results: where
``JudgeClient.m`` returns ``T``, ``AsyncJudgeClient.m`` returns a coroutine of ``T``, and where it
returns an iterator (``grade_stream``, ``results``, ``mcq_results``), an async iterator of the
same items. ``grade_many`` returns the list of results in both (``await client.grade_many(items)``
in async code); ``grade_stream`` yields each ``(position, outcome)`` as its batch ends.
``AsyncJudgeClient`` also has ``aclose``, the async spelling of ``close``.

Retries (see ``api.client.retry``): idempotent calls are retried on connection errors and on
429/503 answers with full-jitter exponential backoff floored at the service's ``Retry-After``;
``submit_job``, ``submit_mcq_job`` and ``calibrate`` create state on the server, so they are
retried only when the request never left. Read and write timeouts are not retried.

Beyond grading: multiple-choice scoring (``mcq``, ``submit_mcq_job`` then
``wait(id, kind="mcq")``, ``mcq_results``, ``mcq_summary``) and calibration (``calibrate``,
``calibration_status``, ``wait_calibration``, ``reports``, ``report``, ``report_markdown``,
``report_file``).

Errors form one tree under ``JudgeClientError`` (``api.client.errors``): ``ClientHTTPError``,
``ClientConnectionError``, ``ClientTimeout``, ``ClientResponseError``, ``ClientItemError`` and
``ClientInputError`` (an invalid argument, raised before any request).
"""

from api.client.aio import AsyncHTTPClient, AsyncJudgeClient
from api.client.calls import (
    API_KEY_ENV,
    DEFAULT_BATCH_SIZE,
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    URL_ENV,
    ItemInput,
    JobKind,
    JudgeInput,
    McqInput,
)
from api.client.errors import (
    ClientConnectionError,
    ClientHTTPError,
    ClientInputError,
    ClientItemError,
    ClientResponseError,
    ClientTimeout,
    JudgeClientError,
)
from api.client.flows import TERMINAL_STATUSES
from api.client.retry import RetryPolicy, parse_retry_after
from api.client.sync import JudgeClient, SyncHTTPClient
from api.schemas import (
    BatchEntry,
    CalibrationJob,
    Health,
    ItemError,
    JobList,
    JobStatus,
    McqEntry,
    McqResponse,
    MetricPair,
    MetricsEntry,
    Readiness,
    ReportInfo,
    RubricDetail,
    RubricList,
    RubricSummary,
)

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "TERMINAL_STATUSES",
    "URL_ENV",
    "AsyncHTTPClient",
    "AsyncJudgeClient",
    "BatchEntry",
    "CalibrationJob",
    "ClientConnectionError",
    "ClientHTTPError",
    "ClientInputError",
    "ClientItemError",
    "ClientResponseError",
    "ClientTimeout",
    "Health",
    "ItemError",
    "ItemInput",
    "JobKind",
    "JobList",
    "JobStatus",
    "JudgeClient",
    "JudgeClientError",
    "JudgeInput",
    "McqEntry",
    "McqInput",
    "McqResponse",
    "MetricPair",
    "MetricsEntry",
    "Readiness",
    "ReportInfo",
    "RetryPolicy",
    "RubricDetail",
    "RubricList",
    "RubricSummary",
    "SyncHTTPClient",
    "parse_retry_after",
]
