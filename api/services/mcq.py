"""Multiple-choice scoring: one call, and persisted jobs of kind ``mcq``.

Scoring is pure CPU (``judge.mcq``): the chosen option is read from each response by rules, and
only with ``llm_extract`` does the service's default judge read the answers the rules could not
parse. Items are validated one by one, as in a grading batch: a bad item becomes an error entry
with its index (and line, for uploads) and the others are scored; duplicates of (id, language,
permutation run) are rejected as the CLI rejects them, so the service and ``bonusjudge mcq`` give
the same numbers for the same file.

Jobs reuse the grading jobs' store (kind ``mcq``): same leases, restart safety, result stream and
owner check. In a job's status, ``scored`` counts parsed answers and ``unscored`` unparseable ones;
``judge`` is ``rules`` unless ``llm_extract`` is on.

With ``llm_extract`` the judge's requests reserve against the key's day budget
(``max_cost_per_key_usd``) as grading's do: a key over it is answered 429 ``budget_exhausted``
(the call, or the job's submission), a call that reaches it midway is answered the same, and a
job that reaches it pauses with the answers the judge was kept from reading still pending.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import ValidationError

from api.budgets import KeyBudgets
from api.deps import JobContext
from api.errors import JudgeNotConfigured
from api.jobs import (
    ItemLimit,
    JobItem,
    JobManager,
    JobRow,
    JobRunner,
    JobStore,
    Quota,
    RawItem,
    Upload,
    in_upload_thread,
    stage_items,
    with_line,
)
from api.jobs.uploads import storable_id
from api.jobs.worker import store_retry
from api.services.grade_jobs import pause_if_spent
from api.settings import ServiceSettings
from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.mcq import Aggregate, McqItem, McqResult, McqSummary, SkippedLine
from bonusjudge_client.wire.mcq_defaults import DEFAULT_FUZZY_THRESHOLD
from bonusjudge_client.wire.schemas import ItemError, JobStatus, McqBody, McqEntry, McqResponse
from core.errors import InputError
from judge.budget import BUDGET, Budget
from judge.engine import Grader
from judge.mcq.llm import JudgeExtractor
from judge.mcq.runner import format_validation_error, score_items
from judge.mcq.score import check_group_fields, score_item, summarize

MCQ = "mcq"
"""Job kind of multiple-choice jobs in the shared job store."""

RULES = "rules"
"""The ``judge`` shown for jobs scored by the extraction rules alone."""

_PAGE = 256
_LLM_FAILED = "llm extractor failed"
_LLM_REFUSED = f"{_LLM_FAILED}: JudgeOutputError: budget_exhausted:"
"""What a result's detail says when the key's budget kept its reading from being asked."""


# -- options -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class McqOptions:
    """How a set of multiple-choice items is scored and summarised.

    Attributes:
        aggregate: How permuted runs of a question combine (``mean`` or ``majority``).
        group_by: Breakdown fields, or None for the defaults.
        llm_extract: Whether the default judge reads rule-unparseable answers.
        fuzzy_threshold: rapidfuzz score an option text must reach (101 disables fuzzy).
    """

    aggregate: Aggregate = "mean"
    group_by: tuple[str, ...] | None = None
    llm_extract: bool = False
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD

    @classmethod
    def from_body(cls, body: McqBody) -> McqOptions:
        """The options of a JSON body."""
        return cls(
            aggregate=body.aggregate,
            group_by=tuple(body.group_by) if body.group_by is not None else None,
            llm_extract=body.llm_extract,
            fuzzy_threshold=body.fuzzy_threshold,
        )

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> McqOptions:
        """The options as stored with a job (see ``as_stored``)."""
        group_by = data.get("group_by")
        return cls(
            aggregate=data.get("aggregate", "mean"),
            group_by=tuple(group_by) if group_by is not None else None,
            llm_extract=bool(data.get("llm_extract", False)),
            fuzzy_threshold=float(data.get("fuzzy_threshold", DEFAULT_FUZZY_THRESHOLD)),
        )

    def as_stored(self) -> dict[str, Any]:
        """JSON-ready form, stored in the job's ``options``."""
        data = asdict(self)
        data["group_by"] = list(self.group_by) if self.group_by is not None else None
        return data


