"""Judges: what decides coverage and defects, behind one small protocol.

* ``LLMJudge`` renders the configuration's rubrics and asks an LLM through the ``Caller``. Whether
  a rubric's answer is structured (a pydantic model, validated and re-asked) or the paper's plain
  text (parsed, faithful mode) is read once from the rubric, when the judge is made, and fixes
  the response model and parser of that task.
* ``EmbeddedJudge`` is the non-LLM matcher (``judge.matcher``): coverage only, with a probability
  per point; defects are not assessed and bonus points are never extracted.

The engine picks the judge once per configuration and asks it the tasks. Each task
returns its value in a ``TaskRun`` together with the call records and rubric references it
produced, so the engine assembles the provenance in a fixed order.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

from bonusjudge_client.wire.grading import (
    CallRecord,
    CoverageResult,
    DecidedBy,
    Defect,
    DefectsResult,
    ExtractRequest,
    ExtractResult,
    GradeRequest,
    PointVerdict,
    Provenance,
    RubricRef,
)
from core.errors import JudgeError, UnscoredReason
from core.text import Language
from judge.batching import AsyncBatcher
from judge.cache import Cache, matcher_key
from judge.calls import TENANT, Caller, CallOutcome, CallSpec, rubric_ref
from judge.config import EMBEDDED_JUDGE, JudgeConfig
from judge.stats import EngineStats
from judge.verdicts import (
    BonusPointsExtraction,
    CoverageJudgementBase,
    DefectJudgement,
    coverage_model,
    parse_paper_coverage,
    parse_paper_defects,
)
from rubrics.loader import RenderedPrompt, RubricLibrary
from rubrics.schema import Rubric

if TYPE_CHECKING:
    from judge.matcher import MatchInput, PointMatch

try:
    BONUSJUDGE_VERSION = version("bonusjudge")
except PackageNotFoundError:  # running from a source tree without an install
    BONUSJUDGE_VERSION = "0.0.0+source"

T = TypeVar("T")

PointsSource = Literal["request", "reference", "extracted"]
"""Where an item's bonus points came from."""

BlankFlag = Literal["null_response", "empty_response"]
"""The result flag of an answer with nothing to judge (graded as covering nothing)."""


@dataclass(frozen=True)
class Item:
    """One item as the judges see it.

    Attributes:
        request: The grading request.
        response: The answer to judge (cut to the length cap when length control is on).
        language: The language graded in.
    """

    request: GradeRequest
    response: str
    language: Language

    @property
    def empty(self) -> bool:
        """Whether the answer is null, empty or whitespace: it covers nothing, asserts nothing."""
        return not self.response.strip()

    @property
    def blank(self) -> BlankFlag | None:
        """The flag of an answer with nothing to judge, or None when there is something.

        ``null_response`` when the request's response is null (a harness's refusal or timeout),
        ``empty_response`` when it is empty or whitespace.
        """
        if self.request.response is None:
            return "null_response"
        return "empty_response" if self.empty else None


@dataclass(frozen=True)
class Points:
    """The bonus points an item is judged against, or why there are none.

    Attributes:
        points: The points, or None when extracting them failed.
        source: Where they came from.
        reason: Why extraction failed (None when it did not).
        detail: The failure's detail.
    """

    points: list[str] | None
    source: PointsSource
    reason: UnscoredReason | None = None
    detail: str | None = None


@dataclass
class TaskRun(Generic[T]):
    """A judge task's value with the judge calls and rubrics it took.

    Attributes:
        value: The task's result.
        calls: The call records, in the order the calls were made.
        rubrics: The rubric used per task name.
        decided_by: Which judge of a cascade decided (``GradeResult.decided_by``); None for
            any other judge.
    """

    value: T
    calls: list[CallRecord] = field(default_factory=list)
    rubrics: dict[str, RubricRef] = field(default_factory=dict)
    decided_by: DecidedBy | None = None


class Judge(Protocol):
    """What the engine asks of a judge; each task reports its own calls and rubrics."""

    async def points(self, item: Item) -> TaskRun[Points]:
        """The bonus points: the request's, else the judge's own (extracted, or the reference)."""
        ...

    async def coverage(
        self, item: Item, points: list[str], source: PointsSource
    ) -> TaskRun[CoverageResult]:
        """Which of ``points`` the item's answer covers."""
        ...

    async def defects(self, item: Item) -> TaskRun[DefectsResult]:
        """The defects (factual errors, contradictions...) of the item's answer."""
        ...

    async def extract_points(self, request: ExtractRequest, language: Language) -> ExtractResult:
        """Split a reference answer into bonus points (the extraction API)."""
        ...

    def provenance(
        self, rubrics: dict[str, RubricRef], calls: list[CallRecord], *, truncated: bool = False
    ) -> Provenance:
        """How a result of this judge was produced."""
        ...


