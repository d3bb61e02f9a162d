"""Aggregates as the CharToM-QA paper reports them, computed in one streaming pass.

BPC is micro-averaged (covered points / points) over the items whose coverage is *scored*; the
penalty rate is the share of defect-scored items with at least one defect. Unscored items are
counted and reported by reason, never averaged in as zero there.

Scored-only BPC alone can flatter: a response that makes the judge fail (a refusal, a cut-off
reply, text that breaks the output format) leaves the denominator. So every group also carries
``bpc_all``, which counts each unscored item's points as not covered, and ``unscored_rate``; the
summary warns when unscored items exceed 2% or their rate differs between respondents by more
than 2 points. Every group (overall, by ToM dimension, by context window, by respondent model)
carries its own scored and unscored counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from judge.types import GradeResult


class GroupSummary(BaseModel):
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
    unscored_by_reason: dict[str, int] = Field(description="`task: reason` -> count.")


class Summary(GroupSummary):
    """Overall figures plus the paper's breakdowns."""

    by_dimension: dict[str, GroupSummary] = Field(description="By ToM dimension.")
    by_context: dict[str, GroupSummary] = Field(description="By context window.")
    by_respondent: dict[str, GroupSummary] = Field(description="By respondent model.")
    judge: str | None = Field(default=None, description="Judge that graded (if one).")
    judge_calls: int = Field(default=0, description="Provider calls made (re-asks included).")
    cache_hits: int = Field(default=0, description="Judge calls served from the cache.")
    metric_cache_hits: int = Field(
        default=0, description="ROUGE-L and BERTScore values served from the cache."
    )
    reasks: int = Field(default=0, description="Re-asks after invalid structured answers.")
    prompt_tokens: int = Field(default=0, description="Prompt tokens spent.")
    completion_tokens: int = Field(default=0, description="Completion tokens spent.")
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
    warnings: list[str] = Field(
        default_factory=list,
        description="What makes the headline figures less trustworthy (many unscored items, or "
        "unscored rates that differ between respondents).",
    )


@dataclass
class _Acc:
    items: int = 0
    scored: int = 0
    cov_scored: int = 0
    cov_unscored: int = 0
    unscored_points: int = 0
    unscored_unknown: int = 0
    points: int = 0
    covered: int = 0
    def_scored: int = 0
    def_unscored: int = 0
    penalized: int = 0
    rouge_sum: float = 0.0
    rouge_n: int = 0
    bert_sum: float = 0.0
    bert_n: int = 0
    bert_null: int = 0
    ratio_sum: float = 0.0
    ratio_n: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, r: GradeResult) -> None:
        self.items += 1
        self.scored += r.status == "scored"
        for reason in r.unscored_reasons:
            self.reasons[reason] += 1
        if r.coverage is not None:
            if r.coverage.status == "scored" and r.coverage.covered is not None:
                self.cov_scored += 1
                self.points += r.coverage.total
                self.covered += r.coverage.covered
            elif r.coverage.status == "unscored":
                self.cov_unscored += 1
                if r.coverage.total:
                    self.unscored_points += r.coverage.total
                else:
                    self.unscored_unknown += 1
        if r.defects is not None:
            if r.defects.status == "scored":
                self.def_scored += 1
                self.penalized += bool(r.defects.penalized)
            elif r.defects.status == "unscored":
                self.def_unscored += 1
        if r.rouge_l is not None:
            self.rouge_sum += r.rouge_l.f1
            self.rouge_n += 1
        if r.bertscore is not None:
            if r.bertscore.f1 is None:
                self.bert_null += 1
            else:
                self.bert_sum += r.bertscore.f1
                self.bert_n += 1
        if r.length_ratio is not None:
            self.ratio_sum += r.length_ratio
            self.ratio_n += 1

    def summary(self) -> GroupSummary:
        return GroupSummary(**self._fields())

    def _fields(self) -> dict[str, object]:
        def mean(total: float, n: float) -> float | None:
            return round(total / n, 6) if n else None

        known = self.cov_scored + self.cov_unscored - self.unscored_unknown
        known_points = self.points + self.unscored_points
        # Items whose points are unknown (extraction failed) count as the mean known item.
        guessed = self.unscored_unknown * (known_points / known if known else 1.0)
        return {
            "items": self.items,
            "scored": self.scored,
            "unscored": self.items - self.scored,
            "coverage_scored": self.cov_scored,
            "coverage_unscored": self.cov_unscored,
            "points": self.points,
            "points_covered": self.covered,
            "bpc": mean(self.covered, self.points),
            "bpc_all": mean(self.covered, known_points + guessed),
            "unscored_rate": mean(self.items - self.scored, self.items),
            "defects_scored": self.def_scored,
            "defects_unscored": self.def_unscored,
            "penalized": self.penalized,
            "penalty_rate": mean(self.penalized, self.def_scored),
            "rouge_l": mean(self.rouge_sum, self.rouge_n),
            "rouge_l_n": self.rouge_n,
            "bertscore_f1": mean(self.bert_sum, self.bert_n),
            "bertscore_n": self.bert_n,
            "bertscore_unavailable": self.bert_null,
            "length_ratio": mean(self.ratio_sum, self.ratio_n),
            "unscored_by_reason": dict(sorted(self.reasons.items())),
        }


