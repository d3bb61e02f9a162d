"""What a grading request holds and what a result reports: the engine's models and the wire's.

One request, one line: ``GradeRequest`` -> rubric -> judge calls (cached) -> metrics ->
``GradeResult``. The engine grades with these models and the HTTP API sends them as they are, so
they live in the light client's wire package, where server and client share one definition; every
field carries a description that shows up in the OpenAPI docs.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Literal

from pydantic import AliasChoices, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from bonusjudge_client.wire.base import StrictWireModel, WireModel
from bonusjudge_client.wire.scores import BertScore, RougeScore
from bonusjudge_client.wire.vocab import ItemId, Language, UnscoredReason

MAX_BONUS_POINTS = 32
"""Hard upper bound on bonus points per item; settings may lower it."""

MAX_REFERENCES = 16
"""Most further reference answers one request may carry."""

MAX_CONTEXT_WINDOW = 10_000_000
"""Largest ``context_window`` (tokens of plot) an item may name."""

TaskStatus = Literal["scored", "unscored", "not_assessed"]
"""How one judge task ended: ``not_assessed`` means the judge cannot do this task at all."""

JudgeTask = Literal["coverage", "defects", "extract_points"]
"""The three judge tasks of the CharToM protocol (protocol.md section 2)."""

DecidedBy = Literal["embedded-matcher", "llm"]
"""Which judge of a cascade decided an item: the embedded matcher, sure of every point, or the
LLM judge, asked because a point was in the matcher's uncertain band."""

CalibratedMetric = Literal["coverage", "expected_coverage", "rouge_l", "bertscore"]
"""What a calibrated mapping can map onto the human scale (``GradeResult.calibrated_metric``):
thresholded coverage, the embedded matcher's expected coverage, ROUGE-L F1 or BERTScore F1."""

PROMPT_LANGUAGE_FLAG = "paper_prompts_english_only"
"""The flag of a result judged with prompts in another language than the item's.

Only the paper's rubrics (``chartom-paper``) fall back to another language: the paper publishes
English prompts only and its public scorer grades English only, so a Chinese item is judged with
English prompts. ``chartom`` has Chinese prompts.
"""

_JSON_KINDS: dict[type, str] = {
    bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"
}
"""How an input value's type reads in a message about the JSON line it came from."""

MAX_METADATA_DEPTH = 32
"""Deepest nesting of objects and arrays in ``metadata`` (the object itself is level 1)."""

MAX_METADATA_ENTRIES = 4_096
"""Most keys and array items ``metadata`` may hold, counted over all levels."""

MAX_METADATA_BYTES = 64 * 1024
"""Largest ``metadata`` may be, as compact UTF-8 JSON."""


def check_json_value(
    value: Any,
    *,
    max_depth: int = MAX_METADATA_DEPTH,
    max_entries: int = MAX_METADATA_ENTRIES,
    max_bytes: int = MAX_METADATA_BYTES,
) -> None:
    """Check that a free-form JSON value (an item's ``metadata``) is small, shallow and finite.

    Free-form values are echoed into results, hashed and stored: one nested a few hundred levels
    deep passes validation but breaks serialization after the judge was paid, so the bounds are
    enforced when the item is read. The walk is iterative, so a value too deep for Python's
    recursion limit is reported, not crashed on.

    Args:
        value: The decoded JSON value.
        max_depth: Deepest allowed nesting of objects and arrays (``value`` itself is level 1).
        max_entries: Most keys and array items, over all levels.
        max_bytes: Largest size as compact UTF-8 JSON.

    Raises:
        ValueError: saying which bound is exceeded (the caller names the field).
    """
    entries = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list | tuple):
            if depth > max_depth:
                raise ValueError(f"nested more than {max_depth} levels deep")
            entries += len(node)
            if entries > max_entries:
                raise ValueError(f"holds more than {max_entries} keys and items in all")
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(node, float) and not math.isfinite(node):
            # JSON has no NaN or Infinity (Python's parser accepts them anyway): echoed, they
            # would come back as null or as invalid JSON.
            raise ValueError("NaN and Infinity are not valid JSON numbers")
    # Bounded by the checks above, so this cannot recurse too deep; a non-JSON value (possible
    # only from Python callers) is sized by its text.
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())
    if size > max_bytes:
        raise ValueError(f"is {size} bytes as JSON, more than the limit of {max_bytes}")


