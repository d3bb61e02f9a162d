"""The grading engine: request -> judge -> judge calls (cached) -> metrics -> result.

``Grader`` is the one place where grading happens; the CLI, the HTTP service and the calibration
runner all call it. It orchestrates only. For each item it resolves the language and the judge
(an LLM judge or the embedded matcher, chosen once from the configuration, see
``judge.judges``), runs coverage (after the bonus points, extracted from the reference when the
request has none), defects and BERTScore concurrently, computes ROUGE-L, applies a calibrated
mapping when one is configured, and assembles a ``GradeResult``.

Judge calls go through ``judge.calls.Caller`` (cache, provider, retries with backoff, the run's
retry budget, a circuit breaker per judge); metric values through ``judge.metrics.runner``. Each
judge task returns its own call records, and the provenance lists them in a fixed order:
extraction, coverage, defects. Any judge failure ends as *unscored* with its reason; nothing is
silently zero, and nothing unscored counts as coverage.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Iterable,
)
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from pydantic import BaseModel

from bonusjudge_client.wire.grading import (
    PROMPT_LANGUAGE_FLAG,
    CallRecord,
    CoverageResult,
    ExtractRequest,
    ExtractResult,
    GradeRequest,
    GradeResult,
)
from core.errors import ConfigError, JudgeOutputError, ProviderError
from core.text import Language, count_words, detect_language, length_cap, truncate_words
from judge.cache import Cache, JudgeCache
from judge.calls import PROVIDER_REASONS, TENANT, Caller, CallerOptions, CallSpec
from judge.config import JudgeConfig, JudgeOverrides
from judge.fairness import FairLimiter
from judge.judges import (
    BONUSJUDGE_VERSION,
    EmbeddedJudge,
    Item,
    Judge,
    LLMJudge,
    SharedMatcher,
    TaskRun,
)
from judge.metrics import BertScore, RougeScore
from judge.metrics.runner import MetricsRunner
from judge.providers.base import Provider
from judge.retry import backoff_delay
from judge.stats import EngineStats
from rubrics.loader import RubricLibrary, load_library
from rubrics.schema import Rubric

if TYPE_CHECKING:
    from judge.mapping import CalibratedMapping
    from judge.matcher import CascadeBand, ModelKind

__all__ = [
    "BONUSJUDGE_VERSION", "TENANT", "EngineStats", "Grader", "check_cascade", "iterate_entries",
]

T = TypeVar("T")

Entry = GradeRequest | tuple[str, GradeRequest]
"""What ``grade_many`` takes: a request, or an ``(item_id, request)`` pair."""


_MAX_JUDGES = 256
"""Judges a grader keeps (one per configuration seen: the default and requests' overrides)."""


class Grader:
    """Grades requests with one default judge configuration; requests may override parts of it.

    Args:
        config: The default judge configuration.
        provider: The judge backend (default: ``judge.providers.routing.RoutingProvider``,
            which sends each call on the transport its config picks; unused by the embedded
            judge).
        cache: The judge-call cache, on disk or in Redis (default: none; the CLI and service
            pass the one ``judge.cache.open_cache`` chooses).
        library: The rubric library (default: the shipped one).
        caller: A caller made elsewhere (the estimate's, which sends nothing), instead of the one
            the grader makes from ``provider``, ``cache`` and ``options``.
        **options: The caller's options, passed on to :class:`~judge.calls.Caller`
            (:class:`~judge.calls.CallerOptions`: ``retry_budget`` for the grader's life,
            ``breaker`` of the default judge, ``rng``, ``sleep``, ``cache_scope``).

    Attributes:
        caller: Makes every judge call (cache, provider, retries, budget, breakers).
        metrics: Computes ROUGE-L and BERTScore (cached, batched).
        stats: The counters of this grader's lifetime.
        slots: The items in flight, at most the configured concurrency, shared fairly between
            callers (:class:`~judge.fairness.FairLimiter` keyed by :data:`TENANT`).
    """

    def __init__(
        self,
        config: JudgeConfig | None = None,
        *,
        provider: Provider | None = None,
        cache: Cache | None = None,
        library: RubricLibrary | None = None,
        caller: Caller | None = None,
        **options: Unpack[CallerOptions],
    ) -> None:
        self.config = config or JudgeConfig()
        self.library = library or load_library()
        if caller is not None:
            if provider is not None or cache is not None or options:
                raise TypeError("a Grader given its caller takes no provider, cache or options")
            # Its own: the estimate's caller (judge.estimate), whose stats are the grader's.
            self._owns_provider = False
            self.caller = caller
            self.stats = caller.stats
        else:
            # A provider the grader makes is the grader's to close (its HTTP session); one
            # passed in belongs to the caller, who may share it.
            self._owns_provider = provider is None
            if provider is None:
                from judge.providers.routing import RoutingProvider

                provider = RoutingProvider()
            self.stats = EngineStats()
            self.caller = Caller(
                provider,
                cache if cache is not None else JudgeCache(None),
                self.stats,
                # Read from this module when the grader is made, so a test may wrap it here.
                backoff=backoff_delay,
                **options,
            )
        self.caller.gates.set_breaker(self.config, self.caller.gates.template)
        # What a configuration loads (encoders, the matcher) is loaded on its first cache miss,
        # so a re-run answered from the cache loads nothing (warm runs were 2-3x slower).
        self._loaded: set[tuple[Any, ...]] = set()
        partition = self.caller.partition  # one cache scope for every kind of entry
        self.metrics = MetricsRunner(
            self.caller.cache, self.stats, load=self._ensure_loaded, partition=partition
        )
        self._matcher = SharedMatcher(
            self.caller.cache, self.stats, load=self._ensure_loaded, partition=partition
        )
        # One slot per item in flight, shared fairly between the callers (TENANT) the grader
        # grades for, so one caller's queue cannot hold back another's single item.
        self.slots = FairLimiter(self.config.concurrency)
        self._judges: dict[JudgeConfig, Judge] = {}
        self._mappings: dict[tuple[str, str], CalibratedMapping | None] = {}
        # Validate the default rubric family and mapping now: a bad setting fails at start.
        self._rubrics_for(self.config)
        self._check_judge(self.config)
        self._mapping_for(self.config)

    # -- public API ------------------------------------------------------------------------------

    def resolve(self, overrides: JudgeOverrides | None = None) -> JudgeConfig:
        """The default config with a request's overrides applied (validated)."""
        config = self.config.merged(overrides)
        self._rubrics_for(config)
        self._check_judge(config)
        return config

    async def grade(
        self,
        request: GradeRequest,
        *,
        config: JudgeConfig | None = None,
        item_id: str | None = None,
        max_outage: float | None = None,
    ) -> GradeResult:
        """Grade one request, in one of the grader's slots.

        The slots (the concurrency limit) are shared fairly between callers: the item waits
        behind its own caller's (:data:`TENANT`) earlier items, not behind everyone's.

        Args:
            request: The item.
            config: A full judge configuration for this call (default: the grader's).
            item_id: Id to report when the request has none (e.g. the input line number).
            max_outage: Seconds this item's calls wait while the provider's breaker is open
                (default: the configuration's ``max_outage``); 0 for a caller waiting on the
                answer, whose calls then end ``circuit_open`` at once.
        """
        cfg = _with_max_outage(config or self.config, max_outage)
        async with self.slots.slot(TENANT.get()):
            return await self._grade(request, cfg, item_id)

    async def grade_many(
        self,
        requests: Iterable[Entry] | AsyncIterable[Entry],
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
        entries = iterate_entries(requests)
        try:
            async for entry in entries:
                item_id, request = entry if isinstance(entry, tuple) else (None, entry)
                pending.add(asyncio.ensure_future(self.grade(request, config=cfg, item_id=item_id)))
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
            await entries.aclose()

    async def extract_points(
        self, request: ExtractRequest, *, config: JudgeConfig | None = None,
        max_outage: float | None = None,
    ) -> ExtractResult:
        """Split a reference answer into bonus points with the extraction rubric (cached).

        ``max_outage``: as :meth:`grade`'s.
        """
        cfg = _with_max_outage(config or self.config, max_outage)
        language = request.language or detect_language(request.reference)
        return await self._judge_for(cfg).extract_points(request, language)

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
            JudgeOutputError: the judge's answer stayed unusable (its ``reason`` says why), or
                a cost cap kept the request back (``budget_exhausted``, named in the message).
            ProviderError: the provider failed beyond the retries.
        """
        rubric = self.library.get(rubric_id)
        prompt = self.library.render(rubric, language, variables)
        outcome = await self.caller.call(
            CallSpec.for_prompt(
                rubric.task,
                prompt,
                config or self.config,
                lambda out: out.model_dump(mode="json"),
                response_model=response_model,
            )
        )
        if outcome.reason is not None:
            if outcome.reason in PROVIDER_REASONS:
                raise ProviderError(outcome.detail or outcome.reason, reason=outcome.reason)
            detail = outcome.detail or outcome.reason
            if outcome.reason == "budget_exhausted":
                # Named in the message: a caller that reports only the text (a multiple-choice
                # reading) must still tell a request the cap kept back from a bad answer.
                detail = f"budget_exhausted: {detail}"
            raise JudgeOutputError(detail, reason=outcome.reason)
        return response_model.model_validate(outcome.value), outcome.record

    async def aclose(self) -> None:
        """Stop background batch workers and close the provider the grader made."""
        await self.metrics.aclose()
        await self._matcher.aclose()
        close = getattr(self.caller.provider, "aclose", None) if self._owns_provider else None
        if close is not None:
            await close()

    async def prepare(self, config: JudgeConfig | None = None) -> None:
        """Load what grading with ``config`` needs, before any batch worker uses it.

        Loads exactly what the metrics need (rouge-score for ``rouge_l``; the encoder for
        ``bertscore``, and transformers with bert_score only for an encoder the torch-only path
        does not run; the embedded matcher and its encoder for embedded coverage),
        once per process and serialized, in a worker thread. Call it before grading: the batch
        workers of BERTScore and of the matcher otherwise make their first imports in two
        threads at once. Safe to call again (it returns at once) and from several tasks.

        Args:
            config: The configuration to prepare for (default: the grader's).

        Raises:
            ConfigError: an encoder or the matcher's parameters cannot be loaded offline.
        """
        await self._ensure_loaded(config or self.config)

    def check(self, config: JudgeConfig | None = None) -> None:
        """Fail now, without loading anything, when grading with ``config`` could not load.

        The cheap half of :meth:`prepare` for callers that load lazily (the CLI): a run answered
        from the cache then never pays for loading an encoder, and a missing encoder still stops
        the run before the first item.

        Raises:
            ConfigError: an encoder or the matcher's parameters are not available offline.
        """
        from judge.loading import check_loadable

        check_loadable(config or self.config)

    async def _ensure_loaded(self, config: JudgeConfig) -> None:
        """Load what ``config`` needs, once per grader, in a worker thread (serialized)."""
        key = (
            config.metrics, config.uses_matcher, config.encoder, config.encoder_layer,
            config.rouge_segmenter,
        )  # fmt: skip
        if key in self._loaded:
            return
        from judge.loading import warm_up

        # warm_up is once per process and serialized: concurrent first misses wait for one load.
        await asyncio.to_thread(warm_up, config)
        self._loaded.add(key)

    # -- one item --------------------------------------------------------------------------------

    def _rubrics_for(self, config: JudgeConfig) -> dict[str, Rubric]:
        return {
            task: self.library.for_task(config.rubric, task)
            for task in ("coverage", "defects", "extract_points")
        }

    def _judge_for(self, config: JudgeConfig) -> Judge:
        """The judge of ``config``: the one place the judge kind is decided, once per config.

        Configurations are frozen (hashable), so a run's items share one judge and its rubric
        look-ups instead of making them per item.
        """
        judge = self._judges.get(config)
        if judge is None:
            rubrics = self._rubrics_for(config)  # validates the rubric family for every judge
            if config.is_cascade:
                from judge.cascade import CascadeJudge

                judge = CascadeJudge(
                    config,
                    EmbeddedJudge(config, self._matcher),
                    LLMJudge(config, rubrics, self.library, self.caller),
                    _cascade_bands(config),
                )
            elif config.is_embedded:
                judge = EmbeddedJudge(config, self._matcher)
            else:
                judge = LLMJudge(config, rubrics, self.library, self.caller)
            if len(self._judges) >= _MAX_JUDGES:
                self._judges.clear()  # per-request overrides: bounded, never a leak
            self._judges[config] = judge
        return judge

    def _check_judge(self, config: JudgeConfig) -> None:
        """Fail now when a cascade has no LLM, or no band for its agreement (ConfigError)."""
        check_cascade(config)

    def _mapping_for(
        self, config: JudgeConfig, config_hash: str | None = None
    ) -> CalibratedMapping | None:
        """The calibrated mapping of ``config`` (loaded once), or None when none is configured.

        Raises:
            ConfigError: the file is unreadable, was fitted for another configuration, or maps
                a metric this configuration does not compute.
        """
        if not config.calibration:
            return None
        # The item's provenance has the hash already: computed once per item, not twice.
        key = (config.calibration, config_hash or config.config_hash())
        if key not in self._mappings:
            # Lazy: applying a mapping needs numpy, which plain grading never loads.
            from judge.mapping import mapping_for_config

            self._mappings[key] = mapping_for_config(config)
        return self._mappings[key]

    async def _grade(
        self, request: GradeRequest, config: JudgeConfig, item_id: str | None
    ) -> GradeResult:
        started = time.monotonic()
        # A null response (a harness's refusal or timeout) is graded as an empty one.
        response, truncated = request.response or "", False
        language: Language = request.language or detect_language(
            response + " " + request.reference
        )
        judge = self._judge_for(config)
        if config.length_control:
            cut = truncate_words(response, length_cap(request.reference))
            truncated = cut != response
            response = cut or response
        item = Item(request, response, language)
        wanted = set(config.metrics)
        references = [request.reference, *(request.references or [])]
        # Each coroutine goes to gather itself, which makes it a task: wrapped in another
        # coroutine, one cancelled before it started (a job cancelled mid-chunk) was never
        # awaited, and Python warned so.
        coverage, defects, bert = await asyncio.gather(
            self._coverage(judge, item) if "coverage" in wanted else _nothing(),
            # An empty or null answer asserts nothing: each judge answers that without a call.
            judge.defects(item) if "defects" in wanted else _nothing(),
            self.metrics.best_bertscore(response, references, language, config)
            if "bertscore" in wanted
            else _nothing(),
        )
        rouge = None
        if "rouge_l" in wanted:
            rouge = await self.metrics.best_rouge(response, references, config)
        # Fixed order, whatever finished first: extraction and coverage, then defects.
        runs = [run for run in (coverage, defects) if run is not None]
        calls = [call for run in runs for call in run.calls]
        rubrics = {task: ref for run in runs for task, ref in run.rubrics.items()}
        decided_by = next((run.decided_by for run in runs if run.decided_by), None)
        coverage_result = coverage.value if coverage is not None else None
        defects_result = defects.value if defects is not None else None
        unscored = [
            f"{name}: {part.reason}"
            for name, part in (("coverage", coverage_result), ("defects", defects_result))
            if part is not None and part.status == "unscored"
        ]
        ref_words = count_words(request.reference)
        flags: list[str] = [item.blank] if item.blank is not None else []
        if any(ref.language != language for ref in rubrics.values()):
            # Judged with a fallback language's prompts: the paper's English-only rubrics on a
            # Chinese item (``chartom`` has Chinese prompts). The run's summary says so too.
            flags.append(PROMPT_LANGUAGE_FLAG)
        provenance = judge.provenance(rubrics, calls, truncated=truncated)
        result = GradeResult(
            id=request.id or item_id or "",
            status="unscored" if unscored else "scored",
            unscored_reasons=unscored,
            flags=flags,
            input_hash=request.content_hash(),
            language=language,
            coverage=coverage_result,
            defects=defects_result,
            rouge_l=rouge,
            bertscore=bert,
            length_ratio=round(count_words(response) / ref_words, 4) if ref_words else None,
            **self._calibrated(config, provenance.config_hash, coverage_result, rouge, bert),
            tom_dimension=request.tom_dimension,
            # The window of the plot the judge read: none without a plot. A CharToM line whose
            # chosen window is empty (`"context_2000": ""`), or a harness's request naming a
            # window with no context, would otherwise be counted under that window.
            context_window=request.context_window if _has_context(request) else None,
            respondent=request.respondent,
            metadata=request.metadata,
            provenance=provenance,
            decided_by=decided_by,
            elapsed_s=round(time.monotonic() - started, 4),
        )
        self._count(unscored)
        return result

    async def _coverage(self, judge: Judge, item: Item) -> TaskRun[CoverageResult]:
        """Coverage after the bonus points; the extraction's call comes first in the run."""
        found = await judge.points(item)
        points = found.value
        if points.points is None:
            failed = CoverageResult(
                status="unscored",
                reason=points.reason,
                detail=f"bonus point extraction failed: {points.detail}",
                points_source="extracted",
            )
            return TaskRun(failed, found.calls, found.rubrics)
        judged = await judge.coverage(item, points.points, points.source)
        return TaskRun(
            judged.value,
            [*found.calls, *judged.calls],
            {**found.rubrics, **judged.rubrics},
            judged.decided_by,
        )

    def _calibrated(
        self,
        config: JudgeConfig,
        config_hash: str,
        coverage: CoverageResult | None,
        rouge: RougeScore | None,
        bert: BertScore | None,
    ) -> dict[str, Any]:
        """``calibrated_score`` and ``calibrated_metric`` of a result (none without a mapping)."""
        mapping = self._mapping_for(config, config_hash)
        if mapping is None:
            return {}
        from judge.mapping import calibrated_metric, calibrated_score  # loaded with the mapping

        return {
            "calibrated_score": calibrated_score(mapping, coverage, rouge, bert),
            "calibrated_metric": calibrated_metric(mapping),
        }

    def _count(self, unscored: list[str]) -> None:
        self.stats.count_item(unscored, TENANT.get())


def check_cascade(config: JudgeConfig) -> None:
    """Fail when ``config`` is a cascade that cannot work: no LLM, or no band for its agreement.

    For callers that must refuse before they write anything (the CLI opens its output only
    after this); the grader checks it again when it makes the judge.

    Raises:
        ConfigError: naming what to set.
    """
    if config.is_cascade:
        config.check_cascade()
        _cascade_bands(config)


def _cascade_bands(config: JudgeConfig) -> dict[ModelKind, CascadeBand]:
    """The matcher's uncertain bands at ``config``'s target agreement (its shipped parameters).

    Raises:
        ConfigError: the parameter file has no cascade bands, or none for that agreement.
    """
    from judge.matcher import get_matcher

    fitted = get_matcher().params.cascade
    if fitted is None:
        raise ConfigError(
            "the matcher's parameter file has no cascade bands; fit them with "
            "python -m calibration.fit.cascade",
            field="judge",
        )
    return fitted.at(config.cascade_agreement)


def _with_max_outage(config: JudgeConfig, max_outage: float | None) -> JudgeConfig:
    """``config`` with its calls waiting out an outage for ``max_outage`` s (None: as it says).

    The wait is read from the configuration each call carries (``Caller``); it changes no
    answer, so neither the cache key nor the configuration hash. The embedded matcher calls no
    provider: its configuration stays the one object its items share (one judge, one batch).
    """
    if max_outage is None or config.is_embedded or max_outage == config.max_outage:
        return config
    return config.model_copy(update={"max_outage": max_outage})


async def _nothing() -> None:
    """The result of a metric not asked for."""
    return None


def _has_context(request: GradeRequest) -> bool:
    """Whether ``request`` carries a plot for the judge to read (not empty, not blank)."""
    return bool(request.context and request.context.strip())


async def iterate_entries(
    entries: Iterable[Entry] | AsyncIterable[Entry],
) -> AsyncGenerator[Entry, None]:
    """Iterate a plain or an async iterable of entries alike (``grade_many`` takes either)."""
    if isinstance(entries, AsyncIterable):
        async for entry in entries:
            yield entry
    else:
        for entry in entries:
            yield entry
