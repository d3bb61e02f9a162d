"""Typed Python client of the bonusjudge HTTP service: ``JudgeClient`` and ``AsyncJudgeClient``.

The distribution ``bonusjudge-client`` installs this package alone, with httpx, pydantic, tenacity
and tqdm: no torch, litellm, FastAPI, SQLAlchemy or numpy, so a harness (inspect_ai,
lm-evaluation-harness, promptfoo) can grade through a running service from its own environment.
The full ``bonusjudge`` distribution depends on it: its service and engine use the very models of
:mod:`bonusjudge_client.wire` (requests, results, summaries, bodies), so client and server share
one definition of the contract and cannot drift apart.

Both clients speak the contract of the service and return the engine's own models
(``GradeResult``, ``ExtractResult``, ``Summary``), so code written against the in-process
``Grader`` reads the same against a remote service. They run on httpx and accept either a
transport or a whole client (``httpx.Client`` / ``httpx.AsyncClient``, or Starlette's
``TestClient``), so tests drive the app in-process (``TestClient(app)`` or
``httpx.ASGITransport(app=app)``) with no network.

One implementation serves both clients (sans-IO): every call is written once as a flow that
yields steps (send this request, sleep, read a streamed line) and reads their outcomes; the sync
client performs the steps with blocking calls, the async one awaits them. The package, by
responsibility:

``calls``      building and checking requests (``Call``), before anything is sent.
``answers``    reading answers: typed models, batch entries, the error an error answer means.
``retry``      ``RetryPolicy``, the one retry policy (tenacity), and ``parse_retry_after``.
``backoff``    the retry arithmetic the engine shares: full-jitter waits, ``Retry-After``.
``validation`` a pydantic error as one field and one line, worded as the service words it.
``flows``      the steps, the shared core (send with retries, resume a stream, poll) and the
               ``@operation`` / ``@streaming`` declarations that make one flow a method of both.
``workflows``  every call of the contract, declared once.
``sync``       ``JudgeClient``: the blocking driver, and ``grade_stream`` on a thread pool.
``aio``        ``AsyncJudgeClient``: the awaited driver, and ``grade_stream`` as tasks.
``errors``     the error tree.
``wire``       the models both sides share: ``grading`` (requests, results), ``schemas`` (bodies,
               jobs, errors), ``summary``, ``mcq``, ``scores``, ``options``, ``vocab``.

The drop-in scorers, each imported only by the harness that uses it (none is a requirement of
this package): ``inspect_ai`` (``bonusjudge_scorer``), ``lm_eval`` (``process_results`` and the
aggregations), ``promptfoo`` (``get_assert``), and ``harness``, what they share (an item mapping
as a request; BPC and penalty rate over a set, as the service's summary computes them).

The two clients have the same methods, with the same arguments and results: where
``JudgeClient.m`` returns ``T``, ``AsyncJudgeClient.m`` returns a coroutine of ``T``, and where it
returns an iterator (``grade_stream``, ``results``, ``mcq_results``), an async iterator of the
same items. ``grade_many`` returns the list of results in both (``await client.grade_many(items)``
in async code); ``grade_stream`` yields each ``(position, outcome)`` as its batch ends.
``AsyncJudgeClient`` also has ``aclose``, the async spelling of ``close``.

Retries (see ``bonusjudge_client.retry``): idempotent calls are retried on connection errors and on
429/503 answers with full-jitter exponential backoff floored at the service's ``Retry-After``;
``submit_job``, ``submit_mcq_job`` and ``calibrate`` create state on the server, so they are
retried only when the request never left. Read and write timeouts are not retried.

Beyond grading: multiple-choice scoring (``mcq``, ``submit_mcq_job`` then
``wait(id, kind="mcq")``, ``mcq_results``, ``mcq_summary``) and calibration (``calibrate``,
``calibration_status``, ``wait_calibration``, ``reports``, ``report``, ``report_markdown``,
``report_file``).

Errors form one tree under ``JudgeClientError`` (``bonusjudge_client.errors``): ``ClientHTTPError``,
``ClientConnectionError``, ``ClientTimeout``, ``ClientResponseError``, ``ClientItemError`` and
``ClientInputError`` (an invalid argument, raised before any request).
"""

from typing import TYPE_CHECKING