def empty_coverage(
    points: list[str],
    source: PointsSource,
    *,
    expected: float | None,
    blank: BlankFlag = "empty_response",
) -> CoverageResult:
    """Coverage of an answer with nothing to judge: every point uncovered, without the judge.

    The benchmark's scorer gives an empty answer 0 points: it is scored, never an invalid line. A
    null answer is graded the same way: were it left out, a respondent that refuses more would
    score higher. ``blank`` (the item's flag) names which it was in each verdict's rationale.
    """
    return CoverageResult(
        status="scored",
        verdicts=[
            PointVerdict(index=i, text=p, covered=False, rationale=blank.replace("_", " "))
            for i, p in enumerate(points, start=1)
        ],
        covered=0,
        total=len(points),
        coverage=0.0,
        expected_coverage=expected,
        points_source=source,
    )


def _scored_coverage(
    verdicts: list[PointVerdict], source: PointsSource, expected: float | None = None
) -> CoverageResult:
    covered = sum(1 for v in verdicts if v.covered)
    return CoverageResult(
        status="scored",
        verdicts=verdicts,
        covered=covered,
        total=len(verdicts),
        coverage=covered / len(verdicts),
        expected_coverage=expected,
        points_source=source,
    )


# -- the LLM judge's answer formats ------------------------------------------------------------


class _CoverageFormat(Protocol):
    """How a coverage rubric's answer is asked for and read."""

    def spec(self, prompt: RenderedPrompt, config: JudgeConfig, n: int) -> CallSpec:
        """The call asking for verdicts on ``n`` points."""
        ...

    def verdicts(self, value: Any, points: list[str]) -> list[PointVerdict]:
        """The verdicts in a (cached) converted answer."""
        ...


def _verdict_dump(output: CoverageJudgementBase) -> list[dict[str, Any]]:
    return [
        {"index": p.index, "covered": p.covered, "rationale": p.rationale, "evidence": p.evidence}
        for p in output.points
    ]


class _StructuredCoverage:
    """A validated verdict per point (index, covered, rationale, evidence), re-asked if invalid."""

    def spec(self, prompt: RenderedPrompt, config: JudgeConfig, n: int) -> CallSpec:
        """See ``_CoverageFormat.spec``."""
        return CallSpec.for_prompt(
            "coverage",
            prompt,
            config,
            _verdict_dump,
            response_model=coverage_model(n),
            validation_context={"n_points": n},
        )

    def verdicts(self, value: Any, points: list[str]) -> list[PointVerdict]:
        """See ``_CoverageFormat.verdicts``."""
        by_index = {v["index"]: v for v in value}
        return [
            PointVerdict(
                index=i,
                text=p,
                covered=bool(by_index[i]["covered"]),
                rationale=by_index[i].get("rationale") or None,
                evidence=by_index[i].get("evidence") or None,
            )
            for i, p in enumerate(points, start=1)
        ]


class _TextCoverage:
    """The paper's plain-text answer: the indices of the covered points."""

    def spec(self, prompt: RenderedPrompt, config: JudgeConfig, n: int) -> CallSpec:
        """See ``_CoverageFormat.spec``."""
        return CallSpec.for_prompt(
            "coverage", prompt, config, lambda text: parse_paper_coverage(text, n)
        )

    def verdicts(self, value: Any, points: list[str]) -> list[PointVerdict]:
        """See ``_CoverageFormat.verdicts``."""
        included = set(value)
        return [
            PointVerdict(index=i, text=p, covered=i in included)
            for i, p in enumerate(points, start=1)
        ]


@dataclass(frozen=True)
class _DefectsFormat:
    """How a defects rubric's answer is asked for (model, or None for text) and converted."""

    response_model: type[BaseModel] | None
    convert: Callable[[Any], list[dict[str, Any]]]


def _structured_defects(output: DefectJudgement) -> list[dict[str, Any]]:
    return [d.model_dump() for d in output.defects]


def _text_defects(text: str) -> list[dict[str, Any]]:
    return [{"description": d, "kind": "other"} for d in parse_paper_defects(text)]


def _quality_note(model: str) -> str | None:
    if "gemma3-270m" in model or "gemma-3-270m" in model:
        return "smoke-test only"
    return None


# -- the judges --------------------------------------------------------------------------------


