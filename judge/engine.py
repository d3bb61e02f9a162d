"""The grading engine: request -> rubric -> judge calls (cached) -> metrics -> result.

``Grader`` is the one place where grading happens; the CLI, the HTTP service and the calibration
runner all call it. For each item it resolves the language and the bonus points (extracting them
from the reference when the request has none), renders the rubrics, runs the coverage and defect
calls concurrently through the cache and the provider (with bounded re-asks inside the provider,
and retries of provider errors here: backoff with jitter, a per-run budget, a circuit breaker),
computes ROUGE-L and BERTScore (batched), and assembles a ``GradeResult``. Any judge failure ends
as *unscored* with its reason; nothing is silently zero, and nothing unscored counts as coverage.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

from pydantic import BaseModel

from core.errors import ConfigError, JudgeError, JudgeOutputError, ProviderError, UnscoredReason
from core.text import Language, count_words, detect_language, length_cap, truncate_words
from judge.batching import AsyncBatcher
from judge.cache import JudgeCache, judge_call_key, metric_key, schema_hash
from judge.config import EMBEDDED_JUDGE, JudgeConfig, JudgeOverrides
from judge.metrics import BertScore, RougeScore, rouge_l
from judge.provider import Provider
from judge.retry import CircuitBreaker, RetryBudget, backoff_delay
from judge.types import (
    CallRecord,
    CoverageResult,
    Defect,
    DefectsResult,
    ExtractRequest,
    ExtractResult,
    GradeRequest,
    GradeResult,
    PointVerdict,
    Provenance,
    RubricRef,
)
from judge.verdicts import (
    BonusPointsExtraction,
    CoverageJudgementBase,
    DefectJudgement,
    coverage_model,
    parse_paper_coverage,
    parse_paper_defects,
)
from rubrics.loader import RubricLibrary, load_library
from rubrics.schema import Rubric

log = logging.getLogger("bonusjudge")

TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "bonusjudge_tenant", default=None
)
"""Who the judge calls of the current task are made for (the service sets the API-key digest).