def check_options(options: McqOptions, grader: Grader) -> tuple[str, str]:
    """Check the options against the service; the (judge, config hash) shown for the run.

    Raises:
        InputError: ``group_by`` names an unknown field, or ``llm_extract`` is asked of the
            embedded matcher (it cannot read answers).
        JudgeNotConfigured: ``llm_extract`` with no judge model configured.
    """
    if options.group_by is not None:
        try:
            check_group_fields(options.group_by)
        except ValueError as exc:
            raise InputError(f"group_by: {exc}", field="group_by") from None
    if not options.llm_extract:
        return RULES, ""
    config = grader.config
    if config.is_embedded:
        raise InputError(
            "llm_extract: the service's default judge is the embedded matcher, which cannot read "
            "answers; score by the rules alone (llm_extract false) or configure an LLM judge",
            field="llm_extract",
        )
    if not config.model.strip():
        raise JudgeNotConfigured(
            "llm_extract needs a judge model and none is configured: set "
            "BONUSJUDGE_JUDGE__MODEL, or score by the rules alone (llm_extract false)"
        )
    return config.model, config.config_hash()


# -- items ---------------------------------------------------------------------------------------


def mcq_limit(settings: ServiceSettings) -> ItemLimit:
    """How many items a multiple-choice call or job may have, and the messages beyond."""
    return ItemLimit(settings.max_job_items, "items: no items to score",
                     "items: {count} items exceed the limit of {most}")


class McqItems:
    """Validates multiple-choice items one at a time (an ``api.jobs.staging.ItemCheck``).

    A bad item, or a duplicate of (id, language, permutation run) as the CLI counts them,
    becomes an error entry; the others are ``McqItem``.
    """

    def __init__(self) -> None:
        # The CLI's rule: one result per (id, language, permutation run), so both count alike.
        self.seen: dict[tuple[str, str, int | None], int] = {}

    def __call__(self, index: int, raw: RawItem) -> JobItem:
        """The ``index``-th item (0-based, in input order) validated."""
        line, obj, problem = raw
        position = line if line is not None else index + 1
        item_id = (storable_id(obj.get("id") if isinstance(obj, dict) else None) or "").strip()
        error: ItemError | None = None
        item: McqItem | None = None
        if problem is not None:
            error = ItemError(type="invalid_input", message=problem, line=line)
        elif not isinstance(obj, dict):
            message = f"item: expected a JSON object, got {type(obj).__name__}"
            error = ItemError(type="invalid_input", message=with_line(message, line), line=line)
        else:
            try:
                item = McqItem.model_validate(obj)
            except ValidationError as exc:
                # The CLI's message (every offending field), the first one's name as the field.
                error = ItemError(
                    type="invalid_input",
                    message=with_line(format_validation_error(exc), line),
                    field=first_error(exc)[0],
                    line=line,
                )
        if item is not None:
            run = item.permutation.run if item.permutation is not None else None
            key = (item.id, item.language or "", run)
            if key in self.seen:
                message = (
                    f"id: duplicate of item {self.seen[key]} (id {item.id!r}, language "
                    f"{item.language!r}, permutation run {run})"
                )
                error = ItemError(
                    type="invalid_input", message=with_line(message, line), field="id", line=line
                )
                item = None
            else:
                self.seen[key] = position
        return JobItem(index, item.id if item else (item_id or str(position)), line, item, error)


def build_mcq_items(raw: Iterable[RawItem], settings: ServiceSettings) -> list[JobItem]:
    """Validate items at once (``McqItems``): bad ones (and duplicates) become error entries.

    Args:
        raw: ``(line or None, parsed JSON or None, JSON error or None)`` per item.
        settings: For ``max_job_items``.

    Raises:
        InputError: (field ``items``) no items, or more than ``settings.max_job_items``.
    """
    check = McqItems()
    return [check(index, entry) for index, entry in enumerate(mcq_limit(settings).counted(raw))]


def _score_by_rules(items: Sequence[McqItem], fuzzy_threshold: float) -> list[McqResult]:
    return [score_item(item, fuzzy_threshold=fuzzy_threshold) for item in items]


