"""Option values shared by the CLI, the service, the config and the client; judge overrides.

:class:`JudgeOverrides` is the per-request judge selection a body or a client call carries.

A list option (metrics, ``group_by`` fields) may be written comma-separated
(``coverage,rouge_l``), repeated (``?metrics=coverage&metrics=rouge_l``), or both; ``comma_list``
reads every form the same way, so the CLI, the routes and the judge configuration agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from bonusjudge_client.wire.base import StrictWireModel
from bonusjudge_client.wire.vocab import MetricName

__all__ = ["CHARTOM_WINDOWS", "ContextWindow", "JudgeOverrides", "comma_list"]

CHARTOM_WINDOWS = (0, 1000, 2000)
"""The CharToM plot windows (``context_0``, ``context_1000``, ``context_2000``)."""


def _check_window(value: int | None) -> int | None:
    # Any other number would make every CharToM item of a job invalid, after a 202.
    if value is not None and value not in CHARTOM_WINDOWS:
        raise ValueError(
            f"must be one of {', '.join(map(str, CHARTOM_WINDOWS))} (got {shown_number(value)})"
        )
    return value


def shown_number(value: int) -> str:
    """``value`` as a message shows it: whole, or cut to its ends when longer than 20 digits.

    An error answer echoes what was wrong, but a 4,000-digit number echoed whole is a
    4 KB answer to a 4 KB request, and unreadable.
    """
    text = str(value)
    if len(text) <= 20:
        return text
    digits = len(text.lstrip("-"))
    return f"{text[:8]}...{text[-4:]}, a number of {digits} digits"


ContextWindow = Annotated[int | None, AfterValidator(_check_window)]
"""A CharToM plot window (one of :data:`CHARTOM_WINDOWS`), or None for the default."""




def comma_list(value: str | Iterable[object]) -> tuple[str, ...]:
    """The names in ``value``: one comma-separated string, or several (each may hold commas).

    Blanks around a name are dropped, and so are empty names (``"a,,b,"`` is ``("a", "b")``).

    Args:
        value: A string such as ``"coverage, rouge_l"``, or a sequence of them (a repeated
            query parameter).
    """
    entries: Iterable[object] = [value] if isinstance(value, str) else value
    return tuple(
        part.strip() for entry in entries for part in str(entry).split(",") if part.strip()
    )


class JudgeOverrides(StrictWireModel):
    """Per-request judge selection; unset (null) fields keep the service's defaults."""

    model: str | None = Field(default=None, description="Judge model (must be allow-listed).")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, description="Temperature.")
    rubric: str | None = Field(default=None, description="Rubric family id.")
    metrics: tuple[MetricName, ...] | None = Field(default=None, description="Metrics to compute.")
    length_control: bool | None = Field(default=None, description="Apply the length cap.")
    context_window: ContextWindow = Field(
        default=None, description="CharToM plot window (0, 1000, 2000)."
    )
    judge: Literal["model", "cascade"] | None = Field(
        default=None,
        description="`model` (the judge model alone) or `cascade`: the embedded matcher decides "
        "the points it is sure of, an item with any point in its uncertain band goes to the LLM "
        "judge `model` (the result's `decided_by` says which). Needs an LLM model.",
    )
    cascade_agreement: float | None = Field(
        default=None,
        ge=0.5,
        lt=1.0,
        description="Cascade: the agreement with people of the matcher's sure verdicts, which "
        "sets its uncertain band (a fitted target: 0.9, 0.95 or 0.97; default 0.95).",
    )

    @field_validator("metrics", mode="before")
    @classmethod
    def _parse_metrics(cls, value: Any) -> Any:
        if isinstance(value, str):
            return comma_list(value)
        return value
