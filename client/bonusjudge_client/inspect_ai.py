# mypy: disable-error-code="untyped-decorator"
# inspect_ai is a harness's library, not in the project's environment, where its decorators
# read as untyped; against the installed inspect_ai (.harness/inspect) this is strict-clean.
"""A scorer for inspect_ai that grades each sample's output through a running bonusjudge service.

::

    from inspect_ai import Task
    from bonusjudge_client.inspect_ai import bonusjudge_scorer

    Task(dataset=..., solver=..., scorer=bonusjudge_scorer(url="http://127.0.0.1:8000"))

The sample's ``target`` is the reference answer and its ``metadata`` carries the item's other
fields: ``bonus_points`` (without them the service extracts points from the reference), and any
of ``tom_dimension``, ``context`` or CharToM's ``context_N`` windows, ``book_name``,
``language``, ``respondent`` (else the model under test)... (see
:func:`bonusjudge_client.harness.request_fields`). The question is ``metadata["question"]``,
else the sample's input text.

Each :class:`~inspect_ai.scorer.Score` has the response's coverage as its value, the covered
points in its explanation and, in its metadata, ``covered`` and ``points``, the ``verdicts``,
``defects`` and ``penalized``, the result's ``provenance``, ``status`` and ``unscored_reasons``.
A response the judge could not grade (coverage unscored) is inspect's unscored score
(``Score.unscored``: NaN, left out of every metric and counted as unscored) with the reason, never
0; so is an item the service refused (``reason="scoring_failed"``). A defect judgement that failed
leaves only the penalty rate's base, as in the service's summary.

The metrics are :func:`bpc` (micro, as the CharToM-QA paper: covered points over points),
:func:`penalty_rate` and inspect's ``mean`` (of per-item coverage, a macro figure).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from inspect_ai.scorer import (
    Metric,
    SampleScore,
    Score,
    Scorer,
    Target,
    mean,
    metric,
    scorer,
)
from inspect_ai.solver import TaskState

from bonusjudge_client import harness
from bonusjudge_client.aio import AsyncJudgeClient
from bonusjudge_client.calls import JudgeInput
from bonusjudge_client.errors import ClientHTTPError, ClientInputError, ClientItemError
from bonusjudge_client.retry import RetryPolicy
from bonusjudge_client.wire.grading import GradeResult

__all__ = ["bonusjudge_scorer", "bpc", "penalty_rate"]

_REFUSALS = frozenset({400, 413, 422})
"""Statuses with which the service refuses the item itself (not the caller or its own state)."""


def _tallies(scores: list[SampleScore]) -> list[harness.Tally]:
    """The tallies the scorer left in its scores' metadata (other scores count as nothing)."""
    tallies = []
    for sample in scores:
        meta = sample.score.metadata or {}
        tallies.append(
            harness.Tally(meta.get("covered"), meta.get("points"), meta.get("penalized"))
        )
    return tallies


@metric
def bpc() -> Metric:
    """Bonus Point Coverage, micro: covered points / points over the scored samples.

    NaN when no sample is scored. Unscored samples never reach a metric (inspect leaves them out
    and counts them).
    """

    def compute(scores: list[SampleScore]) -> float:
        value = harness.bpc(_tallies(scores))
        return math.nan if value is None else value

    return compute


@metric
def penalty_rate() -> Metric:
    """Share of samples with a defect among those whose defects were judged.

    NaN when the judge judged none (the embedded matcher does not assess defects).
    """

    def compute(scores: list[SampleScore]) -> float:
        value = harness.penalty_rate(_tallies(scores))
        return math.nan if value is None else value

    return compute


