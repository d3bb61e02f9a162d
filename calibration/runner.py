"""The calibration runner: grade a human-rated set with each judge configuration, then report.

Every item goes through the engine (cached, concurrent), and each configuration's results are
written to ``REPORT_DIR/grades-<config hash>-<metrics>.jsonl`` as they complete, so an
interrupted run resumes where it stopped. Scores are then keyed by item id and handed to
``calibration.report.build_report``, which joins them with the human scores on that id (never two
lists filtered separately) and computes every statistic.

Metric names in the report: ``rouge_l`` and ``bertscore`` (F1 of the candidate against the
reference), ``coverage@<judge>`` (BPC of one item) for each judge configuration; for key-point
sets (K-QA) the per-point verdict of ``coverage@<judge>`` is compared with the physicians' label,
and its defect flag with "contradicted".
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rapidfuzz import fuzz
from tqdm import tqdm

from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.grading import MAX_REFERENCES, GradeRequest, GradeResult
from bonusjudge_client.wire.vocab import CALIBRATION_METRICS, MetricName
from calibration.report import ReportFiles, build_report, write_report
from calibration.sets import CalibrationItem, LoadedSet
from core.errors import InputError
from judge.aggregate import summarize
from judge.budget import BUDGET, Budget
from judge.cache import Cache, JudgeCache, open_cache
from judge.config import EMBEDDED_JUDGE, JudgeConfig, Settings
from judge.engine import Grader
from judge.io import ResultWriter
from judge.mapping import METRIC_KEYED, metric_settings
from judge.resume import JudgeStamp, stale_reason

METRIC_ONLY: tuple[str, ...] = ("rouge_l", "bertscore")


@dataclass
class CalibrationRun:
    """What a run produced: the report files and how long each configuration took."""

    files: ReportFiles
    timings: dict[str, float] = field(default_factory=dict)
    graded: dict[str, int] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per configuration: bpc (scored items), bpc_all (unscored as not covered), the unscored
    rate and its warnings, so a correlation over scored items is read with its coverage."""


def item_request(item: CalibrationItem) -> GradeRequest:
    """The grading request of a calibration item (the candidate is the response).

    K-QA key-point rows carry their one gold statement as the single bonus point; CharToM and
    K-QA answer-level rows carry their points; other sets leave points to the judge (extraction,
    or the whole reference for the embedded matcher).
    """
    points = [item.key_point] if item.key_point else item.bonus_points
    return GradeRequest(
        id=item.id,
        question=item.question,
        reference=item.reference,
        # Metrics take the best of the individual references (datasets with several).
        references=_closest_references(item) if len(item.references) > 1 else None,
        bonus_points=points or None,
        response=item.candidate,
        context=item.context,
        tom_dimension=item.dimension,
        respondent=item.system,
    )


def _closest_references(item: CalibrationItem) -> list[str]:
    """The item's references, cut to :data:`MAX_REFERENCES`: the first, then the closest others.

    EVOUNA lists up to 80 answer aliases; keeping the first 16 in file order dropped the alias
    the candidate used for about one correct answer in twenty, which then scored as wrong. The
    others are ranked by how lexically close they are to the candidate (rapidfuzz), so the
    best-of metrics and the matcher see the alias a reader would match.
    """
    refs = list(dict.fromkeys(item.references))
    if len(refs) <= MAX_REFERENCES:
        return refs
    candidate = item.candidate.lower()

    def closeness(ref: str) -> float:
        text = ref.lower()
        return fuzz.token_set_ratio(text, candidate) + fuzz.partial_ratio(text, candidate)

    ranked = sorted(refs[1:], key=closeness, reverse=True)
    return [refs[0], *ranked[: MAX_REFERENCES - 1]]


def _progress(label: str, total: int, *, enabled: bool) -> tqdm[Any]:
    """A progress bar for one grading pass, on stderr so the report on stdout stays clean."""
    return tqdm(
        total=total,
        desc=label,
        unit="item",
        file=sys.stderr,
        disable=not enabled,
        dynamic_ncols=True,
    )