A context variable rather than a parameter: the service sets it once per request or job, and
every task ``grade_many`` starts inherits it. None (the CLI, the calibration runner) means one
caller.
"""

try:
    BONUSJUDGE_VERSION = version("bonusjudge")
except PackageNotFoundError:  # running from a source tree without an install
    BONUSJUDGE_VERSION = "0.0.0+source"


@dataclass
class EngineStats:
    """Counters over the engine's lifetime (exported as Prometheus metrics by the service)."""

    items: int = 0
    scored: int = 0
    unscored: int = 0
    provider_calls: int = 0
    cache_hits: int = 0
    metric_cache_hits: int = 0
    reasks: int = 0
    retries: int = 0
    retries_by_reason: Counter[str] = field(default_factory=Counter)
    outage_waits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unscored_by_reason: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot."""
        return {
            "items": self.items,
            "scored": self.scored,
            "unscored": self.unscored,
            "judge_calls": self.provider_calls,
            "cache_hits": self.cache_hits,
            "metric_cache_hits": self.metric_cache_hits,
            "reasks": self.reasks,
            "retries": self.retries,
            "retries_by_reason": dict(self.retries_by_reason),
            "outage_waits": self.outage_waits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "unscored_by_reason": dict(self.unscored_by_reason),
        }


@dataclass
class _CallOutcome:
    value: Any
    record: CallRecord
    reason: UnscoredReason | None = None
    detail: str | None = None


def _rubric_ref(rubric: Rubric, language: Language) -> RubricRef:
    return RubricRef(id=rubric.id, version=rubric.version, hash=rubric.hash, language=language)


class Grader:
    """Grades requests with one default judge configuration; requests may override parts of it.

    Args:
        config: The default judge configuration.
        provider: The judge backend (default: ``LiteLLMProvider``; unused by the embedded judge).
        cache: The judge-call cache (default: none; the CLI and service pass an on-disk one).
        library: The rubric library (default: the shipped one).
        retry_budget: Retries allowed for the whole life of this grader (a run).
        breaker: Circuit breaker of the default judge (model, base URL); every other judge a
            request selects gets its own, with the same settings.
        rng: Random source for backoff jitter (seedable for tests).
        sleep: The sleep used between retries (tests inject a fast one).
        cache_scope: ``shared``: one cache for every caller (:data:`TENANT`), a hit on an entry
            another caller paid for reported as a fresh call; ``per_key``: each caller's judge
            calls are cached apart (no caller ever sees another's entries, at the cost of
            paying again).
    """

    def __init__(
        self,
        config: JudgeConfig | None = None,
        *,
        provider: Provider | None = None,
        cache: JudgeCache | None = None,
        library: RubricLibrary | None = None,
        retry_budget: RetryBudget | None = None,
        breaker: CircuitBreaker | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Any] = asyncio.sleep,
        cache_scope: Literal["shared", "per_key"] = "shared",
    ) -> None:
        self.config = config or JudgeConfig()
        self.cache_scope = cache_scope
        if provider is None:
            from judge.provider import LiteLLMProvider

            provider = LiteLLMProvider()
        self.provider = provider
        self.cache = cache if cache is not None else JudgeCache(None)
        self.library = library or load_library()
        self.retry_budget = retry_budget or RetryBudget()
        self._breaker_template = breaker or CircuitBreaker()
        self.breakers: dict[tuple[str, str | None], CircuitBreaker] = {
            _breaker_key(self.config): self._breaker_template
        }
        self.stats = EngineStats()
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._semaphore = asyncio.Semaphore(self.config.concurrency)
        self._bert_batchers: dict[tuple[str | None, int | None], AsyncBatcher[Any, BertScore]] = {}
        self._matcher_batcher: AsyncBatcher[Any, Any] | None = None
        self._mappings: dict[tuple[str, str], Any] = {}
        # Validate the default rubric family and mapping now: a bad setting fails at start.
        self._rubrics_for(self.config)
        self._mapping_for(self.config)

    # -- public API ------------------------------------------------------------------------

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker of the default judge."""
        return self.breaker_for(self.config)

    @breaker.setter
    def breaker(self, value: CircuitBreaker) -> None:
        self.breakers[_breaker_key(self.config)] = value

    def breaker_for(self, config: JudgeConfig) -> CircuitBreaker:
        """The circuit breaker of ``config``'s judge: one per (model, base URL).

        An outage of one provider must not pause another, and one judge's recovery must not
        close the breaker of a judge still failing.
        """
        key = _breaker_key(config)
        breaker = self.breakers.get(key)
        if breaker is None:
            template = self._breaker_template
            breaker = CircuitBreaker(
                threshold=template.threshold,
                cooldown=template.cooldown,
                max_cooldown=template.max_cooldown,
            )
            self.breakers[key] = breaker
        return breaker

    def resolve(self, overrides: JudgeOverrides | None = None) -> JudgeConfig:
        """The default config with a request's overrides applied (validated)."""
        config = self.config.merged(overrides)
        self._rubrics_for(config)
        return config

    async def grade(
        self,
        request: GradeRequest,
        *,
        config: JudgeConfig | None = None,
        item_id: str | None = None,
    ) -> GradeResult:
        """Grade one request (bounded by the grader's concurrency limit).

        Args:
            request: The item.
            config: A full judge configuration for this call (default: the grader's).
            item_id: Id to report when the request has none (e.g. the input line number).
        """
        async with self._semaphore:
            return await self._grade(request, config or self.config, item_id)

    async def grade_many(
        self,
        requests: Iterable[GradeRequest | tuple[str, GradeRequest]]
        | AsyncIterable[GradeRequest | tuple[str, GradeRequest]],
        *,
        config: JudgeConfig | None = None,
    ) -> AsyncIterator[GradeResult]:
        """Grade many requests concurrently, yielding results as they complete.

        At most about twice the concurrency limit is in memory at once, so an input of any size
        streams through in flat memory. Items may be ``(item_id, request)`` pairs.
        """
        cfg = config or self.config
        window = max(2, 2 * cfg.concurrency)
        pending: set[asyncio.Task[GradeResult]] = set()

        def start(entry: GradeRequest | tuple[str, GradeRequest]) -> None:
            if isinstance(entry, tuple):
                item_id, request = entry
            else:
                item_id, request = None, entry
            pending.add(asyncio.ensure_future(self.grade(request, config=cfg, item_id=item_id)))

        try:
            if isinstance(requests, AsyncIterable):
                async for entry in requests:
                    start(entry)
                    while len(pending) >= window:
                        done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                        for task in done:
                            pending.discard(task)
                            yield task.result()
            else:
                for entry in requests:
                    start(entry)
                    while len(pending) >= window:
                        done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                        for task in done:
                            pending.discard(task)
                            yield task.result()
            while pending:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    pending.discard(task)
                    yield task.result()
        finally:
            for task in pending:
                task.cancel()

    async def extract_points(
        self, request: ExtractRequest, *, config: JudgeConfig | None = None
    ) -> ExtractResult:
        """Split a reference answer into bonus points with the extraction rubric (cached)."""
        cfg = config or self.config
        language = request.language or detect_language(request.reference)
        rubrics = self._rubrics_for(cfg)
        if cfg.is_embedded:
            return ExtractResult(
                status="unscored",
                reason="not_supported",
                detail="the embedded matcher cannot extract bonus points; configure an LLM judge",
                provenance=self._provenance(cfg, {}, [], language),
            )
        outcome, ref = await self._extract(
            rubrics["extract_points"],
            cfg,
            language,
            request.question,
            request.reference,
            request.context,
            request.book_name,
            None,
        )
        provenance = self._provenance(cfg, {"extract_points": ref}, [outcome.record], language)
        if outcome.reason is not None:
            return ExtractResult(
                status="unscored",
                reason=outcome.reason,
                detail=outcome.detail,
                provenance=provenance,
            )
        return ExtractResult(status="scored", bonus_points=outcome.value, provenance=provenance)

    async def ask(
        self,
        rubric_id: str,
        variables: dict[str, Any],
        response_model: type[BaseModel],
        *,
        language: Language,
        config: JudgeConfig | None = None,
    ) -> tuple[BaseModel, CallRecord]:
        """One structured judge call with any rubric, through the cache, retries and breaker.

        For judge tasks outside grading (e.g. reading a multiple-choice answer).

        Raises:
            JudgeOutputError: the judge's answer stayed unusable (its ``reason`` says why).
            ProviderError: the provider failed beyond the retries.
        """
        cfg = config or self.config
        rubric = self.library.get(rubric_id)
        prompt = self.library.render(rubric, language, variables)
        outcome = await self._call(
            rubric.task,
            rubric,
            prompt.language,
            prompt.messages,
            response_model,
            None,
            cfg,
            lambda out: out.model_dump(mode="json"),
        )
        if outcome.reason is not None:
            if outcome.reason in ("provider_error", "rate_limited", "timeout", "circuit_open"):
                raise ProviderError(outcome.detail or outcome.reason, reason=outcome.reason)
            raise JudgeOutputError(outcome.detail or outcome.reason, reason=outcome.reason)
        return response_model.model_validate(outcome.value), outcome.record

    async def aclose(self) -> None:
        """Stop background batch workers."""
        for batcher in self._bert_batchers.values():
            await batcher.aclose()
        if self._matcher_batcher is not None:
            await self._matcher_batcher.aclose()

    async def prepare(self, config: JudgeConfig | None = None) -> None:
        """Load what grading with ``config`` needs, before any batch worker uses it.

        Loads exactly what the metrics need (rouge-score for ``rouge_l``; bert_score and the
        encoder for ``bertscore``; the embedded matcher and its encoder for embedded coverage),
        once per process and serialized, in a worker thread. Call it before grading: the batch
        workers of BERTScore and of the matcher otherwise make their first imports in two
        threads at once. Safe to call again (it returns at once) and from several tasks.

        Args:
            config: The configuration to prepare for (default: the grader's).

        Raises:
            ConfigError: an encoder or the matcher's parameters cannot be loaded offline.
        """
        from judge.metrics import warm_up

        await asyncio.to_thread(warm_up, config or self.config)

    # -- one item ----------------------------------------------------------------------------

    def _mapping_for(self, config: JudgeConfig) -> Any:
        """The calibrated mapping of ``config`` (loaded once), or None when none is configured.

        Raises:
            ConfigError: the file is unreadable, or was fitted for another configuration.
        """
        if not config.calibration:
            return None
        key = (config.calibration, config.config_hash())
        if key not in self._mappings:
            # Lazy: calibration pulls in scikit-learn, which plain grading never needs.
            from calibration.mapping import load_mapping

            try:
                mapping = load_mapping(config.calibration, judge_config_hash=config.config_hash())
            except JudgeError as exc:
                raise ConfigError(f"calibration: {exc}", field="calibration") from exc
            metric = mapped_metric(mapping.metric)
            needs = _MAPPED_METRICS.get(metric)
            if needs is None:
                raise ConfigError(
                    f"calibration: the mapping maps {mapping.metric!r}, which grading does not "
                    f"compute (one of {', '.join(_MAPPED_METRICS)})",
                    field="calibration",
                )
            if needs not in config.metrics or (
                metric == "expected_coverage" and not config.is_embedded
            ):
                raise ConfigError(
                    f"calibration: the mapping maps {metric}, which this configuration does not "
                    f"compute (metrics {','.join(config.metrics)}, judge {config.model})",
                    field="calibration",
                )
            self._mappings[key] = mapping
        return self._mappings[key]

    def _rubrics_for(self, config: JudgeConfig) -> dict[str, Rubric]:
        return {
            task: self.library.for_task(config.rubric, task)
            for task in ("coverage", "defects", "extract_points")
        }

    async def _grade(
        self, request: GradeRequest, config: JudgeConfig, item_id: str | None
    ) -> GradeResult:
        started = time.monotonic()
        language: Language = request.language or detect_language(
            request.response + " " + request.reference
        )
        rubrics = self._rubrics_for(config)
        response = request.response
        truncated = False
        if config.length_control:
            cut = truncate_words(response, length_cap(request.reference))
            truncated = cut != response
            response = cut or response
        calls: list[CallRecord] = []
        refs: dict[str, RubricRef] = {}
        wanted = set(config.metrics)
        # An empty answer is an answer that covers nothing and asserts nothing (the benchmark's
        # scorer gives it 0 points): scored without asking the judge, never an invalid line.
        empty = not response.strip()

        coverage_task = (
            self._coverage(request, response, config, rubrics, language, calls, refs, empty=empty)
            if "coverage" in wanted
            else _none()
        )
        defects_task = (
            self._defects(request, response, config, rubrics, language, calls, refs)
            if "defects" in wanted and not empty
            else _none()
        )
        references = [request.reference, *(request.references or [])]
        bert_task = (
            self._best_bertscore(response, references, language, config)
            if ("bertscore" in wanted)
            else _none()
        )
        coverage, defects, bert = await asyncio.gather(coverage_task, defects_task, bert_task)
        if empty and "defects" in wanted:
            defects = DefectsResult(
                status="scored", defects=[], penalized=False, detail="empty response"
            )
        rouge = self._best_rouge(response, references, config) if "rouge_l" in wanted else None

        unscored = [
            f"{name}: {part.reason}"
            for name, part in (("coverage", coverage), ("defects", defects))
            if part is not None and part.status == "unscored"
        ]
        ref_words = count_words(request.reference)
        mapping = self._mapping_for(config)
        calibrated = None
        if mapping is not None:
            raw = _metric_value(mapped_metric(mapping.metric), coverage, rouge, bert)
            if raw is not None:
                calibrated = round(float(mapping.apply(raw)), 6)
        result = GradeResult(
            id=request.id or item_id or "",
            status="unscored" if unscored else "scored",
            unscored_reasons=unscored,
            flags=["empty_response"] if empty else [],
            input_hash=request.content_hash(),
            language=language,
            coverage=coverage,
            defects=defects,
            rouge_l=rouge,
            bertscore=bert,
            length_ratio=round(count_words(response) / ref_words, 4) if ref_words else None,
            calibrated_score=calibrated,
            tom_dimension=request.tom_dimension,
            context_window=request.context_window,
            respondent=request.respondent,
            metadata=request.metadata,
            provenance=self._provenance(config, refs, calls, language, truncated=truncated),
            elapsed_s=round(time.monotonic() - started, 4),
        )
        self.stats.items += 1
        if unscored:
            self.stats.unscored += 1
            for reason in unscored:
                self.stats.unscored_by_reason[reason] += 1
        else:
            self.stats.scored += 1
        return result

    def _provenance(
        self,
        config: JudgeConfig,
        refs: dict[str, RubricRef],
        calls: list[CallRecord],
        language: Language,
        *,
        truncated: bool = False,
    ) -> Provenance:
        if config.is_embedded:
            version = None
            if "coverage" in config.metrics:  # a metrics-only run never loads the matcher
                from judge.matcher import MATCHER_VERSION

                version = MATCHER_VERSION
            return Provenance(
                judge=EMBEDDED_JUDGE,
                judge_version=version,
                judge_quality="non-LLM matcher: coverage only, defects not assessed",
                rubrics=refs,
                config_hash=config.config_hash(),
                metrics=list(config.metrics),
                calls=calls,
                length_control=config.length_control,
                response_truncated=truncated,
                bonusjudge_version=BONUSJUDGE_VERSION,
            )
        return Provenance(
            judge=config.model,
            api_base=config.api_base,
            mode=(
                config.mode
                if self.library.for_task(config.rubric, "coverage").output == "structured"
                else "text"
            ),
            judge_quality=_quality_note(config.model),
            sampling=config.sampling(),
            rubrics=refs,
            config_hash=config.config_hash(),
            metrics=list(config.metrics),
            calls=calls,
            length_control=config.length_control,
            response_truncated=truncated,
            bonusjudge_version=BONUSJUDGE_VERSION,
        )

    async def _points(
        self,
        request: GradeRequest,
        config: JudgeConfig,
        rubrics: dict[str, Rubric],
        language: Language,
        calls: list[CallRecord],
        refs: dict[str, RubricRef],
    ) -> tuple[list[str] | None, str, _CallOutcome | None]:
        if request.bonus_points:
            return list(request.bonus_points), "request", None
        if config.is_embedded:
            return [request.reference], "reference", None
        outcome, ref = await self._extract(
            rubrics["extract_points"],
            config,
            language,
            request.question,
            request.reference,
            request.context,
            request.book_name,
            request.domain,
        )
        calls.append(outcome.record)
        refs["extract_points"] = ref
        if outcome.reason is not None:
            return None, "extracted", outcome
        return outcome.value, "extracted", None

    async def _extract(
        self,
        rubric: Rubric,
        config: JudgeConfig,
        language: Language,
        question: str,
        reference: str,
        context: str | None,
        book_name: str | None,
        domain: str | None,
    ) -> tuple[_CallOutcome, RubricRef]:
        prompt = self.library.render(
            rubric,
            language,
            {
                "question": question,
                "reference": reference,
                "context": context,
                "book_name": book_name,
                "domain": domain,
            },
        )
        outcome = await self._call(
            "extract_points",
            prompt.rubric,
            prompt.language,
            prompt.messages,
            BonusPointsExtraction,
            None,
            config,
            lambda out: list(out.points),
        )
        return outcome, _rubric_ref(prompt.rubric, prompt.language)

    async def _coverage(
        self,
        request: GradeRequest,
        response: str,
        config: JudgeConfig,
        rubrics: dict[str, Rubric],
        language: Language,
        calls: list[CallRecord],
        refs: dict[str, RubricRef],
        *,
        empty: bool = False,
    ) -> CoverageResult:
        points, source, failure = await self._points(
            request, config, rubrics, language, calls, refs
        )
        if points is None:
            assert failure is not None
            return CoverageResult(
                status="unscored",
                reason=failure.reason,
                detail=f"bonus point extraction failed: {failure.detail}",
                points_source="extracted",
            )
        if empty:
            return CoverageResult(
                status="scored",
                verdicts=[
                    PointVerdict(index=i, text=p, covered=False, rationale="empty response")
                    for i, p in enumerate(points, start=1)
                ],
                covered=0,
                total=len(points),
                coverage=0.0,
                expected_coverage=0.0 if config.is_embedded else None,
                points_source=source,  # type: ignore[arg-type]
            )
        if config.is_embedded:
            return await self._coverage_embedded(request, response, points, source, language)
        rubric = rubrics["coverage"]
        prompt = self.library.render(
            rubric,
            language,
            {
                "question": request.question,
                "reference": request.reference,
                "points": points,
                "response": response,
                "book_name": request.book_name,
                "domain": request.domain,
            },
        )
        refs["coverage"] = _rubric_ref(prompt.rubric, prompt.language)
        n = len(points)
        if rubric.output == "text":
            outcome = await self._call(
                "coverage",
                rubric,
                prompt.language,
                prompt.messages,
                None,
                None,
                config,
                lambda text: parse_paper_coverage(text, n),
            )
        else:
            outcome = await self._call(
                "coverage",
                rubric,
                prompt.language,
                prompt.messages,
                coverage_model(n),
                {"n_points": n},
                config,
                _verdict_dump,
            )
        calls.append(outcome.record)
        if outcome.reason is not None:
            return CoverageResult(
                status="unscored",
                reason=outcome.reason,
                detail=outcome.detail,
                verdicts=[
                    PointVerdict(index=i, text=p, covered=None)
                    for i, p in enumerate(points, start=1)
                ],
                total=n,
                points_source=source,  # type: ignore[arg-type]
            )
        if rubric.output == "text":
            included = set(outcome.value)
            verdicts = [
                PointVerdict(index=i, text=p, covered=i in included)
                for i, p in enumerate(points, start=1)
            ]
        else:
            by_index = {v["index"]: v for v in outcome.value}
            verdicts = [
                PointVerdict(
                    index=i,
                    text=p,
                    covered=bool(by_index[i]["covered"]),
                    rationale=by_index[i].get("rationale") or None,
                    evidence=by_index[i].get("evidence") or None,
                )
                for i, p in enumerate(points, start=1)
            ]
        covered = sum(1 for v in verdicts if v.covered)
        return CoverageResult(
            status="scored",
            verdicts=verdicts,
            covered=covered,
            total=n,
            coverage=covered / n,
            points_source=source,  # type: ignore[arg-type]
        )

    async def _coverage_embedded(
        self,
        request: GradeRequest,
        response: str,
        points: list[str],
        source: str,
        language: Language,
    ) -> CoverageResult:
        from judge.matcher import MatchInput, get_matcher

        if self._matcher_batcher is None:
            matcher = get_matcher()
            self._matcher_batcher = AsyncBatcher(matcher.match, batch_size=64, max_wait=0.005)
        # With no bonus points the whole reference is the one point; a dataset that lists
        # several acceptable references (TriviaQA aliases, NarrativeQA's two) is judged against
        # each, keeping the best match, as a reader would and as the weights were fitted.
        alternatives = [points]
        if source == "reference" and request.references:
            alternatives = [[r] for r in dict.fromkeys([points[0], *request.references])]
        batcher = self._matcher_batcher
        try:
            answers = await asyncio.gather(
                *(
                    batcher.submit(
                        MatchInput(
                            question=request.question,
                            reference=request.reference,
                            points=candidate,
                            response=response,
                            language=language,
                        )
                    )
                    for candidate in alternatives
                )
            )
        except JudgeError as exc:
            return CoverageResult(
                status="unscored",
                reason="not_supported",
                detail=str(exc),
                total=len(points),
                points_source=source,
            )  # type: ignore[arg-type]
        matches, points = max(
            zip(answers, alternatives, strict=True), key=lambda pair: pair[0][0].probability
        )
        verdicts = [
            PointVerdict(
                index=i,
                text=p,
                covered=m.covered,
                rationale=m.rationale,
                evidence=m.evidence,
                confidence=round(m.probability, 4),
            )
            for i, (p, m) in enumerate(zip(points, matches, strict=True), start=1)
        ]
        covered = sum(1 for v in verdicts if v.covered)
        return CoverageResult(
            status="scored",
            verdicts=verdicts,
            covered=covered,
            total=len(points),
            coverage=covered / len(points),
            expected_coverage=round(sum(m.probability for m in matches) / len(points), 4),
            points_source=source,  # type: ignore[arg-type]
        )

    async def _defects(
        self,
        request: GradeRequest,
        response: str,
        config: JudgeConfig,
        rubrics: dict[str, Rubric],
        language: Language,
        calls: list[CallRecord],
        refs: dict[str, RubricRef],
    ) -> DefectsResult:
        if config.is_embedded:
            return DefectsResult(
                status="not_assessed",
                detail="the embedded matcher cannot judge defects; configure an LLM judge",
            )
        rubric = rubrics["defects"]
        prompt = self.library.render(
            rubric,
            language,
            {
                "question": request.question,
                "reference": request.reference,
                "response": response,
                "context": request.context,
                "book_name": request.book_name,
                "domain": request.domain,
            },
        )
        refs["defects"] = _rubric_ref(prompt.rubric, prompt.language)
        if rubric.output == "text":
            outcome = await self._call(
                "defects",
                rubric,
                prompt.language,
                prompt.messages,
                None,
                None,
                config,
                lambda text: [
                    {"description": d, "kind": "other"} for d in parse_paper_defects(text)
                ],
            )
        else:
            outcome = await self._call(
                "defects",
                rubric,
                prompt.language,
                prompt.messages,
                DefectJudgement,
                None,
                config,
                lambda out: [d.model_dump() for d in out.defects],
            )
        calls.append(outcome.record)
        if outcome.reason is not None:
            return DefectsResult(status="unscored", reason=outcome.reason, detail=outcome.detail)
        found = [
            Defect(
                description=d["description"],
                kind=d.get("kind", "other"),
                evidence=d.get("evidence") or None,
            )
            for d in outcome.value
        ]
        return DefectsResult(status="scored", defects=found, penalized=bool(found))

    # -- metrics -----------------------------------------------------------------------------

    def _best_rouge(
        self, response: str, references: list[str], config: JudgeConfig
    ) -> RougeScore:
        """ROUGE-L against the best-matching reference (by F1)."""
        unique = list(dict.fromkeys(references))
        return max((self._rouge(response, ref, config) for ref in unique), key=lambda s: s.f1)

    async def _best_bertscore(
        self, response: str, references: list[str], language: Language, config: JudgeConfig
    ) -> BertScore:
        """BERTScore against the best-matching reference (by F1; unavailable ones last)."""
        unique = list(dict.fromkeys(references))
        scores = await asyncio.gather(
            *(self._bertscore(response, ref, language, config) for ref in unique)
        )
        return max(scores, key=lambda s: -1.0 if s.f1 is None else s.f1)

    def _rouge(self, response: str, reference: str, config: JudgeConfig) -> RougeScore:
        key = metric_key("rouge_l", {"segmenter": config.rouge_segmenter}, response, reference)
        cached = self.cache.get(key) if config.cache else None
        if cached is not None:
            self.stats.metric_cache_hits += 1
            return RougeScore.model_validate(cached)
        value = rouge_l(response, reference, segmenter=config.rouge_segmenter)
        if config.cache:
            self.cache.set(key, value.model_dump())
        return value

    async def _bertscore(
        self, response: str, reference: str, language: Language, config: JudgeConfig
    ) -> BertScore:
        params = {"encoder": config.encoder, "layer": config.encoder_layer}
        key = metric_key("bertscore", params, response, reference)
        cached = self.cache.get(key) if config.cache else None
        if cached is not None:
            self.stats.metric_cache_hits += 1
            return BertScore.model_validate(cached)
        batcher = self._bert_batcher(config.encoder, config.encoder_layer)
        value = await batcher.submit((response, reference, language))
        if config.cache and value.f1 is not None:
            self.cache.set(key, value.model_dump())
        return value

    def _bert_batcher(self, encoder: str | None, layer: int | None) -> AsyncBatcher[Any, BertScore]:
        key = (encoder, layer)
        if key not in self._bert_batchers:
            from judge.metrics import bertscore

            def run(batch: list[tuple[str, str, Language]]) -> list[BertScore]:
                return bertscore(
                    [b[0] for b in batch],
                    [b[1] for b in batch],
                    encoder=encoder,
                    layer=layer,
                    languages=[b[2] for b in batch],
                )

            self._bert_batchers[key] = AsyncBatcher(run, batch_size=64, max_wait=0.01)
        return self._bert_batchers[key]

    # -- judge calls -------------------------------------------------------------------------

    async def _call(
        self,
        task: str,
        rubric: Rubric,
        language: Language,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        validation_context: dict[str, Any] | None,
        config: JudgeConfig,
        convert: Callable[[Any], Any],
    ) -> _CallOutcome:
        """One judge call through cache, provider, retries and conversion to plain data.

        ``convert`` turns the provider's output into the JSON value that is cached and returned;
        a ``JudgeOutputError`` it raises (a faithful-mode parse failure) leaves the item unscored
        and nothing is cached.
        """
        ref = _rubric_ref(rubric, language)
        tenant = TENANT.get() or None  # "" is the one caller of a service without keys
        key = judge_call_key(
            output_fields=config.output_fields(),
            messages=messages,
            rubric={"id": rubric.id, "version": rubric.version, "hash": rubric.hash},
            response_schema=schema_hash(response_model),
            tenant=tenant if self.cache_scope == "per_key" else None,
        )
        started = time.monotonic()
        if config.cache:
            cached = self.cache.get(key)
            if cached is not None:
                self.stats.cache_hits += 1
                # An entry another caller paid for is reported as a fresh call: "cached" would
                # tell this caller that someone else graded the same item (a cross-key oracle).
                own = tenant is None or cached.get("tenant") == tenant
                return _CallOutcome(
                    value=cached["value"],
                    record=CallRecord(
                        task=task,
                        rubric=ref,
                        cached=own,
                        attempts=0 if own else 1,
                        outcome="ok",
                        cache_key=key,
                        latency_s=round(time.monotonic() - started, 4),
                    ),
                )
        attempts = 0
        retries = 0
        prompt_tokens = completion_tokens = 0
        cost = 0.0

        def record(outcome: str) -> CallRecord:
            return CallRecord(
                task=task,
                rubric=ref,
                cached=False,
                attempts=attempts,
                outcome=outcome,
                prompt_tokens=prompt_tokens or None,
                completion_tokens=completion_tokens or None,
                cost_usd=cost or None,
                latency_s=round(time.monotonic() - started, 4),
                cache_key=key,
            )

        breaker = self.breaker_for(config)
        while True:
            if not breaker.allow() and not await self._await_breaker(breaker, config):
                return _CallOutcome(
                    None,
                    record("circuit_open"),
                    "circuit_open",
                    f"the provider has been failing for {breaker.open_for():.0f} s, longer than "
                    f"max_outage ({config.max_outage:g} s); grade this item again later",
                )
            attempts += 1
            self.stats.provider_calls += 1
            try:
                completion = await self.provider.complete(
                    messages, response_model, config, validation_context=validation_context
                )
            except ProviderError as exc:
                attempts += max(0, exc.attempts - 1)  # re-asks sent before the failure
                if not exc.retryable:
                    # A 4xx is this request's own problem, and the provider answered: it is up.
                    breaker.record_success()
                    return _CallOutcome(None, record(exc.reason), exc.reason, str(exc))
                breaker.record_failure()
                if breaker.state != "closed":
                    # An outage (this failure opened the breaker, or a probe failed): the item
                    # waits for the provider with the others, spending none of its own retries.
                    self.stats.outage_waits += 1
                    continue
                if retries < config.retries:
                    if self.retry_budget.take():
                        retries += 1
                        self.stats.retries += 1
                        self.stats.retries_by_reason[exc.reason] += 1
                        await self._sleep(
                            backoff_delay(retries, retry_after=exc.retry_after, rng=self._rng)
                        )
                        continue
                    return _CallOutcome(
                        None,
                        record(exc.reason),
                        exc.reason,
                        f"{exc} (the run's retry budget is exhausted)",
                    )
                return _CallOutcome(None, record(exc.reason), exc.reason, str(exc))
            except asyncio.CancelledError:
                breaker.release_probe()  # a cancelled probe must not leave the others waiting
                raise
            except JudgeOutputError as exc:
                # The provider is up (it answered), so the breaker sees a success.
                breaker.record_success()
                attempts += max(0, exc.attempts - 1)
                self.stats.reasks += max(0, exc.attempts - 1)
                return _CallOutcome(None, record(exc.reason), exc.reason, str(exc))
            except Exception as exc:
                if getattr(exc, "fatal", False):
                    raise
                log.exception("unexpected error from the judge provider")
                breaker.record_failure()
                return _CallOutcome(
                    None,
                    record("provider_error"),
                    "provider_error",
                    f"unexpected {type(exc).__name__}: {str(exc)[:300]}",
                )
            breaker.record_success()
            attempts += max(0, completion.attempts - 1)
            self.stats.reasks += max(0, completion.attempts - 1)
            prompt_tokens += completion.prompt_tokens or 0
            completion_tokens += completion.completion_tokens or 0
            cost += completion.cost_usd or 0.0
            self.stats.prompt_tokens += completion.prompt_tokens or 0
            self.stats.completion_tokens += completion.completion_tokens or 0
            self.stats.cost_usd += completion.cost_usd or 0.0
            try:
                value = convert(completion.output)
            except JudgeOutputError as exc:
                return _CallOutcome(None, record(exc.reason), exc.reason, str(exc))
            if config.cache:
                self.cache.set(key, {"value": value, "raw": completion.raw_text, "tenant": tenant})
            return _CallOutcome(value, record("ok"))

    async def _await_breaker(self, breaker: CircuitBreaker, config: JudgeConfig) -> bool:
        """Wait while ``config``'s provider is in an outage; True once a call may go ahead.

        False when the outage has lasted longer than ``config.max_outage``: the item then ends
        ``circuit_open`` (a reason a re-run or ``--retry-unscored`` clears), so a provider that
        never comes back cannot hold a run forever.
        """
        while not breaker.allow():
            if breaker.open_for() >= config.max_outage:
                return False
            # Real time, not the injectable backoff sleep: the breaker's clock is monotonic.
            await asyncio.sleep(min(1.0, max(0.05, breaker.retry_in())))
        return True


