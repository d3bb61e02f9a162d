"""Dependencies of the routes (``Annotated`` aliases): the app's objects and the caller.

``get_settings`` and ``get_grader`` read what ``create_app`` stored on the app; tests replace them
with ``app.dependency_overrides``. ``ReadyDep`` is the grading routes' readiness gate: while the
start-up warm-up is still loading the encoder a request needs, the request gets 503 with
``Retry-After`` instead of loading it concurrently (or failing with a 500). The judge selection
of a request is a service (``api.services.judges.select_judge``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar, cast

from fastapi import Depends, Request

from api.auth import authenticate, authenticate_operator
from api.budgets import KeyBudgets
from api.errors import Unavailable
from api.jobs import JobManager
from api.limits import Allowance
from api.observability import EncoderWarmup, Observability
from api.settings import ServiceSettings
from judge.config import JudgeConfig
from judge.engine import TENANT, Grader
from judge.loading import needs_encoder

_T = TypeVar("_T")

WARMUP_RETRY_AFTER = 5
"""Seconds a request refused during the encoder warm-up is told to wait (``Retry-After``)."""


def _app_state(name: str, kind: type[_T], doc: str) -> Callable[[Request], Awaitable[_T]]:
    """A dependency returning the ``kind`` object ``create_app`` stored on the app as ``name``.

    Async, as every dependency here: FastAPI runs a sync dependency in a worker thread, and a
    request to ``/v1/grade`` would make five thread round trips for five attribute reads.
    """

    async def dependency(request: Request) -> _T:
        return cast("_T", getattr(request.app.state, name))

    dependency.__name__ = dependency.__qualname__ = f"get_{name}"
    dependency.__doc__ = doc
    return dependency


get_settings = _app_state(
    "settings", ServiceSettings, "The service's settings (validated at start-up)."
)
get_grader = _app_state(
    "grader", Grader, "The grading engine shared by every request of this process."
)
get_jobs = _app_state("jobs", JobManager, "The job runner of this process.")
get_budgets = _app_state(
    "budgets", KeyBudgets, "The cost budgets: each key's per UTC day, each running job's own."
)
get_observability = _app_state(
    "observability", Observability, "The app's Prometheus registry and instruments."
)
get_warmup = _app_state("warmup", EncoderWarmup, "The app's start-up encoder warm-up.")

get_sync_items = _app_state(
    "sync_items", Allowance, "Items each API key has in flight on the synchronous grading routes."
)

SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]
GraderDep = Annotated[Grader, Depends(get_grader)]
JobsDep = Annotated[JobManager, Depends(get_jobs)]
BudgetsDep = Annotated[KeyBudgets, Depends(get_budgets)]
ObservabilityDep = Annotated[Observability, Depends(get_observability)]
SyncItemsDep = Annotated[Allowance, Depends(get_sync_items)]


class EncoderLoading(Unavailable):
    """The encoder a request needs is still loading at start-up (503 ``unavailable``).

    Args:
        name: What is loading (the warm-up's display name).
    """

    def __init__(self, name: str) -> None:
        super().__init__(
            f"the service is still loading {name}; retry in {WARMUP_RETRY_AFTER} s "
            "(GET /readyz answers 200 once it is loaded)",
            retry_after=WARMUP_RETRY_AFTER,
        )


class ReadyGate:
    """The readiness gate of the grading routes (see :data:`ReadyDep`).

    Args:
        warmup: The app's start-up warm-up.
    """

    def __init__(self, warmup: EncoderWarmup) -> None:
        self.warmup = warmup

    def require(self, config: JudgeConfig) -> None:
        """Refuse a request graded with ``config`` while an encoder it uses is still loading.

        Raises:
            EncoderLoading: (503, ``Retry-After``) the warm-up is still loading.
        """
        self.require_encoder(needs_encoder(config))

    def require_encoder(self, needed: bool = True) -> None:
        """Refuse a request that uses an encoder (``needed``) while the warm-up is loading one.

        Any encoder counts, not only the one being loaded: loading another would wait for the
        same load lock anyway, with the request held open meanwhile.

        Args:
            needed: Whether the request computes BERTScore or embedded-matcher coverage.

        Raises:
            EncoderLoading: (503, ``Retry-After``) the warm-up is still loading.
        """
        if needed and self.warmup.loading:
            raise EncoderLoading(self.warmup.name)


WarmupDep = Annotated[EncoderWarmup, Depends(get_warmup)]


async def get_ready_gate(warmup: WarmupDep) -> ReadyGate:
    """The readiness gate over the app's encoder warm-up."""
    return ReadyGate(warmup)


ReadyDep = Annotated[ReadyGate, Depends(get_ready_gate)]
"""Readiness gate: a route calls ``require(config)`` (or ``require_encoder``) once it knows what
the request computes; 503 with ``Retry-After`` while the encoder it needs is still loading."""


async def require_owner(request: Request, settings: SettingsDep) -> str:
    """Authenticate the request; the caller's identity (key digest, or "" when auth is off)."""
    return authenticate(request, settings)


async def require_operator(request: Request, settings: SettingsDep) -> None:
    """Let only an operator key through (when keys are configured): 401, or 403 for an API key."""
    authenticate_operator(request, settings)


OwnerDep = Annotated[str, Depends(require_owner)]
"""The authenticated caller; raises 401 when keys are configured and none valid is sent."""


@dataclass(frozen=True)
class JobContext:
    """What a job submission takes besides the request: the app's objects and the caller.

    Attributes:
        jobs: The job manager.
        grader: The engine; its config is the default judge.
        settings: Limits, allow-list and quotas.
        owner: The caller, who will own the job.
        budgets: The cost budgets a submission is checked against.
    """

    jobs: JobManager
    grader: Grader
    settings: ServiceSettings
    owner: str
    budgets: KeyBudgets


async def get_job_context(
    jobs: JobsDep, grader: GraderDep, settings: SettingsDep, owner: OwnerDep,
    budgets: BudgetsDep,
) -> JobContext:
    """The context of a job submission (authenticates the caller)."""
    return JobContext(jobs, grader, settings, owner, budgets)


JobContextDep = Annotated[JobContext, Depends(get_job_context)]
"""The context of a job submission; raises 401 as :data:`OwnerDep` does."""


async def bind_tenant(owner: OwnerDep) -> str:
    """Authenticate, and make the caller the tenant of this request's judge calls.

    Async on purpose: a sync dependency runs in a worker thread's copy of the context, and the
    tenant set there would never reach the route.
    """
    TENANT.set(owner)
    return owner