async def _grade_all(
    grader: Grader,
    config: JudgeConfig,
    items: Sequence[CalibrationItem],
    writer: ResultWriter,
    pace: Pace,
    bar: tqdm[Any] | None = None,
) -> dict[str, GradeResult | str]:
    """Grade the items not yet in ``writer``, paced; returns id -> result, or id -> invalid reason.

    A stored grade stands only for the same content graded by the same judge
    (:func:`judge.resume.stale_reason`): an edited item, or a grade of another judge version or
    configuration, is graded again and the reason is said on stderr. ``bar`` counts every item:
    invalid and already graded ones at once, the rest as they finish.
    """
    out: dict[str, GradeResult | str] = {}
    todo: list[tuple[str, GradeRequest]] = []
    stale: list[dict[str, Any]] = []
    reasons: Counter[str] = Counter()
    stamp = JudgeStamp.of(config)
    for item in items:
        try:
            request = item_request(item)
        except ValidationError as exc:
            out[item.id] = f"invalid_item: {first_error(exc)[1]}"
            continue
        done = writer.done.get(item.id)
        reason = None if done is None else stale_reason(done, request.content_hash(), stamp)
        if done is not None and reason is None:
            out[item.id] = GradeResult.model_validate(done)
            continue
        if done is not None:
            stale.append(done)
            reasons[str(reason)] += 1
        todo.append((item.id, request))
    if stale:
        dropped = {id(obj) for obj in stale}
        writer.rewrite([obj for obj in writer.done.values() if id(obj) not in dropped])
        detail = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
        print(f"{writer.path}: grading {len(stale)} item(s) again: {detail}", file=sys.stderr)
    if bar is not None:
        bar.update(len(out))
    async for result in _paced(grader, config, todo, pace):
        writer.write(result)
        out[result.id] = result
        if bar is not None:
            bar.update(1)
    return out


async def _paced(
    grader: Grader,
    config: JudgeConfig,
    todo: Sequence[tuple[str, GradeRequest]],
    pace: Pace,
) -> AsyncIterator[GradeResult]:
    """Grade ``todo``, at most ``pace.width()`` items in flight, yielding results as they end.

    The width is read again whenever a slot frees up, so a service run keeps to its current
    share of the grader. When ``pace.stop()`` turns true no item is started any more; those in
    flight finish (and are yielded), then :class:`Halted` is raised. So it is when the budget in
    force (``judge.budget.BUDGET``) refuses a request, and :class:`BudgetStopped` is raised.
    Leaving early (the run's task cancelled: ``DELETE /v1/calibrate/{id}``) cancels the items in
    flight, and with them their provider requests.

    Raises:
        BudgetStopped: a cost cap refused a judge call of the pass.
        Halted: ``pace.stop()`` turned true before every item was started.
    """
    pending: set[asyncio.Task[GradeResult]] = set()
    position = 0
    graded = 0
    budget = BUDGET.get()

    def spent() -> bool:
        return budget is not None and budget.exhausted

    try:
        while True:
            while (
                position < len(todo) and len(pending) < max(1, pace.width())
                and not pace.stop() and not spent()
            ):
                item_id, request = todo[position]
                position += 1
                pending.add(asyncio.ensure_future(
                    grader.grade(request, config=config, item_id=item_id)
                ))
            if not pending:
                break
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                result = task.result()
                graded += not _refused(result)
                yield result
    finally:
        for task in pending:
            task.cancel()
    if spent():
        # Checked after the last item too: a pass whose last calls were refused is not whole.
        raise BudgetStopped(graded, len(todo))
    if position < len(todo):
        raise Halted(f"stopped with {len(todo) - position} of {len(todo)} item(s) not started")


def _refused(result: GradeResult) -> bool:
    """Whether a cost cap kept one of the item's judge calls from being sent."""
    return any(reason.endswith(": budget_exhausted") for reason in result.unscored_reasons)