async def score_batch(
    items: Sequence[McqItem], options: McqOptions, grader: Grader
) -> list[McqResult]:
    """Score items in order: by the rules in a worker thread, or with the judge as extractor.

    The rules alone never touch the event loop (a large call would stall every other request);
    with ``llm_extract`` the runner needs the loop for the judge calls, and works in pages.
    """
    if not items:
        return []
    if not options.llm_extract:
        return await asyncio.to_thread(_score_by_rules, items, options.fuzzy_threshold)
    extractor = JudgeExtractor(grader)
    results: list[McqResult] = []
    for start in range(0, len(items), _PAGE):
        results.extend(
            await score_items(
                items[start:start + _PAGE],
                fuzzy_threshold=options.fuzzy_threshold,
                llm_extractor=extractor,
            )
        )
    return results


def summarize_results(
    results: Sequence[McqResult], options: McqOptions, bad_lines: Sequence[SkippedLine]
) -> McqSummary:
    """The run's summary, counting extractor failures from the results' details."""
    failures = sum(1 for r in results if r.detail is not None and _LLM_FAILED in r.detail)
    return summarize(
        results,
        aggregate=options.aggregate,
        group_by=options.group_by,
        fuzzy_threshold=options.fuzzy_threshold,
        llm_extractor=options.llm_extract,
        llm_failures=failures,
        bad_lines=bad_lines,
    )


def _bad_line(index: int, line: int | None, error: ItemError) -> SkippedLine:
    return SkippedLine(line=line if line is not None else index + 1, error=error.message)


def _refused(result: McqResult, budget: Budget | None) -> bool:
    """Whether ``budget`` kept the judge from reading this answer (its request was not sent).

    Only once the budget has refused a request: a detail alone (which quotes the rules'
    reading) cannot make an answer look refused.
    """
    return (
        budget is not None and budget.exhausted
        and result.detail is not None and _LLM_REFUSED in result.detail
    )


# -- one call ------------------------------------------------------------------------------------


async def score_mcq(
    body: McqBody, *, grader: Grader, settings: ServiceSettings, owner: str, budgets: KeyBudgets
) -> McqResponse:
    """Score a body's items and summarise them; bad items get error entries (and bad lines).

    With ``llm_extract`` the judge's requests reserve against ``owner``'s day budget.

    Raises:
        InputError: invalid options, no items or too many.
        JudgeNotConfigured: ``llm_extract`` with no judge model configured.
        OverBudget: ``llm_extract`` and ``owner``'s judge calls reached its day's budget
            (before or during; the readings it paid for are cached for the retry).
    """
    options = McqOptions.from_body(body)
    check_options(options, grader)
    items = build_mcq_items([(None, obj, None) for obj in body.items], settings)
    valid = [(item.index, item.request) for item in items if isinstance(item.request, McqItem)]
    requests = [request for _, request in valid]
    if options.llm_extract:
        async with budgets.charged(owner, grader.config) as budget:
            scored = await score_batch(requests, options, grader)
        if any(_refused(result, budget) for result in scored):
            raise await budgets.refusal(owner)
    else:
        scored = await score_batch(requests, options, grader)
    by_index = {index: result for (index, _), result in zip(valid, scored, strict=True)}
    entries: list[McqEntry] = []
    bad: list[SkippedLine] = []
    for item in items:
        if item.error is not None:
            entries.append(McqEntry(index=item.index, id=item.item_id, error=item.error))
            bad.append(_bad_line(item.index, item.line, item.error))
        else:
            result = by_index[item.index]
            entries.append(McqEntry(index=item.index, id=result.id, result=result))
    summary = await asyncio.to_thread(summarize_results, scored, options, bad)
    return McqResponse(results=entries, summary=summary)


# -- jobs ----------------------------------------------------------------------------------------


async def submit_mcq_job(
    upload: Upload[McqBody], query_options: McqOptions | None, context: JobContext
) -> JobStatus:
    """Store an upload's items as a multiple-choice job of the caller.

    The items are read, validated and encoded in batches in an upload thread, as a grading
    job's are (``api.jobs.staging``).

    Args:
        upload: The submission; a JSON body carries its options.
        query_options: Options from query parameters (JSONL and multipart uploads).
        context: The job manager, the engine (the default judge, for ``llm_extract``), the
            settings (limits and quotas) and the caller.

    Raises:
        InputError: options in both the body and the query, invalid options, no items or too
            many.
        JudgeNotConfigured: ``llm_extract`` with no judge model configured.
        OverBudget: ``llm_extract`` and the caller's day budget is used up.
        QuotaExceeded: the job would take ``owner`` over a quota.
    """
    body_options = McqOptions.from_body(upload.body) if upload.body is not None else None
    if body_options is not None and query_options is not None:
        raise InputError(
            "options: give the scoring options in the body or the query, not both",
            field="options",
        )
    options = body_options or query_options or McqOptions()
    model, config_hash = check_options(options, context.grader)
    if options.llm_extract:  # the rules alone cost nothing: only the judge is held to the budget
        await context.budgets.check(context.owner)
        await context.budgets.budget(context.owner, context.grader.config)
    job_id = uuid.uuid4().hex
    staged = await in_upload_thread(
        stage_items, job_id, upload.raw, McqItems(), mcq_limit(context.settings)
    )
    try:
        return await context.jobs.submit(
            owner=context.owner, items=staged.encoded, overrides=None, config=None, kind=MCQ,
            options=options.as_stored(), model=model, config_hash=config_hash,
            quota=Quota.from_settings(context.settings), job_id=job_id,
        )
    finally:
        staged.close()


