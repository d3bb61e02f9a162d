"""The answer of ``GET /v1/usage``: what one API key has used, and nothing of any other key."""

from __future__ import annotations

from pydantic import Field

from bonusjudge_client.wire.base import WireModel

__all__ = ["UsageReport"]


class UsageReport(WireModel):
    """The caller's own usage: its judge requests and their cost, cache hits, items, jobs.

    The judge figures are this service process's, since it started (each replica counts its
    own); the job counts are the job store's, which replicas share.
    """

    provider_requests: int = Field(
        description="Requests sent to the judge provider for this key: first tries, retries, "
        "re-asks and failed requests included (what the provider bills by)."
    )
    prompt_tokens: int = Field(description="Prompt tokens the provider reported for them.")
    completion_tokens: int = Field(description="Completion tokens reported for them.")
    cost_usd: float = Field(description="Their cost in USD, when the model's price is known.")
    cached_tokens: int = Field(
        default=0,
        description="Of `prompt_tokens`, those the provider served from its prompt cache (priced "
        "at its cache-read price in `cost_usd`).",
    )
    cache_hits: int = Field(description="Judge calls answered from the cache (no request).")
    items: int = Field(
        description="Items graded (synchronous routes and jobs): `scored` + `unscored`. Items of "
        "a request answered with an error are not among them (see `refused`)."
    )
    scored: int = Field(description="Items whose every requested judge task was scored.")
    unscored: int = Field(description="Items with at least one unscored judge task.")
    refused: int = Field(
        default=0,
        description="Items the judge started on for a request that was then answered with an "
        "error, not a grade: a 429 `budget_exhausted` when the key's budget ran out midway, a "
        "503 `provider_outage` when the judge's breaker opened; and a job's items a cost cap "
        "refused (they stay pending, and count as graded once graded again). They are counted "
        "in none of "
        "`items`, `scored` and `unscored`; their requests and tokens are in the figures above, "
        "and the calls they finished are cached, so resending them costs only the rest. A "
        "request refused before grading (a 422, a 413, a 429 over a quota) counts nowhere.",
    )
    jobs: dict[str, int] = Field(
        description="This key's jobs in the job store, by status (queued, running, paused, "
        "done, cancelled, failed)."
    )