def _say_not_reused(grades: Path, config: JudgeConfig) -> None:
    """Name the grade files of other judge configurations (an older matcher...) left unused.

    A grade file is named by its configuration's hash, which covers the matcher's version and
    parameter digest: after an upgrade the old file is not read, and the run says so instead
    of silently grading everything again.
    """
    suffix = grades.name.split("-", 2)[2]
    for other in sorted(grades.parent.glob(f"grades-*-{suffix}")):
        if other == grades:
            continue
        try:
            with other.open(encoding="utf-8") as handle:
                first = json.loads(handle.readline() or "{}")
        except (OSError, ValueError):
            first = {}
        was = (first.get("provenance") or {}).get("judge_version") or "another configuration"
        print(
            f"{other}: not reused: graded by {was}, this run's judge is "
            f"{config.judge_version or config.model} ({config.config_hash()})",
            file=sys.stderr,
        )


def _metric_scores(
    results: dict[str, GradeResult | str], metrics: Sequence[str], judge_label: str
) -> tuple[
    dict[str, dict[str, float | None]],
    dict[str, dict[str, str]],
    dict[str, dict[str, bool | None]],
    dict[str, dict[str, bool | None]],
]:
    scores: dict[str, dict[str, float | None]] = {}
    reasons: dict[str, dict[str, str]] = {}
    points: dict[str, dict[str, bool | None]] = {}
    defects: dict[str, dict[str, bool | None]] = {}
    if judge_label == EMBEDDED_JUDGE and "coverage" in metrics:
        # The matcher's graded score (mean point probability) next to its thresholded coverage:
        # with one point per item, coverage is 0 or 1 and ranks coarsely.
        metrics = [*metrics, "expected_coverage"]
    for item_id, result in results.items():
        for metric in metrics:
            name = metric if metric in METRIC_ONLY else f"{metric}@{judge_label}"
            bucket = scores.setdefault(name, {})
            if isinstance(result, str):
                bucket[item_id] = None
                reasons.setdefault(name, {})[item_id] = result
                continue
            value: float | None = None
            reason: str | None = None
            if metric == "rouge_l":
                value = result.rouge_l.f1 if result.rouge_l else None
            elif metric == "bertscore":
                value = result.bertscore.f1 if result.bertscore else None
                if value is None and result.bertscore is not None:
                    reason = result.bertscore.reason or "unavailable"
            elif metric == "coverage" and result.coverage is not None:
                value = result.coverage.coverage
                reason = result.coverage.reason
                if result.coverage.status == "scored" and len(result.coverage.verdicts) == 1:
                    points.setdefault(name, {})[item_id] = result.coverage.verdicts[0].covered
                if result.defects is not None and result.defects.status == "scored":
                    defects.setdefault(name, {})[item_id] = result.defects.penalized
            elif metric == "expected_coverage" and result.coverage is not None:
                value = result.coverage.expected_coverage
                reason = result.coverage.reason
            bucket[item_id] = value
            if value is None:
                reasons.setdefault(name, {})[item_id] = reason or "unscored"
    return scores, reasons, points, defects


def _never() -> bool:
    return False


def _no_budget(config: JudgeConfig) -> Budget | None:
    return None


@dataclass(frozen=True)
class Pace:
    """How a run feeds the engine: how many items it may have in flight, and when to stop.

    The CLI grades at its judge's concurrency; the service gives a run the share of its one
    grader that a job gets (``JobManager.share``), read again as other jobs start and end,
    and stops feeding when the job must halt (shutdown, or making room for another key).

    Attributes:
        width: Items this run may have in flight now (at least 1 is used).
        stop: Whether to stop feeding items: those in flight finish and are kept, then the
            run raises :class:`Halted`.
        budget: The budget a pass with this judge configuration spends against (set in
            ``judge.budget.BUDGET`` for the pass; the service's key day), or None to leave the
            one in force. When it refuses a request the pass stops feeding items and the run
            raises :class:`BudgetStopped`.
    """

    width: Callable[[], int]
    stop: Callable[[], bool] = _never
    budget: Callable[[JudgeConfig], Budget | None] = _no_budget

    @classmethod
    def fixed(cls, width: int) -> Pace:
        """A constant width that never stops (the command line's pace)."""
        return cls(width=lambda: width)