class Aggregator:
    """Accumulates results one at a time (flat memory) and produces a ``Summary``."""

    def __init__(self) -> None:
        self._all = _Acc()
        self._groups: dict[str, dict[str, _Acc]] = {
            "by_dimension": {},
            "by_context": {},
            "by_respondent": {},
        }
        self.judge: str | None = None

    def add(self, result: GradeResult) -> None:
        """Count one result."""
        self._all.add(result)
        self.judge = self.judge or result.provenance.judge
        keys = {
            "by_dimension": result.tom_dimension,
            "by_context": None if result.context_window is None else str(result.context_window),
            "by_respondent": result.respondent,
        }
        for group, key in keys.items():
            if key is not None:
                self._groups[group].setdefault(key, _Acc()).add(result)

    def extend(self, results: Iterable[GradeResult]) -> Aggregator:
        """Count many results; returns self."""
        for result in results:
            self.add(result)
        return self

    def summary(self, **extra: object) -> Summary:
        """The summary so far; ``extra`` fills the call counters (judge_calls, cache_hits...)."""
        groups = {
            name: {key: acc.summary() for key, acc in sorted(accs.items())}
            for name, accs in self._groups.items()
        }
        summary = Summary(**self._all._fields(), **groups, judge=self.judge, **extra)  # type: ignore[arg-type]
        summary.warnings = unscored_warnings(summary)
        return summary


UNSCORED_WARN_RATE = 0.02
"""Above this share of unscored items, or this spread between respondents, a summary warns."""


def unscored_warnings(summary: Summary) -> list[str]:
    """Warnings about unscored items that could bias the headline figures."""
    out: list[str] = []
    rate = summary.unscored_rate
    if rate is not None and rate > UNSCORED_WARN_RATE:
        out.append(
            f"{summary.unscored} of {summary.items} items ({100 * rate:.1f}%) are unscored: bpc "
            f"counts scored items only ({_pct(summary.bpc)}%); bpc_all counts them as not "
            f"covered ({_pct(summary.bpc_all)}%). See unscored_by_reason."
        )
    rates = {
        name: group.unscored_rate
        for name, group in summary.by_respondent.items()
        if group.unscored_rate is not None
    }
    if len(rates) > 1:
        low, high = min(rates, key=rates.__getitem__), max(rates, key=rates.__getitem__)
        if rates[high] - rates[low] > UNSCORED_WARN_RATE:
            out.append(
                f"unscored rates differ between respondents: {high} {100 * rates[high]:.1f}% vs "
                f"{low} {100 * rates[low]:.1f}%; compare them on bpc_all, not bpc."
            )
    return out


def summarize(results: Iterable[GradeResult], **extra: object) -> Summary:
    """Aggregate results in one pass (see ``Aggregator``)."""
    return Aggregator().extend(results).summary(**extra)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def format_table(summary: Summary) -> str:
    """The per-dimension table the CLI prints (percentages, with scored/unscored counts).

    The group column is as wide as the longest label (respondent model names are long and must
    not be cut to look alike).
    """
    labels = [
        "overall", *summary.by_dimension,
        *(f"ctx={k}" for k in summary.by_context), *(f"model={k}" for k in summary.by_respondent),
    ]
    width = min(60, max(14, *(len(label) + 1 for label in labels)))
    header = (
        f"{'group':<{width}}{'items':>6}{'unsc.':>6}{'BPC%':>7}{'BPCall%':>8}{'PR%':>7}{'ROUGE-L':>9}"
        f"{'BERTSc.':>9}{'len':>6}"
    )
    lines = [header, "-" * len(header)]

    def row(name: str, g: GroupSummary) -> str:
        ratio = "-" if g.length_ratio is None else f"{g.length_ratio:.2f}"
        return (
            f"{name[:width]:<{width}}{g.items:>6}{g.unscored:>6}{_pct(g.bpc):>7}{_pct(g.bpc_all):>8}"
            f"{_pct(g.penalty_rate):>7}{_pct(g.rouge_l):>9}{_pct(g.bertscore_f1):>9}{ratio:>6}"
        )

    for key, group in summary.by_dimension.items():
        lines.append(row(key, group))
    if summary.by_dimension:
        lines.append("-" * len(header))
    lines.append(row("overall", summary))
    if summary.bertscore_unavailable:
        lines.append(
            f"BERTScore unavailable for {summary.bertscore_unavailable} item(s) (the encoder "
            "lacks their language, e.g. Chinese on the English encoder); its mean is over "
            f"{summary.bertscore_n} item(s)."
        )
    for name, groups in (("ctx", summary.by_context), ("model", summary.by_respondent)):
        if len(groups) > 1:
            lines.append("")
            for key, group in groups.items():
                lines.append(row(f"{name}={key}", group))
    lines.append(
        "BPC% counts scored items only; BPCall% counts unscored items' points as not covered."
    )
    lines.extend(f"warning: {w}" for w in summary.warnings)
    return "\n".join(lines)