async def mcq_job_summary(jobs: JobManager, job_id: str, owner: str) -> McqSummary:
    """Accuracy and breakdowns over a job's results so far, with its skipped lines.

    Raises:
        NotFound: no such multiple-choice job for ``owner``.
    """
    row = await jobs.row(job_id, owner, MCQ)
    options = McqOptions.from_stored(json.loads(row["options"]))
    return await asyncio.to_thread(job_summary, jobs.store, job_id, options)


def job_summary(store: JobStore, job_id: str, options: McqOptions) -> McqSummary:
    """The summary of a job's stored results (blocking: run it in a worker thread)."""
    results = [McqResult.model_validate_json(payload) for payload in store.raw_results(job_id)]
    bad = [
        _bad_line(index, line, ItemError.model_validate_json(error))
        for index, line, error in store.item_errors(job_id)
    ]
    return summarize_results(results, options, bad)


def mcq_runner(budgets: KeyBudgets) -> JobRunner:
    """The runner of multiple-choice jobs (kind ``mcq``): :func:`run_mcq_job` under ``budgets``."""

    async def run(manager: JobManager, job_id: str, row: JobRow) -> None:
        await run_mcq_job(manager, job_id, row, budgets)

    return run


async def run_mcq_job(
    manager: JobManager, job_id: str, row: JobRow, budgets: KeyBudgets
) -> None:
    """Score a claimed multiple-choice job page by page (the ``mcq`` job runner).

    Each page's results are stored in one transaction, so a restart resumes after the last
    stored page. With ``llm_extract`` the job fails, rather than mixing two judges, when the
    service's judge settings changed since it was submitted, and runs under its key's day
    budget: when the budget refuses a reading, the page's other results are stored, the items
    whose reading was refused stay pending and the job pauses (as a grading job does).
    """
    store = manager.store
    options = McqOptions.from_stored(json.loads(row["options"]))
    if options.llm_extract and manager.grader.config.config_hash() != row["config_hash"]:
        await asyncio.to_thread(
            store.fail, job_id, manager.token,
            f"the judge settings changed since the job was created (config hash "
            f"{row['config_hash']} -> {manager.grader.config.config_hash()}); submit it again",
        )
        return
    budget = None
    if options.llm_extract:
        budget = await budgets.budget(str(row["owner"]), manager.grader.config)
        if budget is not None and await pause_if_spent(manager, budgets, job_id, budget):
            return  # over its key's day already: nothing is sent
    if not await asyncio.to_thread(store.start_run, job_id, manager.token):
        return
    if budget is not None and row["paused_until"] is not None:
        await store_retry(store.spend.unpause, job_id)
    BUDGET.set(budget)  # this runner's task only
    after = -1
    while not manager.stopping.is_set():
        page = await asyncio.to_thread(store.pending, job_id, after, _PAGE)
        if not page:
            break
        items = [McqItem.model_validate_json(payload) for _, _, payload in page]
        results = await score_batch(items, options, manager.grader)
        rows = [
            (index, result.model_dump_json(), result.outcome, result.outcome != "unparseable")
            for (index, _, _), result in zip(page, results, strict=True)
            if not _refused(result, budget)  # its reading was never asked: it stays pending
        ]
        await asyncio.to_thread(store.save_results, job_id, rows)
        if budget is not None and await pause_if_spent(manager, budgets, job_id, budget):
            return
        after = page[-1][0]
    await asyncio.to_thread(store.complete_if_finished, job_id, manager.token)