class Halted(Exception):
    """A run stopped feeding items before its grading passes ended (``Pace.stop``).

    What was graded is in the run's grade files, so the next run resumes from there.
    """


class BudgetStopped(Exception):
    """A cost cap refused a judge call of a pass: the run stopped sending (``judge.budget``).

    The items graded before it are in the run's grade file and their judge calls in the cache;
    those whose calls were refused are graded again by the next run (``judge.resume``).

    Attributes:
        graded: Items of the pass graded in full before it stopped.
        total: Items the pass had to grade.
        label: The pass (``metrics`` or the judge's model), set by ``grade_passes``.
    """

    def __init__(self, graded: int, total: int, label: str = "") -> None:
        super().__init__(f"{graded} of {total} item(s) graded before a cost cap was reached")
        self.graded = graded
        self.total = total
        self.label = label


@dataclass(frozen=True)
class GradingPass:
    """One pass over the set: a judge configuration and the metrics read from its results.

    Attributes:
        label: ``metrics`` (ROUGE-L and BERTScore alone) or the judge's model.
        config: The configuration every item is graded with.
        names: The calibration metrics read from its results.
    """

    label: str
    config: JudgeConfig
    names: list[str]


def plan_passes(
    base: JudgeConfig,
    *,
    judges: Sequence[str],
    metrics: Sequence[str],
    items: Sequence[CalibrationItem],
) -> list[GradingPass]:
    """The grading passes a run makes: one for the plain metrics, one per judge.

    A judge pass asks only for ``coverage``; ``defects`` is asked too only when the set rates
    key points (K-QA), whose report compares the contradicted points with the judge's defect
    flag. A coverage calibration of any other set made one defects call per item that no
    figure of the report used (10,000 of them for ``evouna_tq``).

    Args:
        base: The default judge configuration (the settings' or the service's).
        judges: Judge model strings; default: ``base``'s model.
        metrics: Any of rouge_l, bertscore, coverage.
        items: The items graded (whether they rate key points).
    """
    plain = [m for m in metrics if m in METRIC_ONLY]
    judged = [m for m in metrics if m not in METRIC_ONLY]
    passes: list[GradingPass] = []
    if plain:
        cfg = base.model_copy(update={"metrics": tuple(plain), "concurrency": 256})
        passes.append(GradingPass("metrics", cfg, plain))
    if not judged:
        return passes
    key_points = any(item.key_point for item in items)
    for model in judges or [base.model]:
        wanted: tuple[MetricName, ...] = (
            ("coverage", "defects") if key_points and model != EMBEDDED_JUDGE else ("coverage",)
        )
        cfg = base.model_copy(update={"model": model, "metrics": wanted})
        passes.append(GradingPass(model, cfg, judged))
    return passes


@dataclass
class GradedSet:
    """What the grading passes of a run gathered, for :func:`write_calibration`."""

    subset: LoadedSet
    run: CalibrationRun
    scores: dict[str, dict[str, float | None]] = field(default_factory=dict)
    reasons: dict[str, dict[str, str]] = field(default_factory=dict)
    points: dict[str, dict[str, bool | None]] = field(default_factory=dict)
    defects: dict[str, dict[str, bool | None]] = field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    metric_configs: dict[str, str] = field(default_factory=dict)
    retests: dict[str, dict[str, float | None]] = field(default_factory=dict)


