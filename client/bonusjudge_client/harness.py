"""What the drop-in scorers share: an item's fields as a request, and a set's figures from grades.

A harness hands a scorer an item as a mapping (inspect_ai's sample metadata, lm-evaluation-harness's
document, promptfoo's test ``vars``), usually a CharToM-QA line: ``question``, ``answer``,
``bonus_points``, the plot windows ``context_0`` / ``context_1000`` / ``context_2000``,
``tom_dimension``... :func:`grade_request` turns one into a ``GradeRequest`` with the harness's
response, keeping the fields a request has (under their names or aliases) and dropping the rest
(``misleading_choices``...), so the scorers of :mod:`bonusjudge_client.inspect_ai`,
:mod:`bonusjudge_client.lm_eval` and :mod:`bonusjudge_client.promptfoo` read items alike.

:class:`Tally` is one graded item reduced to what the set's figures need, and :func:`bpc` and
:func:`penalty_rate` compute them as the service's summary does (``judge.aggregate``): BPC is
micro-averaged (covered points over points) over the items whose coverage is scored, and the
penalty rate is the share of defect-scored items with a defect. An unscored item leaves the
figure's base; it is never counted as zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bonusjudge_client.wire.chartom import CHARTOM_CONTEXT_KEYS, REQUEST_KEYS, chosen_window
from bonusjudge_client.wire.grading import GradeRequest, GradeResult

__all__ = [
    "CHARTOM_CONTEXT_KEYS",
    "Tally",
    "bpc",
    "covered_points",
    "grade_request",
    "penalty_rate",
    "request_fields",
]


def request_fields(
    item: Mapping[str, Any], *, context_window: int | None = None
) -> dict[str, Any]:
    """The fields of a ``GradeRequest`` that ``item`` holds, under the request's own names.

    Args:
        item: An item as a harness holds it: request fields under their names or aliases
            (``answer`` for ``reference``), CharToM's plot windows, anything else (dropped).
        context_window: Which CharToM plot window becomes ``context`` (0, 1000 or 2000); None
            keeps an explicit ``context``, else takes the largest window present, as
            ``bonusjudge grade`` does.

    Raises:
        ValueError: ``context_window`` is not one of CharToM's windows.
    """
    window = chosen_window(item, context_window)
    fields: dict[str, Any] = {}
    for key, value in item.items():
        name = REQUEST_KEYS.get(key)
        if name is not None and (name == key or name not in fields):
            fields[name] = value
    if window is not None and ("context" not in fields or context_window is not None):
        fields["context"] = item[CHARTOM_CONTEXT_KEYS[window]] or None
        fields["context_window"] = window
    return fields


def grade_request(
    item: Mapping[str, Any],
    *,
    response: str | None,
    id: str | None = None,
    respondent: str | None = None,
    context_window: int | None = None,
) -> GradeRequest:
    """The request that grades ``response`` against ``item`` (see :func:`request_fields`).

    Args:
        item: The item's fields (a CharToM line, a sample's metadata, a test's vars).
        response: The answer under test; it replaces any ``response`` the item holds.
        id: The item's id, when the harness knows it better than the item does.
        respondent: The model that answered, when the item does not name one.
        context_window: Which CharToM plot window the defect judge reads.

    Raises:
        pydantic.ValidationError: the item is not a valid request (no question...).
    """
    fields = request_fields(item, context_window=context_window)
    fields["response"] = response
    if id is not None:
        fields["id"] = id
    elif fields.get("id") is not None:
        fields["id"] = str(fields["id"])
    if respondent is not None:
        fields.setdefault("respondent", respondent)
    return GradeRequest.model_validate(fields)


def covered_points(result: GradeResult) -> list[str]:
    """The bonus points ``result`` says the response covers, in the item's order."""
    if result.coverage is None:
        return []
    return [verdict.text for verdict in result.coverage.verdicts if verdict.covered]


@dataclass(frozen=True)
class Tally:
    """One graded item, reduced to what BPC and the penalty rate count.

    Attributes:
        covered: Points covered; None when coverage is unscored or was not asked for.
        points: Points judged; None with ``covered``.
        penalized: Whether the response has a defect; None when defects are unscored, not
            assessed by the judge (the embedded matcher) or not asked for.
    """

    covered: int | None
    points: int | None
    penalized: bool | None

    @classmethod
    def of(cls, result: GradeResult) -> Tally:
        """The tally of one result."""
        coverage, defects = result.coverage, result.defects
        scored = coverage is not None and coverage.status == "scored"
        return cls(
            covered=coverage.covered if scored and coverage is not None else None,
            points=coverage.total if scored and coverage is not None else None,
            penalized=defects.penalized if defects is not None and defects.status == "scored"
            else None,
        )


def bpc(tallies: Iterable[Tally]) -> float | None:
    """Bonus Point Coverage, micro: covered points / points over coverage-scored items.

    None when no item's coverage is scored (there is no figure, and 0 would be a false one).
    """
    covered = points = 0
    for tally in tallies:
        if tally.covered is not None and tally.points is not None:
            covered += tally.covered
            points += tally.points
    return covered / points if points else None


def penalty_rate(tallies: Iterable[Tally]) -> float | None:
    """Items with a defect / defect-scored items; None when no item's defects are scored."""
    judged = [tally.penalized for tally in tallies if tally.penalized is not None]
    return sum(judged) / len(judged) if judged else None
