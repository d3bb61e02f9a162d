"""The cascade judge: the embedded matcher where it is sure, the LLM judge where it is not.

An LLM judge is paid per call; the embedded matcher is free but unsure on paraphrases. The
cascade asks the matcher first: each point gets its probability, and the matcher's *uncertain
band* for the model that judged the point (``[low, high]`` around its threshold, fitted on the
shared human-rated sets for a target agreement by ``python -m calibration.fit.cascade`` and
shipped in the matcher's parameter file) says whether it is sure. An item whose every point is
sure is decided by the matcher alone; an item with any point in the band goes to the LLM judge,
whose verdicts replace the matcher's for the whole item.

The rule for each task, per item (``GradeResult.decided_by`` says which judge decided):

* ``embedded-matcher`` (every point sure): coverage is the matcher's, defects are
  ``not_assessed`` exactly as the embedded judge reports them (the matcher cannot judge
  defects; never a silent "no defects"). No LLM call is made for the item.
* ``llm`` (a point uncertain, or the matcher could not judge the input): coverage and defects
  are the LLM judge's, as when it is asked alone; an LLM failure leaves the task unscored with
  its reason, never falls back to the matcher's verdict.
* An empty or null answer needs no judge: it is the matcher's (covers nothing, defects not
  assessed), as with the embedded judge.

Bonus points are the request's, else the reference as the one point (the matcher's rule, for
both judges, so they judge the same points): the cascade never asks the LLM to extract points.

Coverage and defects run concurrently in the engine but must agree on the route, so the
matcher's decision on an item is computed once and shared by both tasks.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bonusjudge_client.wire.grading import (
    CallRecord,
    CoverageResult,
    DefectsResult,
    ExtractRequest,
    ExtractResult,
    Provenance,
    RubricRef,
)
from core.errors import JudgeError
from core.text import Language
from judge.config import EMBEDDED_JUDGE, JudgeConfig
from judge.judges import EmbeddedJudge, Item, LLMJudge, Points, PointsSource, TaskRun

if TYPE_CHECKING:
    from judge.matcher import CascadeBand, ModelKind

__all__ = ["CascadeJudge", "Route"]

_MAX_ROUTES = 4096
"""Decisions kept for items whose tasks have not all asked yet: more than the items a grader has
in flight (at most 1,024 slots), so only an abandoned item's decision is ever dropped."""


@dataclass(frozen=True)
class Route:
    """The matcher's decision on one item.

    Attributes:
        coverage: The matcher's coverage of the item (None when it could not judge it).
        uncertain: The 1-based indices of the points in the uncertain band.
        detail: Why the item goes to the LLM (None when the matcher decides it).
    """

    coverage: CoverageResult | None
    uncertain: tuple[int, ...]
    detail: str | None

    @property
    def sure(self) -> bool:
        """Whether the matcher decides the item alone."""
        return self.coverage is not None and not self.uncertain