def calibration_subset(dataset: LoadedSet, limit: int | None) -> LoadedSet:
    """The part of ``dataset`` a run grades (its first ``limit`` items).

    Raises:
        InputError: (``set``) the set has no item.
    """
    items = dataset.items[:limit] if limit else list(dataset.items)
    if not items:
        # Refused before the folder and its grade files exist: an unreadable set (a CSV read
        # as JSONL, say) used to leave empty grades-*.jsonl behind.
        raise InputError(
            f"calibration set {dataset.name} has no item to grade "
            f"({len(dataset.problems)} line(s) could not be read)",
            field="set",
        )
    return LoadedSet(
        name=dataset.name,
        path=dataset.path,
        sha256=dataset.sha256,
        items=items,
        problems=dataset.problems,
        scale=dataset.scale,
    )


async def grade_passes(
    subset: LoadedSet,
    passes: Sequence[GradingPass],
    *,
    folder: Path,
    grader: Grader | None = None,
    cache: Cache | None = None,
    retest: bool = False,
    pace: Pace | None = None,
    progress: bool = False,
) -> GradedSet:
    """Grade ``subset`` in each pass (and once more uncached per judge with ``retest``).

    Each pass's results go to ``folder/grades-<config hash>-<metrics>.jsonl`` as they finish,
    and a run resumes from them. With ``grader`` (the service's), every call shares its
    concurrency, cache and breakers; without one, each pass gets its own grader on ``cache``,
    closed when the pass ends (the CLI). ``retest`` grades each judge exactly once more with
    the cache off: it doubles a judge's calls and nothing more.

    Raises:
        BudgetStopped: the budget of a pass (``pace.budget``) refused a judge call.
        Halted: ``pace.stop`` said to stop before the passes ended.
    """
    items = subset.items
    graded = GradedSet(subset=subset, run=CalibrationRun(files=None))  # type: ignore[arg-type]
    for grading in passes:
        label, cfg, names = grading.label, grading.config, grading.names
        own = grader is None
        engine = Grader(cfg, cache=cache) if grader is None else grader
        run_pace = pace or Pace.fixed(cfg.concurrency)
        budget = run_pace.budget(cfg)
        spending = None if budget is None else BUDGET.set(budget)
        try:
            # The metrics are part of the name: a metrics-only plan and a judge plan may share
            # a config hash (it leaves metrics out), and must not read each other's results.
            grades = folder / f"grades-{cfg.config_hash()}-{'-'.join(cfg.metrics)}.jsonl"
            await asyncio.to_thread(_say_not_reused, grades, cfg)
            # The results are kept once, in `_grade_all`'s answer; the writer only streams them.
            writer = await asyncio.to_thread(ResultWriter(grades, keep=False).open)
            started = time.monotonic()
            bar = _progress(label, len(items), enabled=progress)
            try:
                results = await _grade_all(engine, cfg, items, writer, run_pace, bar)
            finally:
                bar.close()
                writer.close()
            graded.run.timings[label] = round(time.monotonic() - started, 2)
            _gather(graded, label, cfg, names, results)
            if retest and label != "metrics":
                fresh = cfg.model_copy(update={"cache": False})
                retester = Grader(fresh, cache=JudgeCache(None)) if own else engine
                bar = _progress(f"{label} (retest)", len(items), enabled=progress)
                try:
                    again = await _retest(retester, fresh, items, run_pace, bar)
                finally:
                    bar.close()
                    if own:
                        await retester.aclose()
                s2, _, _, _ = _metric_scores(again, names, label)
                graded.retests.update(s2)
        except BudgetStopped as exc:
            exc.label = label
            raise
        finally:
            if spending is not None:
                BUDGET.reset(spending)
            if own:
                await engine.aclose()
    return graded


