"""The estimate of a batch or job: judge calls, tokens and price, with no judge call sent."""

from __future__ import annotations

from api.deps import GraderDep, SettingsDep, bind_tenant
from api.routes.common import guarded_router
from api.services.estimate import estimate_items
from bonusjudge_client.wire.schemas import EstimateBody, EstimateResponse

router = guarded_router("/v1", "grading", bind_tenant)


@router.post("/estimate", operation_id="estimate", summary="Estimate the cost of grading items")
async def estimate(
    body: EstimateBody, grader: GraderDep, settings: SettingsDep
) -> EstimateResponse:
    """What grading a batch's or a job's items would cost: nothing is graded, no call is sent.

    Per judge task and in all: the calls the service would make after its cache (entries this
    key's calls left answer for free), their prompt tokens counted with the model's tokenizer on
    the exact requests, the expected completion tokens, and the price from litellm's model cost
    map, or from `price_in`/`price_out` (USD per million tokens) when it has none.
    """
    return await estimate_items(body, grader=grader, settings=settings)