async def _none() -> None:
    return None


def _breaker_key(config: JudgeConfig) -> tuple[str, str | None]:
    return (config.model, config.api_base)


_MAPPED_METRICS = {
    "coverage": "coverage",
    "expected_coverage": "coverage",
    "rouge_l": "rouge_l",
    "bertscore": "bertscore",
}
"""Metric a calibrated mapping may map -> the metric the run must compute for it."""


def mapped_metric(name: str | None) -> str:
    """The metric a mapping file names, without the calibration report's ``@judge`` suffix.

    Files written before mappings named their metric map thresholded coverage.
    """
    return (name or "coverage").split("@", 1)[0]


def _metric_value(
    metric: str,
    coverage: CoverageResult | None,
    rouge: RougeScore | None,
    bert: BertScore | None,
) -> float | None:
    if metric == "coverage":
        return coverage.coverage if coverage is not None else None
    if metric == "expected_coverage":
        return coverage.expected_coverage if coverage is not None else None
    if metric == "rouge_l":
        return rouge.f1 if rouge is not None else None
    return bert.f1 if bert is not None else None


def _verdict_dump(output: CoverageJudgementBase) -> list[dict[str, Any]]:
    return [
        {"index": p.index, "covered": p.covered, "rationale": p.rationale, "evidence": p.evidence}
        for p in output.points
    ]


def _quality_note(model: str) -> str | None:
    if "gemma3-270m" in model or "gemma-3-270m" in model:
        return "smoke-test only"
    return None