def _gather(
    graded: GradedSet,
    label: str,
    cfg: JudgeConfig,
    names: list[str],
    results: dict[str, GradeResult | str],
) -> None:
    """Add one pass's results to what the report is built from."""
    graded.run.graded[label] = len(results)
    summary = summarize(r for r in results.values() if isinstance(r, GradeResult))
    graded.run.summaries[label] = {
        "items": summary.items,
        "unscored": summary.unscored,
        "unscored_rate": summary.unscored_rate,
        "bpc": summary.bpc,
        "bpc_all": summary.bpc_all,
        "warnings": summary.warnings,
    }
    s, r, p, d = _metric_scores(results, names, label)
    for name in s:
        graded.scores[name] = s[name]
        graded.metric_configs[name] = label
    graded.reasons.update(r)
    graded.points.update(p)
    graded.defects.update(d)
    graded.configs[label] = {
        **cfg.model_dump(mode="json", exclude={"api_key"}),
        "config_hash": cfg.config_hash(),
        "judge_version": cfg.judge_version,
        # What a ROUGE-L or BERTScore mapping belongs to: these metrics ignore the judge.
        "metric_settings": {
            name: metric_settings(cfg, name) for name in names if name in METRIC_KEYED
        },
    }


def write_calibration(
    graded: GradedSet, *, folder: Path, seed: int = 0, n_resamples: int = 1000
) -> CalibrationRun:
    """Build the report of graded passes and write it to ``folder`` (CPU-bound: bootstraps)."""
    run = graded.run
    for label, figures in run.summaries.items():
        if label in graded.configs:
            graded.configs[label]["grading_summary"] = figures
    report = build_report(
        graded.subset,
        configs=graded.configs,
        scores=graded.scores,
        unscored=graded.reasons,
        point_verdicts=graded.points or None,
        defects=graded.defects or None,
        metric_configs=graded.metric_configs,
        retest=graded.retests or None,
        seed=seed,
        n_resamples=n_resamples,
    )
    run.files = write_report(report, folder)
    return run


def run_calibration(
    dataset: LoadedSet,
    *,
    settings: Settings,
    judges: Sequence[str] = (),
    metrics: Sequence[str] = CALIBRATION_METRICS,
    limit: int | None = None,
    out_dir: str | Path,
    retest: bool = False,
    seed: int = 0,
    n_resamples: int = 1000,
    progress: bool = False,
) -> CalibrationRun:
    """Grade ``dataset`` with each judge configuration and write the report to ``out_dir``.

    The command line's run: each pass has a grader of its own on the settings' cache (the
    service grades with its one grader instead: ``grade_passes(grader=...)``).

    Args:
        dataset: The loaded calibration set (at least one item).
        settings: Base settings (cache folder, default judge config).
        judges: Judge model strings; default: the settings' judge.
        metrics: Any of rouge_l, bertscore, coverage.
        limit: Use only the first ``limit`` items.
        out_dir: The report folder (also holds the per-configuration grade files).
        retest: Grade each judge configuration a second time with the cache off
            (test-retest consistency).
        seed: Seed for bootstraps and folds.
        n_resamples: Bootstrap resamples.
        progress: Show a progress bar on stderr for each grading and retest pass, labelled
            with its configuration (off by default: the service runs this too).

    Raises:
        InputError: (``set``) the set has no item; nothing has been created.
    """
    subset = calibration_subset(dataset, limit)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    passes = plan_passes(settings.judge, judges=judges, metrics=metrics, items=subset.items)
    cache = open_cache(settings, enabled=settings.judge.cache)
    try:
        graded = asyncio.run(
            grade_passes(
                subset, passes, folder=folder, cache=cache, retest=retest, progress=progress
            )
        )
    finally:
        cache.close()
    return write_calibration(graded, folder=folder, seed=seed, n_resamples=n_resamples)


async def _retest(
    grader: Grader,
    config: JudgeConfig,
    items: Sequence[CalibrationItem],
    pace: Pace,
    bar: tqdm[Any] | None = None,
) -> dict[str, GradeResult | str]:
    out: dict[str, GradeResult | str] = {}
    todo = []
    for item in items:
        try:
            todo.append((item.id, item_request(item)))
        except ValidationError:
            out[item.id] = "invalid_item"
    if bar is not None:
        bar.update(len(out))
    async for result in _paced(grader, config, todo, pace):
        out[result.id] = result
        if bar is not None:
            bar.update(1)
    return out
