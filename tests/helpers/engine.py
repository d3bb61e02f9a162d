"""The engine's stand-in set-up for tests: the Levin item, a quiet grader, a scripted judge.

Tests of the engine (and of what sits on it) grade one CharToM-style item again and again with
the shipped :class:`judge.providers.fake.FakeProvider`; these are the one copy of what they
share, so a change to the engine's set-up is made once: the item as the engine takes it
(:func:`levin_request`) and as a request body or a JSONL line carries it (:func:`levin_item`),
and the judge most tests script (:func:`plain_answer`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from bonusjudge_client.wire.grading import GradeRequest
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider, covering, defects
from judge.verdicts import DefectJudgement

__all__ = [
    "ENGINE_CONFIG",
    "by_task",
    "levin_item",
    "levin_request",
    "no_sleep",
    "numbered_request",
    "plain_answer",
    "quiet_grader",
]

ENGINE_CONFIG = JudgeConfig(model="fake/judge", metrics=("coverage", "defects"))
"""A fake LLM judge asked for coverage and defects (no metrics that load an encoder)."""


def levin_request(**fields: Any) -> GradeRequest:
    """Levin after Kitty's refusal: two bonus points, a paraphrasing answer; ``fields`` override."""
    base: dict[str, Any] = {
        "id": "q1",
        "question": "How does Levin feel after Kitty refuses him?",
        "reference": "He feels humiliated and wants to return to his estate.",
        "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
        "response": "He is ashamed and longs for the countryside.",
        "tom_dimension": "emotion",
    }
    base.update(fields)
    return GradeRequest(**base)


def levin_item(n: int | None = None, **fields: Any) -> dict[str, Any]:
    """Levin as a service request's item or a JSONL line: two bonus points; ``fields`` override.

    With ``n`` it is item ``it-{n}`` and its answer names ``n``, so no two numbered items share a
    judge call (or a cache entry); without, it has no id and the plain answer.
    """
    numbered = {"id": f"it-{n}"} if n is not None else {}
    return {
        **numbered,
        "question": "How does Levin feel?",
        "reference": "He feels humiliated and hurt.",
        "bonus_points": ["Levin feels humiliated", "Levin feels hurt"],
        "response": "Levin is humiliated." if n is None else f"Levin is humiliated (answer-{n}).",
        **fields,
    }


def numbered_request(n: int) -> GradeRequest:
    """Item ``it-{n}``: one bonus point, a response that differs by ``n`` (distinct cache keys)."""
    return GradeRequest(
        id=f"it-{n}", question="How does Levin feel?", reference="He feels humiliated.",
        bonus_points=["Levin feels humiliated"], response=f"Levin is humiliated ({n}).",
    )


def by_task(coverage: Iterable[Any], defect: Iterable[Any]) -> Callable[[FakeCall], Any]:
    """A handler answering the coverage call with ``coverage``, the defect call with ``defect``.

    Each is consumed in order, one answer per call of its task.
    """
    cov = iter(coverage)
    dfc = iter(defect)

    def handler(call: FakeCall) -> Any:
        name = call.response_model.__name__ if call.response_model else "text"
        if name == "CoverageJudgement" or "[Bonus Points]" in call.user:
            return next(cov)
        return next(dfc)

    return handler


def plain_answer(call: FakeCall) -> FakeOutput:
    """The scripted judge: no defect, the first bonus point covered, one point extracted."""
    if call.response_model is DefectJudgement:
        return defects()
    context = call.validation_context or {}
    if "n_points" in context:
        return covering(1, n=int(context["n_points"]))
    return {"points": ["The reference's one point."]}


async def no_sleep(_: float) -> None:
    """A sleep that returns at once: retries and backoff without waiting."""
    return None


def quiet_grader(
    provider: FakeProvider | Any, config: JudgeConfig = ENGINE_CONFIG, **options: Any
) -> Grader:
    """A grader on ``provider`` that never sleeps and draws its jitter from a fixed seed."""
    options.setdefault("sleep", no_sleep)
    options.setdefault("rng", random.Random(0))
    return Grader(config, provider=provider, **options)