class CascadeJudge:
    """The matcher decides the items it is sure of; the LLM judge decides the rest.

    Args:
        config: The judge configuration (``judge: cascade``, an LLM ``model``).
        matcher: The embedded judge (the grader's shared matcher).
        llm: The LLM judge of ``config``.
        bands: The uncertain band of each matcher model kind at the configured agreement.
    """

    def __init__(
        self,
        config: JudgeConfig,
        matcher: EmbeddedJudge,
        llm: LLMJudge,
        bands: Mapping[ModelKind, CascadeBand],
    ) -> None:
        self.config = config
        self._matcher = matcher
        self._llm = llm
        self._bands = dict(bands)
        # How many of an item's tasks ask for its route: the decision is dropped after the last.
        self._askers = sum(task in config.metrics for task in ("coverage", "defects"))
        self._routes: OrderedDict[int, tuple[Item, asyncio.Future[Route], list[int]]] = (
            OrderedDict()
        )
        identity = config.judge_identity() or {}
        self._quality = (
            f"cascade: {EMBEDDED_JUDGE} ({identity.get('version')}) decides the items it is sure "
            f"of (band fitted for agreement {config.cascade_agreement:g} with people), "
            f"{config.model} the others; decided_by names the judge of each item"
        )

    async def points(self, item: Item) -> TaskRun[Points]:
        """The request's bonus points, or else the reference as the one point (no extraction)."""
        return await self._matcher.points(item)

    async def coverage(
        self, item: Item, points: list[str], source: PointsSource
    ) -> TaskRun[CoverageResult]:
        """The matcher's coverage when it is sure of every point, else the LLM judge's."""
        if item.blank is not None:
            run = await self._matcher.coverage(item, points, source)
            run.decided_by = "embedded-matcher"
            return run
        route = await self._route(item)
        if route.sure and route.coverage is not None:
            return TaskRun(route.coverage, decided_by="embedded-matcher")
        run = await self._llm.coverage(item, points, source)
        run.decided_by = "llm"
        if run.value.status == "scored" and route.detail is not None:
            # Why this item cost an LLM call, where the caller reads the coverage.
            detail = f"judged by the LLM: {route.detail}"
            run.value = run.value.model_copy(update={"detail": detail})
        return run

    async def defects(self, item: Item) -> TaskRun[DefectsResult]:
        """``not_assessed`` (the matcher's answer) on the items it decides, else the LLM's."""
        if item.blank is not None:
            run = await self._matcher.defects(item)
        else:
            route = await self._route(item)
            if not route.sure:
                run = await self._llm.defects(item)
                run.decided_by = "llm"
                return run
            run = await self._matcher.defects(item)
        run.decided_by = "embedded-matcher"
        return run

    async def extract_points(self, request: ExtractRequest, language: Language) -> ExtractResult:
        """The LLM judge's extraction (the extraction API; grading never extracts)."""
        return await self._llm.extract_points(request, language)

    def provenance(
        self, rubrics: dict[str, RubricRef], calls: list[CallRecord], *, truncated: bool = False
    ) -> Provenance:
        """The LLM judge's provenance, naming the matcher's version and the cascade's rule."""
        provenance = self._llm.provenance(rubrics, calls, truncated=truncated)
        return provenance.model_copy(
            update={"judge_version": self.config.judge_version, "judge_quality": self._quality}
        )

    # -- the route -----------------------------------------------------------------------------

    async def _route(self, item: Item) -> Route:
        """The matcher's decision on ``item``, computed once for all the tasks that ask."""
        key = id(item)
        entry = self._routes.get(key)
        if entry is None or entry[0] is not item:
            future: asyncio.Future[Route] = asyncio.ensure_future(self._decide(item))
            entry = (item, future, [self._askers])
            self._routes[key] = entry
            while len(self._routes) > _MAX_ROUTES:
                self._routes.popitem(last=False)
        entry[2][0] -= 1
        if entry[2][0] <= 0:
            self._routes.pop(key, None)
        # Shielded: one task cancelled must not cancel the decision the other awaits.
        return await asyncio.shield(entry[1])

    async def _decide(self, item: Item) -> Route:
        found = (await self._matcher.points(item)).value
        points = found.points or [item.request.reference]
        try:
            matches, best = await self._matcher.match(item, points, found.source)
        except JudgeError as exc:
            # What the matcher cannot judge, the LLM may: not sure, not unscored.
            return Route(None, (), f"the matcher cannot judge this item: {exc}")
        uncertain = tuple(
            i
            for i, m in enumerate(matches, start=1)
            if not self._bands[m.kind].sure(m.probability)
        )
        coverage = EmbeddedJudge.verdicts(matches, best, found.source)
        detail = None
        if uncertain:
            shown = ", ".join(f"{i} (p={matches[i - 1].probability:.2f})" for i in uncertain)
            detail = f"points in the matcher's uncertain band: {shown}"
        return Route(coverage, uncertain, detail)