# Names load with their module on first use (PEP 562): a harness that imports the package for
# one scorer, or the sync client alone, does not pay for asyncio, the async client or every
# model of the contract at start-up.
_MODULES = {
    "API_KEY_ENV": "bonusjudge_client.calls",
    "AsyncHTTPClient": "bonusjudge_client.aio",
    "AsyncJudgeClient": "bonusjudge_client.aio",
    "BatchEntry": "bonusjudge_client.wire.schemas",
    "BertScore": "bonusjudge_client.wire.scores",
    "CalibrationJob": "bonusjudge_client.wire.schemas",
    "ClientConnectionError": "bonusjudge_client.errors",
    "ClientHTTPError": "bonusjudge_client.errors",
    "ClientInputError": "bonusjudge_client.errors",
    "ClientItemError": "bonusjudge_client.errors",
    "ClientResponseError": "bonusjudge_client.errors",
    "ClientTimeout": "bonusjudge_client.errors",
    "DEFAULT_BATCH_SIZE": "bonusjudge_client.calls",
    "DEFAULT_TIMEOUT": "bonusjudge_client.calls",
    "DEFAULT_URL": "bonusjudge_client.calls",
    "Defect": "bonusjudge_client.wire.grading",
    "ExtractRequest": "bonusjudge_client.wire.grading",
    "ExtractResult": "bonusjudge_client.wire.grading",
    "GradeRequest": "bonusjudge_client.wire.grading",
    "GradeResult": "bonusjudge_client.wire.grading",
    "GroupSummary": "bonusjudge_client.wire.summary",
    "Health": "bonusjudge_client.wire.schemas",
    "ItemError": "bonusjudge_client.wire.schemas",
    "ItemInput": "bonusjudge_client.calls",
    "JobKind": "bonusjudge_client.calls",
    "JobList": "bonusjudge_client.wire.schemas",
    "JobStatus": "bonusjudge_client.wire.schemas",
    "JudgeClient": "bonusjudge_client.sync",
    "JudgeClientError": "bonusjudge_client.errors",
    "JudgeInput": "bonusjudge_client.calls",
    "JudgeOverrides": "bonusjudge_client.wire.options",
    "McqEntry": "bonusjudge_client.wire.schemas",
    "McqInput": "bonusjudge_client.calls",
    "McqItem": "bonusjudge_client.wire.mcq",
    "McqResponse": "bonusjudge_client.wire.schemas",
    "McqResult": "bonusjudge_client.wire.mcq",
    "McqSummary": "bonusjudge_client.wire.mcq",
    "MetricPair": "bonusjudge_client.wire.schemas",
    "MetricsEntry": "bonusjudge_client.wire.schemas",
    "PointVerdict": "bonusjudge_client.wire.grading",
    "Readiness": "bonusjudge_client.wire.schemas",
    "ReportInfo": "bonusjudge_client.wire.schemas",
    "RetryPolicy": "bonusjudge_client.retry",
    "RougeScore": "bonusjudge_client.wire.scores",
    "RubricDetail": "bonusjudge_client.wire.schemas",
    "RubricList": "bonusjudge_client.wire.schemas",
    "RubricSummary": "bonusjudge_client.wire.schemas",
    "Summary": "bonusjudge_client.wire.summary",
    "SyncHTTPClient": "bonusjudge_client.sync",
    "TERMINAL_STATUSES": "bonusjudge_client.flows",
    "URL_ENV": "bonusjudge_client.calls",
    "WAIT_STATUSES": "bonusjudge_client.flows",
    "parse_retry_after": "bonusjudge_client.retry",
}

if TYPE_CHECKING:
    from bonusjudge_client.aio import AsyncHTTPClient, AsyncJudgeClient
    from bonusjudge_client.calls import (
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
    from bonusjudge_client.errors import (
        ClientConnectionError,
        ClientHTTPError,
        ClientInputError,
        ClientItemError,
        ClientResponseError,
        ClientTimeout,
        JudgeClientError,
    )
    from bonusjudge_client.flows import TERMINAL_STATUSES, WAIT_STATUSES
    from bonusjudge_client.retry import RetryPolicy, parse_retry_after
    from bonusjudge_client.sync import JudgeClient, SyncHTTPClient
    from bonusjudge_client.wire.grading import (
        Defect,
        ExtractRequest,
        ExtractResult,
        GradeRequest,
        GradeResult,
        PointVerdict,
    )
    from bonusjudge_client.wire.mcq import McqItem, McqResult, McqSummary
    from bonusjudge_client.wire.options import JudgeOverrides
    from bonusjudge_client.wire.schemas import (
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
    from bonusjudge_client.wire.scores import BertScore, RougeScore
    from bonusjudge_client.wire.summary import GroupSummary, Summary


def __getattr__(name: str) -> object:
    """Import the module that defines ``name`` on first use (see ``_MODULES``)."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'bonusjudge_client' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULES])

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "TERMINAL_STATUSES",
    "URL_ENV",
    "WAIT_STATUSES",
    "AsyncHTTPClient",
    "AsyncJudgeClient",
    "BatchEntry",
    "BertScore",
    "CalibrationJob",
    "ClientConnectionError",
    "ClientHTTPError",
    "ClientInputError",
    "ClientItemError",
    "ClientResponseError",
    "ClientTimeout",
    "Defect",
    "ExtractRequest",
    "ExtractResult",
    "GradeRequest",
    "GradeResult",
    "GroupSummary",
    "Health",
    "ItemError",
    "ItemInput",
    "JobKind",
    "JobList",
    "JobStatus",
    "JudgeClient",
    "JudgeClientError",
    "JudgeInput",
    "JudgeOverrides",
    "McqEntry",
    "McqInput",
    "McqItem",
    "McqResponse",
    "McqResult",
    "McqSummary",
    "MetricPair",
    "MetricsEntry",
    "PointVerdict",
    "Readiness",
    "ReportInfo",
    "RetryPolicy",
    "RougeScore",
    "RubricDetail",
    "RubricList",
    "RubricSummary",
    "Summary",
    "SyncHTTPClient",
    "parse_retry_after",
]
