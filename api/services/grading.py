"""Synchronous grading: one item, a batch, and bonus-point extraction.

A request the caller waits on must not hold its connection through a provider outage (jobs wait
it out instead): while the judge's circuit breaker is open it answers 503 at once, and its items
do not wait for the breaker (the engine is told so: ``max_outage=0``). What was graded before the
breaker opened is in the cache, so the caller's retry costs nothing. ``_refuse_outage`` is the
one check, before grading and again with what the grading found.

Under a cost budget (``max_cost_per_key_usd``) a request runs with its key's day cap in force
(``judge.budget.BUDGET``): a key over it is answered 429 ``budget_exhausted`` before anything is
graded or extracted, and a request that reaches it midway is answered the same, its finished
calls kept in the cache for the retry.

The items a key has in flight here are limited (``api.limits.Allowance.items``, 429 beyond
``max_sync_items_per_key``), and the grader hands its slots out fairly between keys, so one key's
batches cannot hold back another key's item.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError

from api.budgets import KeyBudgets
from api.deps import ReadyGate
from api.errors import ProviderOutage, classify
from api.jobs import check_request
from api.limits import Allowance
from api.services.judges import select_judge
from api.settings import ServiceSettings
from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.grading import ExtractResult, GradeRequest, GradeResult
from bonusjudge_client.wire.schemas import (
    BatchBody,
    BatchEntry,
    BatchResponse,
    ExtractBody,
    GradeBody,
    ItemError,
)
from core.errors import InputError, JudgeError
from judge.config import JudgeConfig
from judge.engine import TENANT, Grader


async def grade_one(
    body: GradeBody, *, grader: Grader, settings: ServiceSettings, ready: ReadyGate,
    items: Allowance, owner: str, budgets: KeyBudgets,
) -> GradeResult:
    """Grade one response with the judge the body selects, as one of ``owner``'s ``items``.

    Raises:
        InputError: an invalid judge selection or a request over the service's limits.
        QuotaExceeded: ``owner`` already has its ``items`` in flight (429, ``Retry-After``).
        OverBudget: ``owner``'s judge calls reached its day's budget (before or during).
        ProviderOutage: the judge's circuit breaker is open (or opened during the call).
        EncoderLoading: the encoder the judge needs is still loading.
    """
    config = select_judge(grader=grader, settings=settings, overrides=body.judge)
    _refuse_outage(grader, config)
    ready.require(config)
    request = check_request(body.to_request(), settings)
    async with budgets.charged(owner, config):
        with items.holding(owner, 1):
            # An item without an id is item "1", as the first item of a batch is.
            result = await grader.grade(request, config=config, item_id="1", max_outage=0)
    _refuse_outage(grader, config, stopped=_stopped_by_outage([result]))
    await _raise_if_over_budget(budgets, owner, [result])
    return result


async def grade_batch(
    body: BatchBody, *, grader: Grader, settings: ServiceSettings, ready: ReadyGate,
    items: Allowance, owner: str, budgets: KeyBudgets,
) -> BatchResponse:
    """Grade up to ``settings.max_batch`` items concurrently; a bad item gets an error entry.

    The batch's items count against ``owner``'s ``items`` until it is answered.

    Raises:
        InputError: (field ``items``) too many items, or an invalid judge selection.
        QuotaExceeded: ``owner``'s items in flight would exceed the limit (429, ``Retry-After``).
        OverBudget: ``owner``'s judge calls reached its day's budget (before or during).
        ProviderOutage: the judge's circuit breaker is open (or stopped an item).
        EncoderLoading: the encoder the judge needs is still loading.
    """
    if len(body.items) > settings.max_batch:
        raise InputError(
            f"items: {len(body.items)} items exceed the batch limit of {settings.max_batch}; "
            "submit a job (POST /v1/jobs) for more",
            field="items",
        )
    config = select_judge(grader=grader, settings=settings, overrides=body.judge)
    _refuse_outage(grader, config)
    ready.require(config)
    async with budgets.charged(owner, config):
        with items.holding(owner, len(body.items)):
            entries = await asyncio.gather(
                *(_entry(grader, config, settings, index, item)
                  for index, item in enumerate(body.items))
            )
    results = [e.result for e in entries if e.result is not None]
    _refuse_outage(grader, config, stopped=_stopped_by_outage(results))
    await _raise_if_over_budget(budgets, owner, results)
    return BatchResponse(results=list(entries))


async def extract_points(
    body: ExtractBody, *, grader: Grader, settings: ServiceSettings, owner: str, budgets: KeyBudgets
) -> ExtractResult:
    """Split a reference answer into bonus points with the extraction rubric (needs an LLM).

    Its requests reserve against ``owner``'s day budget, as grading's do.

    Raises:
        JudgeNotConfigured: no judge model is configured.
        OverBudget: ``owner``'s judge calls reached its day's budget (before or during).
        ProviderOutage: the judge's circuit breaker is open.
    """
    config = select_judge(grader=grader, settings=settings, overrides=body.judge, needs_llm=True)
    _refuse_outage(grader, config)
    async with budgets.charged(owner, config):
        result = await grader.extract_points(body.to_request(), config=config, max_outage=0)
    if result.reason == "circuit_open":
        _refuse_outage(grader, config, stopped=True)
    if result.reason == "budget_exhausted":
        raise await budgets.refusal(owner)
    return result


async def _raise_if_over_budget(
    budgets: KeyBudgets, owner: str, results: list[GradeResult]
) -> None:
    """Answer 429 when the key's cap refused a call of ``results`` (their paid calls are cached).

    Raises:
        OverBudget: a call of ``results`` ended ``budget_exhausted``.
    """
    if any(
        reason.endswith(": budget_exhausted") for r in results for reason in r.unscored_reasons
    ):
        raise await budgets.refusal(owner)


def _stopped_by_outage(results: list[GradeResult]) -> bool:
    """Whether the judge's open breaker ended a call of one of ``results`` (``circuit_open``)."""
    return any(reason.endswith("circuit_open") for r in results for reason in r.unscored_reasons)