class _JudgeBase:
    """What both judges share: their configuration and the provenance of their results.

    Args:
        config: The judge configuration.
        **described: The provenance fields that describe the judge (``judge``, ``mode``,
            ``judge_quality``...), fixed when it is made.
    """

    def __init__(self, config: JudgeConfig, **described: Any) -> None:
        self.config = config
        self._described = described
        self._config_hash: str | None = None  # hashed on the first result, then reused

    def _hash(self) -> str:
        # The configuration is frozen: its hash (JSON and SHA-256 of every output field, the
        # matcher's identity included) is the same for every item this judge grades.
        if self._config_hash is None:
            self._config_hash = self.config.config_hash()
        return self._config_hash

    def provenance(
        self, rubrics: dict[str, RubricRef], calls: list[CallRecord], *, truncated: bool = False
    ) -> Provenance:
        """What describes the judge, the configuration's hash and metrics, the rubrics and calls."""
        config = self.config
        return Provenance(
            **self._described,
            rubrics=rubrics,
            config_hash=self._hash(),
            metrics=list(config.metrics),
            calls=calls,
            length_control=config.length_control,
            response_truncated=truncated,
            bonusjudge_version=BONUSJUDGE_VERSION,
        )


class LLMJudge(_JudgeBase):
    """An LLM judge: the configuration's rubric family, asked through the caller.

    Args:
        config: The judge configuration.
        rubrics: The family's rubric per task (``coverage``, ``defects``, ``extract_points``).
        library: The rubric library (to render prompts).
        caller: Makes the judge calls.
    """

    def __init__(
        self,
        config: JudgeConfig,
        rubrics: Mapping[str, Rubric],
        library: RubricLibrary,
        caller: Caller,
    ) -> None:
        self._rubrics = rubrics
        self._library = library
        self._caller = caller
        # The answer formats, read once from the rubrics.
        structured = rubrics["coverage"].output == "structured"
        self.mode = config.mode if structured else "text"
        super().__init__(
            config,
            judge=config.model,
            api_base=config.api_base,
            mode=self.mode,
            judge_quality=_quality_note(config.model),
            sampling=config.sampling(),
        )
        self._coverage: _CoverageFormat = _StructuredCoverage() if structured else _TextCoverage()
        self._defects = (
            _DefectsFormat(DefectJudgement, _structured_defects)
            if rubrics["defects"].output == "structured"
            else _DefectsFormat(None, _text_defects)
        )

    async def points(self, item: Item) -> TaskRun[Points]:
        """The request's bonus points, or the ones the extraction rubric finds in the reference."""
        request = item.request
        if request.bonus_points:
            return TaskRun(Points(list(request.bonus_points), "request"))
        outcome, ref = await self._extract(item.language, request, domain=request.domain)
        if outcome.reason is not None:
            points = Points(None, "extracted", outcome.reason, outcome.detail)
        else:
            points = Points(outcome.value, "extracted")
        return TaskRun(points, [outcome.record], {"extract_points": ref})

    async def coverage(
        self, item: Item, points: list[str], source: PointsSource
    ) -> TaskRun[CoverageResult]:
        """Ask the coverage rubric which points the answer covers."""
        if item.blank is not None:
            return TaskRun(empty_coverage(points, source, expected=None, blank=item.blank))
        prompt = self._render("coverage", item, points=points)
        refs = {"coverage": rubric_ref(prompt.rubric, prompt.language)}
        outcome = await self._caller.call(self._coverage.spec(prompt, self.config, len(points)))
        if outcome.reason is not None:
            result = CoverageResult(
                status="unscored",
                reason=outcome.reason,
                detail=outcome.detail,
                verdicts=[
                    PointVerdict(index=i, text=p, covered=None)
                    for i, p in enumerate(points, start=1)
                ],
                total=len(points),
                points_source=source,
            )
        else:
            result = _scored_coverage(self._coverage.verdicts(outcome.value, points), source)
        return TaskRun(result, [outcome.record], refs)

    async def defects(self, item: Item) -> TaskRun[DefectsResult]:
        """Ask the defects rubric what the answer gets wrong (nothing, when it is blank)."""
        if item.blank is not None:
            # It asserts nothing, so it gets nothing wrong; the judge is not asked.
            return TaskRun(
                DefectsResult(
                    status="scored",
                    defects=[],
                    penalized=False,
                    detail=item.blank.replace("_", " "),
                )
            )
        prompt = self._render("defects", item, context=item.request.context)
        refs = {"defects": rubric_ref(prompt.rubric, prompt.language)}
        outcome = await self._caller.call(
            CallSpec.for_prompt(
                "defects",
                prompt,
                self.config,
                self._defects.convert,
                response_model=self._defects.response_model,
            )
        )
        if outcome.reason is not None:
            result = DefectsResult(status="unscored", reason=outcome.reason, detail=outcome.detail)
        else:
            found = [
                Defect(
                    description=d["description"],
                    kind=d.get("kind", "other"),
                    evidence=d.get("evidence") or None,
                )
                for d in outcome.value
            ]
            result = DefectsResult(status="scored", defects=found, penalized=bool(found))
        return TaskRun(result, [outcome.record], refs)

    async def extract_points(self, request: ExtractRequest, language: Language) -> ExtractResult:
        """Split a reference answer into bonus points with the extraction rubric (cached)."""
        outcome, ref = await self._extract(language, request, domain=None)
        provenance = self.provenance({"extract_points": ref}, [outcome.record])
        if outcome.reason is not None:
            return ExtractResult(
                status="unscored",
                reason=outcome.reason,
                detail=outcome.detail,
                provenance=provenance,
            )
        return ExtractResult(status="scored", bonus_points=outcome.value, provenance=provenance)

    def _render(self, task: str, item: Item, **variables: Any) -> RenderedPrompt:
        """The ``task`` rubric's prompt about ``item``'s answer, plus the task's ``variables``."""
        request = item.request
        answer = {
            "question": request.question,
            "reference": request.reference,
            "response": item.response,
            "book_name": request.book_name,
            "domain": request.domain,
        }
        return self._library.render(self._rubrics[task], item.language, {**answer, **variables})

    async def _extract(
        self, language: Language, request: GradeRequest | ExtractRequest, *, domain: str | None
    ) -> tuple[CallOutcome, RubricRef]:
        # An extraction request has no domain: the caller says which one the prompt gets.
        prompt = self._library.render(
            self._rubrics["extract_points"],
            language,
            {
                "question": request.question,
                "reference": request.reference,
                "context": request.context,
                "book_name": request.book_name,
                "domain": domain,
            },
        )
        outcome = await self._caller.call(
            CallSpec.for_prompt(
                "extract_points",
                prompt,
                self.config,
                lambda out: list(out.points),
                response_model=BonusPointsExtraction,
            )
        )
        return outcome, rubric_ref(prompt.rubric, prompt.language)


