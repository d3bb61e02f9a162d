"""The figures of a graded set as the CharToM-QA paper reports them: BPC, penalty rate, means.

:mod:`judge.aggregate` computes them in one streaming pass; the service returns them and the
client reads them, so the models live here, shared.
"""

from __future__ import annotations

from pydantic import Field

from bonusjudge_client.wire.base import WireModel

__all__ = ["GroupSummary", "Summary"]


class GroupSummary(WireModel):
    """The aggregate figures of one group of results."""

    items: int = Field(description="Results in the group.")
    scored: int = Field(description="Results whose every requested judge task is scored.")
    unscored: int = Field(description="Results with at least one unscored judge task.")
    coverage_scored: int = Field(description="Items whose coverage is scored (BPC's base).")
    coverage_unscored: int = Field(description="Items whose coverage is unscored.")
    points: int = Field(description="Bonus points judged (scored items only).")
    points_covered: int = Field(description="Bonus points covered.")
    bpc: float | None = Field(
        description="Bonus Point Coverage over items whose coverage is scored: covered / points "
        "(micro)."
    )
    bpc_all: float | None = Field(
        default=None,
        description="Bonus Point Coverage over every item with coverage requested, an unscored "
        "item's points counted as not covered (an item whose points are unknown, because their "
        "extraction failed, counts as many points as the mean known item).",
    )
    unscored_rate: float | None = Field(
        default=None, description="unscored / items: the share of results not fully scored."
    )
    defects_scored: int = Field(description="Items whose defects were judged.")
    defects_unscored: int = Field(description="Items whose defect judgement is unscored.")
    penalized: int = Field(description="Items with at least one defect.")
    penalty_rate: float | None = Field(description="penalized / defects_scored.")
    rouge_l: float | None = Field(description="Mean ROUGE-L F1.")
    rouge_l_n: int = Field(description="Items with a ROUGE-L value.")
    bertscore_f1: float | None = Field(description="Mean BERTScore F1 over items with a value.")
    bertscore_n: int = Field(description="Items with a BERTScore value.")
    bertscore_unavailable: int = Field(
        description="Items whose BERTScore is null (e.g. the encoder lacks the language)."
    )
    length_ratio: float | None = Field(description="Mean response/reference length ratio.")
    calibrated_score: float | None = Field(
        default=None,
        description="Mean calibrated score (`calibrated_metric` mapped onto the human scale) "
        "over items with one; null without a mapping, or when the results map different "
        "metrics.",
    )
    calibrated_n: int = Field(default=0, description="Items with a calibrated score.")
    unscored_by_reason: dict[str, int] = Field(description="`task: reason` -> count.")
    decided_by_matcher: int = Field(
        default=0,
        description="Cascade judge: items the embedded matcher decided alone (sure of every "
        "point; defects not assessed).",
    )
    decided_by_llm: int = Field(
        default=0,
        description="Cascade judge: items sent to the LLM judge (a point in the matcher's "
        "uncertain band).",
    )
    llm_share: float | None = Field(
        default=None,
        description="Cascade judge: decided_by_llm / (decided_by_matcher + decided_by_llm), the "
        "share of items sent to the LLM; null without cascade results.",
    )
    llm_calls_saved: int = Field(
        default=0,
        description="Cascade judge: the LLM judge calls the items the matcher decided alone did "
        "not make, one per coverage and defect task asked (none for an empty or null answer, "
        "which no judge is asked about).",
    )
    flags: dict[str, int] = Field(
        default_factory=dict,
        description="Results per flag (`null_response`, `empty_response`, "
        "`paper_prompts_english_only`; see `GradeResult.flags`).",
    )


class Summary(GroupSummary):
    """Overall figures plus the paper's breakdowns."""

    by_dimension: dict[str, GroupSummary] = Field(description="By ToM dimension.")
    by_context: dict[str, GroupSummary] = Field(description="By context window.")
    by_respondent: dict[str, GroupSummary] = Field(description="By respondent model.")
    judge: str | None = Field(default=None, description="Judge that graded (if one).")
    calibrated_metric: str | None = Field(
        default=None,
        description="The metric the results' calibrated mapping maps (coverage, "
        "expected_coverage, rouge_l or bertscore); several, comma-separated, when the results "
        "were graded with different mappings (then no mean is given). Null without a mapping.",
    )
    judge_calls: int = Field(default=0, description="Provider calls made (re-asks included).")
    cache_hits: int = Field(default=0, description="Judge calls served from the cache.")
    metric_cache_hits: int = Field(
        default=0, description="ROUGE-L and BERTScore values served from the cache."
    )
    reasks: int = Field(default=0, description="Re-asks after invalid structured answers.")
    prompt_tokens: int = Field(default=0, description="Prompt tokens spent.")
    completion_tokens: int = Field(default=0, description="Completion tokens spent.")
    cached_tokens: int = Field(
        default=0,
        description="Of `prompt_tokens`, those the provider served from its prompt cache "
        "(priced at its cache-read price in `cost_usd`).",
    )
    cost_usd: float | None = Field(default=None, description="Cost, when litellm knows prices.")
    retries: int = Field(default=0, description="Provider-error retries spent by the run.")
    retries_by_reason: dict[str, int] = Field(
        default_factory=dict, description="Those retries by reason (rate_limited, timeout...)."
    )
    retry_budget: dict[str, int | None] | None = Field(
        default=None, description="The run's retry cap: limit, spent, refused."
    )
    breaker: dict[str, object] | None = Field(
        default=None, description="Circuit breaker state at the end (state, times opened)."
    )
    invalid_lines_by_respondent: dict[str, int] = Field(
        default_factory=dict,
        description="Input lines that are not valid items (not graded, in no figure), per "
        "respondent the line names, every respondent listed (0 included) when any line is "
        "invalid; lines naming no respondent are not in it.",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="What makes the headline figures less trustworthy (many unscored coverage "
        "or defect verdicts, unscored rates or invalid lines that differ between respondents, "
        "Chinese items judged with the paper's English-only prompts).",
    )
