"""The shared vocabulary of the wire contract: languages, metric names, unscored reasons.

These literals are named by requests and results on both sides of the HTTP API (the engine's
configuration, the models in :mod:`bonusjudge_client.wire.grading`, the client), so they sit at the
bottom of both and neither copies them.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import AfterValidator

__all__ = [
    "ALL_METRICS",
    "CALIBRATION_METRICS",
    "SUPPORTED_LANGUAGES",
    "ItemId",
    "Language",
    "MetricName",
    "UnscoredReason",
]

Language = Literal["en", "zh"]
"""Languages the rubrics and metrics know. Other Latin-script languages grade as ``en``."""

SUPPORTED_LANGUAGES: tuple[Language, ...] = get_args(Language)
"""Every :data:`Language`, in order."""

MetricName = Literal["coverage", "defects", "rouge_l", "bertscore"]
"""What a caller can ask to be computed for an item."""

ALL_METRICS: tuple[MetricName, ...] = get_args(MetricName)
"""Every metric, in the order results and tables show them."""

CALIBRATION_METRICS: tuple[MetricName, ...] = ("rouge_l", "bertscore", "coverage")
"""What a calibration run computes by default: the paper's comparison (defects are not a score)."""

UnscoredReason = Literal[
    "parse_failure",
    "validation_failure",
    "provider_error",
    "rate_limited",
    "refusal",
    "truncated_output",
    "empty_output",
    "timeout",
    "circuit_open",
    "retry_budget_exhausted",
    "budget_exhausted",
    "cancelled",
    "not_supported",
]
"""Why a judge task ended without a score. Aggregates count these, never as zero or coverage."""


def _refuse_nul(value: str) -> str:
    # PostgreSQL's text cannot hold NUL: a job store there refused the whole upload while SQLite
    # took it. Refusing the id here gives one answer (this item invalid) on every store.
    if "\x00" in value:
        raise ValueError("must not contain a NUL character (\\u0000)")
    return value


ItemId = Annotated[str, AfterValidator(_refuse_nul)]
"""An item's id: any text but NUL, which no job store can keep."""