def _metadata(result: GradeResult, tally: harness.Tally) -> dict[str, Any]:
    """What a score keeps of a result: the figures' inputs, verdicts, defects, provenance."""
    coverage, defects = result.coverage, result.defects
    return {
        "covered": tally.covered,
        "points": tally.points,
        "penalized": tally.penalized,
        "status": result.status,
        "unscored_reasons": result.unscored_reasons,
        "flags": result.flags,
        "verdicts": [v.model_dump(mode="json") for v in coverage.verdicts] if coverage else [],
        "defects": [d.model_dump(mode="json") for d in defects.defects] if defects else [],
        "defects_status": defects.status if defects else None,
        "rouge_l": result.rouge_l.f1 if result.rouge_l else None,
        "bertscore": result.bertscore.f1 if result.bertscore else None,
        "provenance": result.provenance.model_dump(mode="json"),
    }


def score_of(result: GradeResult, *, answer: str | None = None) -> Score:
    """The inspect score of one bonusjudge result (unscored when its coverage is).

    Args:
        result: The service's grade.
        answer: The response graded, shown beside the score.
    """
    tally = harness.Tally.of(result)
    metadata = _metadata(result, tally)
    coverage = result.coverage
    if coverage is None or coverage.coverage is None or tally.points is None:
        reasons = [r for r in result.unscored_reasons if r.startswith("coverage")]
        detail = coverage.detail if coverage is not None else None
        explanation = "; ".join(reasons) or "coverage was not requested from the service"
        return Score.unscored(
            reason="grader_failed",
            answer=answer,
            explanation=f"{explanation} ({detail})" if detail else explanation,
            metadata=metadata,
        )
    named = harness.covered_points(result)
    explanation = f"covers {tally.covered} of {tally.points} bonus points" + (
        ": " + "; ".join(named) if named else ""
    )
    if defects := (result.defects.defects if result.defects else []):
        explanation += ". Defects: " + "; ".join(d.description for d in defects)
    return Score(value=coverage.coverage, answer=answer, explanation=explanation,
                 metadata=metadata)


@scorer(metrics=[bpc(), penalty_rate(), mean()])
def bonusjudge_scorer(
    url: str | None = None,
    api_key: str | None = None,
    *,
    judge: JudgeInput = None,
    context_window: int | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
) -> Scorer:
    """Grade each sample's output against its reference and bonus points through bonusjudge.

    Args:
        url: The service (several replicas comma-separated); default ``BONUSJUDGE_URL``, else
            ``http://127.0.0.1:8000``.
        api_key: Sent as a bearer token; default ``BONUSJUDGE_API_KEY``.
        judge: The judge for every sample (``{"model": "openai/gpt-4o", "rubric":
            "chartom-paper"}``); unset fields keep the service's default.
        context_window: Which CharToM plot window (0, 1000, 2000) the defect judge reads when
            the metadata holds ``context_N`` keys; default the largest present.
        timeout: Seconds per request (default 300).
        retry: Retry policy of the client (default: 3 retries of what is safe to retry).
    """

    async def score(state: TaskState, target: Target) -> Score:
        metadata: Mapping[str, Any] = state.metadata or {}
        references = [text for text in target.target if text.strip()]
        item = {"question": state.input_text, **metadata}
        if references:
            item["reference"], item["references"] = references[0], references[1:] or None
        answer = state.output.completion
        try:
            request = harness.grade_request(
                item, response=answer, id=str(state.sample_id),
                respondent=str(state.model), context_window=context_window,
            )
        except ValueError as exc:  # pydantic's ValidationError is one
            return Score.unscored(reason="scoring_failed", answer=answer,
                                  explanation=f"not a gradable item: {exc}")
        async with AsyncJudgeClient(url, api_key=api_key, timeout=timeout, retry=retry) as client:
            try:
                result = await client.grade(request, judge=judge)
            except (ClientInputError, ClientItemError) as exc:
                return Score.unscored(reason="scoring_failed", answer=answer,
                                      explanation=str(exc))
            except ClientHTTPError as exc:
                if exc.status not in _REFUSALS:
                    raise  # the service or the caller's key, not this item: the sample errs
                return Score.unscored(reason="scoring_failed", answer=answer,
                                      explanation=str(exc))
        return score_of(result, answer=answer)

    return score