def _refuse_outage(grader: Grader, config: JudgeConfig, *, stopped: bool = False) -> None:
    """Answer 503 while the judge's breaker holds this caller back, or when it ``stopped`` a call.

    Asked before a request is graded (nothing is sent during an outage) and again with what
    the grading found: the breaker may have opened meanwhile, on this request's own failures.

    Raises:
        ProviderOutage: (503, ``Retry-After``) the breaker is open for the caller, or ``stopped``.
    """
    if config.is_embedded:
        return
    breaker = grader.caller.gates.breaker_for(config)
    caller = TENANT.get() or None  # a caller whose calls have not failed may probe at once
    if stopped or breaker.retry_in(caller) > 0:
        raise ProviderOutage(
            f"the judge provider ({config.model}) is failing; its circuit breaker is open",
            retry_after=max(1.0, breaker.retry_in(caller)),
        )


async def _entry(
    grader: Grader, config: JudgeConfig, settings: ServiceSettings, index: int, item: dict[str, Any]
) -> BatchEntry:
    """Validate and grade one batch item; any input or judge error stays in its entry."""
    declared = item.get("id")
    try:
        request = check_request(GradeRequest.model_validate(item), settings)
    except ValidationError as exc:
        field, message = first_error(exc)
        error = ItemError(type="invalid_input", message=message, field=field)
        return BatchEntry(index=index, id=_str_or_none(declared), error=error)
    except InputError as exc:
        error = ItemError(type="invalid_input", message=str(exc), field=exc.field)
        return BatchEntry(index=index, id=_str_or_none(declared), error=error)
    try:
        result = await grader.grade(
            request, config=config, item_id=str(index + 1), max_outage=0
        )
    except JudgeError as exc:
        field = getattr(exc, "field", None)
        error = ItemError(type=classify(exc)[1], message=str(exc), field=field)
        return BatchEntry(index=index, id=request.id, error=error)
    return BatchEntry(index=index, id=result.id, result=result)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