class SharedMatcher:
    """The embedded matcher behind one batcher and the judge cache, loaded on first use.

    One per grader, shared by its embedded judges, so concurrent items of every configuration
    fill the same batches. Verdicts are cached like an LLM judge's answers, under the matcher's
    identity (:func:`judge.identity.matcher_identity`: version and digest of its parameters,
    lexicons and encoders) and the exact input, so a re-run neither embeds nor scores again and
    a new matcher never reads an old one's verdicts.

    Args:
        cache: The grader's judge cache (None: no caching).
        stats: The grader's counters (a hit counts in ``cache_hits``).
        load: Loads what a configuration needs (``Grader``'s serialized loader), awaited before
            the first verdict computed rather than read from the cache.
        partition: The caller the verdicts are cached for, read per item
            (``Caller.partition``: the per-key cache scope keeps each key's verdicts apart);
            None: shared.
    """

    def __init__(
        self,
        cache: Cache | None = None,
        stats: EngineStats | None = None,
        *,
        load: Callable[[JudgeConfig], Awaitable[None]] | None = None,
        partition: Callable[[], str | None] | None = None,
    ) -> None:
        self._batcher: AsyncBatcher[MatchInput, list[PointMatch]] | None = None
        self._cache = cache
        self._stats = stats
        self._load = load
        self._partition = partition

    async def match(self, item: MatchInput, config: JudgeConfig) -> list[PointMatch]:
        """The matcher's verdict on each of ``item``'s points (cached; batched on a miss).

        Args:
            item: The response and its points.
            config: The judging configuration (whether to use the cache; what to load).
        """
        from judge.matcher import PointMatch

        store = self._cache if config.cache and self._cache is not None else None
        tenant = self._partition() if self._partition is not None else None
        key = matcher_key(dataclasses.asdict(item), tenant) if store is not None else ""
        if store is not None:
            hit = await store.aget(key)
            if isinstance(hit, list):
                if self._stats is not None:
                    self._stats.cache_hits += 1
                return [PointMatch(**entry) for entry in hit]
        if self._load is not None:
            await self._load(config)
        if self._batcher is None:
            # Lazy: the matcher loads its parameters and an encoder, which LLM runs never need.
            from judge.matcher import get_matcher

            self._batcher = AsyncBatcher(
                get_matcher().match, batch_size=64, max_wait=0.005, owner=TENANT.get
            )
        matches = await self._batcher.submit(item)
        if store is not None:
            await store.aset(key, [dataclasses.asdict(m) for m in matches])
        return matches

    async def aclose(self) -> None:
        """Stop the batch worker."""
        if self._batcher is not None:
            await self._batcher.aclose()


