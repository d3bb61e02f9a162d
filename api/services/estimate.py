"""Estimates: what grading a batch's or a job's items would cost, with no judge call sent.

The items are read as a job's are (grading requests or CharToM-QA lines, each validated alone)
and the judge is selected as for any request (allow-list, overrides); the engine's estimate
(``judge.estimate``) then runs them against the service's cache under the caller's key and the
service's cache scope, so a call the caller's own entries answer costs nothing, and another
key's entries tell it nothing.
"""

from __future__ import annotations

from api.jobs import JobUpload, build_items
from api.services.judges import select_judge
from api.settings import ServiceSettings
from bonusjudge_client.wire.grading import GradeRequest
from bonusjudge_client.wire.schemas import EstimateBody, EstimateResponse
from judge.engine import Grader
from judge.estimate import check_prices, estimate


async def estimate_items(
    body: EstimateBody, *, grader: Grader, settings: ServiceSettings
) -> EstimateResponse:
    """The judge calls, tokens and price of grading ``body``'s items, per task and in all.

    Raises:
        InputError: an invalid judge selection, no items or more than ``max_job_items``, or
            only one of ``price_in`` and ``price_out``.
    """
    config = select_judge(grader=grader, settings=settings, overrides=body.judge)
    check_prices(body.price_in, body.price_out)  # before reading the items
    upload = JobUpload([(None, item, None) for item in body.items], body.judge)
    items = build_items(upload, context_window=config.context_window, settings=settings)
    valid = [
        (item.item_id or str(item.index + 1), item.request)
        for item in items
        if isinstance(item.request, GradeRequest)
    ]
    return await estimate(
        valid,
        config,
        cache=grader.caller.cache,
        library=grader.library,
        cache_scope=grader.caller.cache_scope,
        price_in=body.price_in,
        price_out=body.price_out,
        invalid=len(items) - len(valid),
    )