def _strip_nonempty(value: str, field: str) -> str:
    if not value.strip():
        raise ValueError(f"{field} must not be empty or whitespace only")
    return value


class GradeRequest(StrictWireModel):
    """One response to grade against a reference answer and its bonus points."""

    model_config = ConfigDict(populate_by_name=True)

    id: ItemId | None = Field(
        default=None,
        max_length=256,
        description="Caller's item id, echoed in the result (the CLI uses the line number when "
        "absent).",
    )
    question: str = Field(min_length=1, max_length=20_000, description="The question asked.")
    reference: str = Field(
        min_length=1,
        max_length=50_000,
        validation_alias=AliasChoices("reference", "answer"),
        description="The reference answer (CharToM-QA's `answer`).",
    )
    references: list[str] | None = Field(
        default=None,
        max_length=MAX_REFERENCES,
        description="Further reference answers (datasets with several): ROUGE-L and BERTScore "
        "take the best match over `reference` and these; with no bonus points the embedded "
        "matcher judges the response against each and keeps the best match; an LLM judge reads "
        "`reference` only.",
    )
    bonus_points: list[str] | None = Field(
        default=None,
        max_length=MAX_BONUS_POINTS,
        description="The reference split into bonus points. When absent they are extracted from "
        "the reference by the extraction rubric (cached).",
    )
    response: str | None = Field(
        max_length=50_000,
        description="The answer under test (untrusted text); required, but may be null. An empty "
        "or whitespace-only response is graded as covering nothing (coverage 0, no defects, flag "
        "`empty_response`), without asking the judge; so is null, which harnesses write for a "
        "refusal or a timeout (flag `null_response`), so that a respondent who refuses more "
        "does not leave the item out of its BPC. Any other non-string value is refused.",
    )
    context: str | None = Field(
        default=None,
        max_length=400_000,
        description="Story plot the respondent saw; the defect judge reads it.",
    )
    context_window: int | None = Field(
        default=None,
        ge=0,
        # No plot window is longer than a book: a bound keeps absurd numbers out of results,
        # breakdown keys and error answers.
        le=MAX_CONTEXT_WINDOW,
        description="Which plot window `context` is (CharToM: 0, 1000 or 2000 tokens); used for "
        "breakdowns by context length.",
    )
    book_name: str | None = Field(
        default=None, max_length=500, description="Book the question is about (CharToM-QA)."
    )
    domain: str | None = Field(
        default=None, max_length=200, description="Domain, for non-CharToM items (e.g. medicine)."
    )
    language: Language | None = Field(
        default=None, description="`en` or `zh`; detected from the text when absent."
    )
    tom_dimension: str | None = Field(
        default=None,
        max_length=64,
        description="CharToM dimension (belief, intention, emotion, desire) for breakdowns.",
    )
    respondent: str | None = Field(
        default=None,
        max_length=256,
        validation_alias=AliasChoices("respondent", "respondent_model", "model_name"),
        description="Model that wrote the response, for per-model breakdowns.",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="Free metadata, echoed unchanged in the result. At most "
        f"{MAX_METADATA_DEPTH} levels deep, {MAX_METADATA_ENTRIES} keys and items in all and "
        f"{MAX_METADATA_BYTES // 1024} KB as JSON; no NaN or Infinity.",
    )

    @field_validator("response", mode="before")
    @classmethod
    def _text_or_null(cls, value: Any) -> Any:
        # Only null stands for "no answer": a number or an object is a broken line, and says so
        # better than pydantic's "Input should be a valid string" (null is valid too).
        if value is not None and not isinstance(value, str):
            kind = _JSON_KINDS.get(type(value), type(value).__name__)
            raise PydanticCustomError(
                "string_or_null", "must be text, or null for no answer (got {kind})", {"kind": kind}
            )
        return value

    @field_validator("question", "reference")
    @classmethod
    def _not_blank(cls, value: str, info: Any) -> str:
        return _strip_nonempty(value, info.field_name)

    @field_validator("metadata")
    @classmethod
    def _metadata_bounded(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_json_value(value)
        return value

    def content_hash(self) -> str:
        """Short hash of everything graded about this item (all fields but ``id``).

        Results record it, so a resumed run can tell an edited item from the one it graded.
        """
        blob = json.dumps(
            self.model_dump(mode="json", exclude={"id"}), sort_keys=True, ensure_ascii=False
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @field_validator("bonus_points")
    @classmethod
    def _points_valid(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("bonus_points must hold at least one point when given")
        for index, point in enumerate(value, start=1):
            if not point.strip():
                raise ValueError(f"bonus point {index} is empty")
            if len(point) > 2_000:
                raise ValueError(f"bonus point {index} is longer than 2000 characters")
        return value


class PointVerdict(WireModel):
    """The verdict on one bonus point."""

    index: int = Field(ge=1, description="1-based position of the point in the item's list.")
    text: str = Field(description="The bonus point.")
    covered: bool | None = Field(
        description="Whether the response covers the point; null when coverage is unscored."
    )
    rationale: str | None = Field(default=None, description="The judge's short reason.")
    evidence: str | None = Field(
        default=None, description="Quote from the response supporting the verdict, if any."
    )
    confidence: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Probability that the point is covered (embedded matcher); null for LLM "
        "judges.",
    )


class Defect(WireModel):
    """A factual or logical error the judge found in the response."""

    description: str = Field(description="What is wrong.")
    kind: Literal["factual", "logical", "other"] = Field(
        default="other", description="Error type as the judge classified it."
    )
    evidence: str | None = Field(default=None, description="The offending part of the response.")


class TaskOutcome(WireModel):
    """Status fields shared by the coverage and defect results."""

    status: TaskStatus = Field(description="scored, unscored (see reason) or not_assessed.")
    reason: UnscoredReason | None = Field(
        default=None, description="Why the task is unscored; null when scored."
    )
    detail: str | None = Field(default=None, description="Human-readable detail of the reason.")


class CoverageResult(TaskOutcome):
    """Which bonus points the response covers."""

    verdicts: list[PointVerdict] = Field(
        default_factory=list, description="One verdict per bonus point, in order."
    )
    covered: int | None = Field(default=None, description="Points covered; null when unscored.")
    total: int = Field(default=0, description="Points judged.")
    coverage: float | None = Field(
        default=None, ge=0.0, le=1.0, description="covered / total; null when unscored."
    )
    expected_coverage: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Mean of the per-point confidences: the expected share of points covered "
        "(embedded matcher). A graded score that ranks responses finer than the thresholded "
        "`coverage`; null for LLM judges and when unscored.",
    )
    points_source: Literal["request", "extracted", "reference"] = Field(
        default="request",
        description="Where the points came from: the request, extraction by the judge, or the "
        "whole reference as one point.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> CoverageResult:
        # A scored coverage must agree with its verdicts: this is the guard that makes the public
        # scorer's "136% coverage" impossible here, whatever a provider returns.
        if self.status == "scored":
            if self.covered is None or self.coverage is None:
                raise ValueError("scored coverage needs covered and coverage")
            if not 0 <= self.covered <= self.total or self.total != len(self.verdicts):
                raise ValueError("covered must lie in 0..total and total match the verdicts")
            if self.covered != sum(1 for v in self.verdicts if v.covered):
                raise ValueError("covered must equal the number of covered verdicts")
        elif (
            self.covered is not None
            or self.coverage is not None
            or self.expected_coverage is not None
        ):
            raise ValueError("an unscored coverage carries no numbers")
        return self


class DefectsResult(TaskOutcome):
    """Defects (factual or logical errors) the judge found."""

    defects: list[Defect] = Field(default_factory=list, description="Empty means none found.")
    penalized: bool | None = Field(
        default=None, description="True when at least one defect; null unless scored."
    )

    @model_validator(mode="after")
    def _consistent(self) -> DefectsResult:
        if self.status == "scored" and self.penalized != bool(self.defects):
            raise ValueError("penalized must be true exactly when defects were found")
        if self.status != "scored" and self.penalized is not None:
            raise ValueError("an unscored defect result carries no penalty")
        return self


class RubricRef(WireModel):
    """Which rubric a task used, pinned by content hash."""

    id: str = Field(description="Rubric id.")
    version: int = Field(description="Rubric version.")
    hash: str = Field(description="sha256 of the rubric file's content (first 16 hex digits).")
    language: Language = Field(description="Language of the rendered prompt.")


class CallRecord(WireModel):
    """One judge call (or cache hit) made for an item."""

    task: str = Field(description="coverage, defects, extract_points or mcq_extract.")
    rubric: RubricRef | None = Field(default=None, description="The rubric rendered.")
    cached: bool = Field(description="Served from the cache (no provider call).")
    attempts: int = Field(default=0, description="Provider attempts, re-asks and retries included.")
    outcome: str = Field(description="`ok`, or the unscored reason.")
    prompt_tokens: int | None = Field(default=None, description="Prompt tokens, when known.")
    completion_tokens: int | None = Field(default=None, description="Completion tokens, if known.")
    cached_tokens: int | None = Field(
        default=None,
        description="Of `prompt_tokens`, those the provider served from its prompt cache (billed "
        "at its cache-read price), when it reported them.",
    )
    cost_usd: float | None = Field(default=None, description="Cost litellm computed, when known.")
    latency_s: float = Field(default=0.0, description="Wall time of the call, retries included.")
    cache_key: str | None = Field(default=None, description="The cache key (sha256).")


class Provenance(WireModel):
    """Everything needed to know how a result was produced, and to reproduce it."""

    judge: str = Field(description="Judge model string, or `embedded-matcher`.")
    judge_version: str | None = Field(
        default=None, description="Parameter version of a non-LLM judge."
    )
    judge_quality: str | None = Field(
        default=None, description="Caveat on the judge's quality (e.g. `smoke-test only`)."
    )
    api_base: str | None = Field(default=None, description="Provider base URL, if any.")
    mode: str | None = Field(default=None, description="Structured-output mode used.")
    sampling: dict[str, Any] = Field(
        default_factory=dict, description="Sampling settings sent (temperature, max_tokens...)."
    )
    rubrics: dict[str, RubricRef] = Field(default_factory=dict, description="Rubric used per task.")
    config_hash: str = Field(description="Hash of every setting that changes the judge's output.")
    metrics: list[str] = Field(default_factory=list, description="Metrics requested.")
    calls: list[CallRecord] = Field(default_factory=list, description="Judge calls made.")
    length_control: bool = Field(default=False, description="Response truncated to the cap?")
    response_truncated: bool = Field(
        default=False, description="Whether length control actually cut the response."
    )
    bonusjudge_version: str = Field(description="Version of bonusjudge that graded.")


class GradeResult(WireModel):
    """The grade of one response."""

    id: str = Field(description="The request's id (or the input line number).")
    status: Literal["scored", "unscored"] = Field(
        description="scored when every requested judge task is scored (or not assessable); "
        "otherwise unscored, with the reasons."
    )
    unscored_reasons: list[str] = Field(
        default_factory=list, description="`task: reason` for each unscored task."
    )
    flags: list[str] = Field(
        default_factory=list,
        description="Notes on the input that shaped the grade: `empty_response` (an empty or "
        "whitespace-only answer, scored as covering nothing without asking the judge); "
        "`null_response` (a null answer, a harness's record of a refusal or a timeout, scored "
        "the same way); `paper_prompts_english_only` (a Chinese item judged with the paper's "
        "English-only prompts, `chartom-paper`; `chartom` has Chinese prompts).",
    )
    input_hash: str | None = Field(
        default=None,
        description="Hash of the graded request's content (`GradeRequest.content_hash`); a "
        "resumed run grades again an item whose content changed.",
    )
    language: Language = Field(description="Language graded in (given or detected).")
    coverage: CoverageResult | None = Field(
        default=None, description="Bonus-point coverage; null when not requested."
    )
    defects: DefectsResult | None = Field(
        default=None, description="Defects; null when not requested."
    )
    rouge_l: RougeScore | None = Field(default=None, description="ROUGE-L vs the reference.")
    bertscore: BertScore | None = Field(default=None, description="BERTScore vs the reference.")
    length_ratio: float | None = Field(
        default=None, description="Response / reference length in CJK-aware words."
    )
    calibrated_score: float | None = Field(
        default=None,
        description="The metric named in `calibrated_metric` mapped onto the human scale (0-1) "
        "by a calibrated mapping (`--calibration`); null without a mapping, or when that metric "
        "has no value for this item.",
    )
    calibrated_metric: CalibratedMetric | None = Field(
        default=None,
        description="The metric `calibrated_score` maps (the one the mapping was fitted on): "
        "coverage, expected_coverage, rouge_l or bertscore; set whenever a mapping was applied.",
    )
    tom_dimension: str | None = Field(default=None, description="Echoed from the request.")
    context_window: int | None = Field(default=None, description="Echoed from the request.")
    respondent: str | None = Field(default=None, description="Echoed from the request.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Echoed from the request.")
    provenance: Provenance = Field(description="How this result was produced.")
    decided_by: DecidedBy | None = Field(
        default=None,
        description="Cascade judge only (`judge: cascade`): `embedded-matcher` when the matcher "
        "was sure of every point and decided the item alone (its defects then `not_assessed`, as "
        "the matcher reports them), `llm` when a point was in its uncertain band and the LLM "
        "judge decided coverage and defects (unscored with its reason if the LLM failed, never "
        "the matcher's verdict); null for any other judge.",
    )
    elapsed_s: float = Field(default=0.0, description="Wall time to grade the item.")

    @model_validator(mode="after")
    def _decided_by_consistent(self) -> GradeResult:
        # The matcher judges no defects: a matcher-decided item with judged defects would be an
        # LLM's verdict, or a zero, passed off as the matcher's.
        if (
            self.decided_by == "embedded-matcher"
            and self.defects is not None
            and self.defects.status != "not_assessed"
        ):
            raise ValueError("an item the matcher decided has defects not_assessed")
        if self.decided_by == "embedded-matcher" and any(
            call.task in ("coverage", "defects") for call in self.provenance.calls
        ):
            raise ValueError("an item the matcher decided made no LLM coverage or defect call")
        return self

    @model_validator(mode="after")
    def _calibrated_named(self) -> GradeResult:
        # A mapped score read without its metric is the mistake issue 28 found: ROUGE-L mapped
        # and read as coverage.
        if self.calibrated_score is not None and self.calibrated_metric is None:
            raise ValueError("calibrated_score needs calibrated_metric (the metric it maps)")
        return self


class ExtractRequest(StrictWireModel):
    """A reference answer to split into bonus points."""

    question: str = Field(min_length=1, max_length=20_000, description="The question.")
    reference: str = Field(min_length=1, max_length=50_000, description="The reference answer.")
    context: str | None = Field(default=None, max_length=400_000, description="Story plot.")
    book_name: str | None = Field(default=None, max_length=500, description="Book name.")
    language: Language | None = Field(default=None, description="`en` or `zh`; detected if absent.")


class ExtractResult(WireModel):
    """Bonus points extracted from a reference, or why not."""

    status: Literal["scored", "unscored"] = Field(description="scored when points were extracted.")
    reason: UnscoredReason | None = Field(default=None, description="Why extraction failed.")
    detail: str | None = Field(default=None, description="Detail of the failure.")
    bonus_points: list[str] = Field(default_factory=list, description="The extracted points.")
    provenance: Provenance = Field(description="How the points were produced.")