class EmbeddedJudge(_JudgeBase):
    """The embedded matcher as a judge: coverage only, never an LLM call.

    Args:
        config: The judge configuration (for the provenance).
        matcher: The grader's shared matcher.
    """

    def __init__(self, config: JudgeConfig, matcher: SharedMatcher) -> None:
        super().__init__(
            config,
            judge=EMBEDDED_JUDGE,
            # None for a metrics-only run, which never loads the matcher.
            judge_version=config.judge_version,
            judge_quality="non-LLM matcher: coverage only, defects not assessed; weak where "
            "meaning turns on negation or on a paraphrase sharing neither words nor dictionary "
            "synonyms with the point",
        )
        self._matcher = matcher

    async def points(self, item: Item) -> TaskRun[Points]:
        """The request's bonus points, or else the reference itself as the one point."""
        request = item.request
        if request.bonus_points:
            return TaskRun(Points(list(request.bonus_points), "request"))
        return TaskRun(Points([request.reference], "reference"))

    async def coverage(
        self, item: Item, points: list[str], source: PointsSource
    ) -> TaskRun[CoverageResult]:
        """Match the answer against the points (the best of several references)."""
        if item.blank is not None:
            return TaskRun(empty_coverage(points, source, expected=0.0, blank=item.blank))
        try:
            matches, best = await self.match(item, points, source)
        except JudgeError as exc:
            return TaskRun(
                CoverageResult(
                    status="unscored",
                    reason="not_supported",
                    detail=str(exc),
                    total=len(points),
                    points_source=source,
                )
            )
        return TaskRun(self.verdicts(matches, best, source))

    async def match(
        self, item: Item, points: list[str], source: PointsSource
    ) -> tuple[list[PointMatch], list[str]]:
        """The matcher's verdict on each point, and the points they are on.

        With no bonus points and several references, the best-matching reference's.

        Raises:
            JudgeError: the matcher cannot judge the input (an unsupported language...).
        """
        from judge.matcher import MatchInput

        request = item.request
        # With no bonus points the whole reference is the one point; a dataset that lists
        # several acceptable references (TriviaQA aliases, NarrativeQA's two) is judged against
        # each, keeping the best match, as a reader would and as the weights were fitted.
        alternatives = [points]
        if source == "reference" and request.references:
            alternatives = [[r] for r in dict.fromkeys([points[0], *request.references])]
        answers = await asyncio.gather(
            *(
                self._matcher.match(
                    MatchInput(
                        question=request.question,
                        reference=request.reference,
                        points=candidate,
                        response=item.response,
                        language=item.language,
                    ),
                    self.config,
                )
                for candidate in alternatives
            )
        )
        return max(
            zip(answers, alternatives, strict=True), key=lambda pair: pair[0][0].probability
        )

    @staticmethod
    def verdicts(
        matches: list[PointMatch], best: list[str], source: PointsSource
    ) -> CoverageResult:
        """The scored coverage of the matcher's verdicts (``match``'s answer)."""
        verdicts = [
            PointVerdict(
                index=i,
                text=p,
                covered=m.covered,
                rationale=m.rationale,
                evidence=m.evidence,
                confidence=round(m.probability, 4),
            )
            for i, (p, m) in enumerate(zip(best, matches, strict=True), start=1)
        ]
        expected = round(sum(m.probability for m in matches) / len(best), 4)
        return _scored_coverage(verdicts, source, expected)

    async def defects(self, item: Item) -> TaskRun[DefectsResult]:
        """Not assessed: the matcher cannot judge defects."""
        return TaskRun(
            DefectsResult(
                status="not_assessed",
                detail="the embedded matcher cannot judge defects; configure an LLM judge",
            )
        )

    async def extract_points(self, request: ExtractRequest, language: Language) -> ExtractResult:
        """Not supported: the matcher cannot extract bonus points."""
        return ExtractResult(
            status="unscored",
            reason="not_supported",
            detail="the embedded matcher cannot extract bonus points; configure an LLM judge",
            provenance=self.provenance({}, []),
        )
