"""Aggregates as the CharToM-QA paper reports them, computed in one streaming pass.

BPC is micro-averaged (covered points / points) over the items whose coverage is *scored*; the
penalty rate is the share of defect-scored items with at least one defect. Unscored items are
counted and reported by reason, never averaged in as zero there.

Scored-only BPC alone can flatter: a response that makes the judge fail (a refusal, a cut-off
reply, text that breaks the output format) leaves the denominator. So every group also carries
``bpc_all``, which counts each unscored item's points as not covered, and ``unscored_rate``; the
summary warns when unscored coverage or unscored defects exceed 2% of the items judged for them,
or their rate differs between respondents by more than 2 points. Coverage and defects are counted
apart: an unparseable defect verdict leaves the penalty rate's base, never BPC's. Every group
(overall, by ToM dimension, by context window, by respondent model) carries its own scored and
unscored counts, and the results' flags (``null_response``...).

A null answer is graded (as an empty one) rather than dropped, but a line that is not a valid
item at all is not graded; the caller reports such lines per respondent
(:meth:`Aggregator.add_invalid`), and the summary warns when their counts differ between
respondents, since those respondents' figures are then over different item sets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from bonusjudge_client.wire.grading import PROMPT_LANGUAGE_FLAG, GradeResult
from bonusjudge_client.wire.summary import GroupSummary as GroupSummary
from bonusjudge_client.wire.summary import Summary as Summary


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
    cal_sum: float = 0.0
    cal_n: int = 0
    cal_metrics: set[str] = field(default_factory=set)
    by_matcher: int = 0
    by_llm: int = 0
    calls_saved: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)

    def add(self, r: GradeResult) -> None:
        self.items += 1
        self.scored += r.status == "scored"
        for reason in r.unscored_reasons:
            self.reasons[reason] += 1
        self.flags.update(r.flags)
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
        if r.decided_by == "llm":
            self.by_llm += 1
        elif r.decided_by == "embedded-matcher":
            self.by_matcher += 1
            self.calls_saved += llm_calls_saved(r)
        if r.calibrated_metric is not None:
            self.cal_metrics.add(r.calibrated_metric)
        if r.calibrated_score is not None:
            self.cal_sum += r.calibrated_score
            self.cal_n += 1

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
            # A mean over two metrics' mappings would be no figure at all.
            "calibrated_score": (
                mean(self.cal_sum, self.cal_n) if len(self.cal_metrics) <= 1 else None
            ),
            "calibrated_n": self.cal_n,
            "unscored_by_reason": dict(sorted(self.reasons.items())),
            "decided_by_matcher": self.by_matcher,
            "decided_by_llm": self.by_llm,
            "llm_share": mean(self.by_llm, self.by_llm + self.by_matcher),
            "llm_calls_saved": self.calls_saved,
            "flags": dict(sorted(self.flags.items())),
        }


BLANK_FLAGS = frozenset({"null_response", "empty_response"})
"""The flags of an answer with nothing to judge, about which no judge is asked."""


def llm_calls_saved(result: GradeResult) -> int:
    """The LLM calls a cascade item the matcher decided alone did not make.

    One per judge task asked (coverage, defects), as the LLM judge would have made them; none
    for an empty or null answer, which the LLM judge grades without a call too.
    """
    if result.decided_by != "embedded-matcher" or BLANK_FLAGS.intersection(result.flags):
        return 0
    return sum(task in result.provenance.metrics for task in ("coverage", "defects"))


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
        self._invalid: Counter[str] = Counter()
        self._invalid_any = False

    def add_invalid(self, respondent: str | None) -> None:
        """Count one input line that is not a valid item, against the respondent it names."""
        self._invalid_any = True
        if respondent is not None:
            self._invalid[respondent] += 1

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
        metrics = sorted(self._all.cal_metrics)
        invalid: dict[str, int] = {}
        if self._invalid_any:
            respondents = sorted({*self._groups["by_respondent"], *self._invalid})
            invalid = {name: self._invalid[name] for name in respondents}
        summary = Summary(
            **self._all._fields(), **groups, judge=self.judge,
            calibrated_metric=",".join(metrics) or None, invalid_lines_by_respondent=invalid,
            **extra,
        )
        summary.warnings = [
            *unscored_warnings(summary), *invalid_line_warnings(summary),
            *prompt_language_warnings(summary),
        ]
        if len(metrics) > 1:
            summary.warnings.append(
                f"the calibrated scores map different metrics ({', '.join(metrics)}): they were "
                "graded with different --calibration mappings, so no mean is given; grade "
                "again with one mapping."
            )
        return summary


UNSCORED_WARN_RATE = 0.02
"""Above this share of unscored items, or this spread between respondents, a summary warns."""


def unscored_warnings(summary: Summary) -> list[str]:
    """Warnings about unscored items that could bias the headline figures.

    Coverage and defects apart: an unscored defect verdict moves the penalty rate's base, an
    unscored coverage BPC's; neither says anything about the other.
    """
    out: list[str] = []
    judged = summary.coverage_scored + summary.coverage_unscored
    if judged and summary.coverage_unscored / judged > UNSCORED_WARN_RATE:
        out.append(
            f"{summary.coverage_unscored} of {judged} items' coverage is unscored "
            f"({100 * summary.coverage_unscored / judged:.1f}%): bpc counts coverage-scored "
            f"items only ({_pct(summary.bpc)}%); bpc_all counts them as not covered "
            f"({_pct(summary.bpc_all)}%). See unscored_by_reason."
        )
    judged = summary.defects_scored + summary.defects_unscored
    if judged and summary.defects_unscored / judged > UNSCORED_WARN_RATE:
        rate = summary.penalty_rate
        out.append(
            f"{summary.defects_unscored} of {judged} items' defect verdict is unscored "
            f"({100 * summary.defects_unscored / judged:.1f}%): the penalty rate counts "
            "defect-scored items only ("
            + ("none, so it has no value" if rate is None else f"{_pct(rate)}%")
            + "); bpc is not affected. See unscored_by_reason."
        )
    for task, rate_of, advice in (
        ("coverage", _coverage_unscored_rate, "compare them on bpc_all, not bpc"),
        ("defect", _defects_unscored_rate, "their penalty rates are over different items"),
    ):
        rates = {
            name: rate
            for name, group in summary.by_respondent.items()
            if (rate := rate_of(group)) is not None
        }
        if len(rates) > 1:
            low, high = min(rates, key=rates.__getitem__), max(rates, key=rates.__getitem__)
            if rates[high] - rates[low] > UNSCORED_WARN_RATE:
                out.append(
                    f"{task} unscored rates differ between respondents: {high} "
                    f"{100 * rates[high]:.1f}% vs {low} {100 * rates[low]:.1f}%; {advice}."
                )
    return out


def _coverage_unscored_rate(group: GroupSummary) -> float | None:
    judged = group.coverage_scored + group.coverage_unscored
    return group.coverage_unscored / judged if judged else None


def _defects_unscored_rate(group: GroupSummary) -> float | None:
    judged = group.defects_scored + group.defects_unscored
    return group.defects_unscored / judged if judged else None


def invalid_line_warnings(summary: Summary) -> list[str]:
    """A warning, per respondent, when respondents have different numbers of invalid lines.

    An invalid line is graded nowhere, so its respondent's bpc and bpc_all are over fewer items
    than another's: a model whose harness writes more broken lines is compared on other items.
    """
    counts = summary.invalid_lines_by_respondent
    if len(counts) < 2 or len(set(counts.values())) < 2:
        return []
    listed = ", ".join(
        f"{name} {n}" for name, n in sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))
    )
    return [
        f"invalid lines differ between respondents: {listed}. Invalid lines are not graded, so "
        "these respondents' bpc and bpc_all are over different item sets; fix the lines (see "
        "invalid_lines) and grade again."
    ]


def prompt_language_warnings(summary: Summary) -> list[str]:
    """The notice that Chinese items were judged with the paper's English-only prompts."""
    n = summary.flags.get(PROMPT_LANGUAGE_FLAG, 0)
    if not n:
        return []
    return [
        f"{n} Chinese item(s) were judged with English prompts (flag {PROMPT_LANGUAGE_FLAG}): "
        "the paper publishes English prompts only (--rubric chartom-paper) and its public "
        "scorer grades English only; --rubric chartom has Chinese prompts."
    ]


def summarize(results: Iterable[GradeResult], **extra: object) -> Summary:
    """Aggregate results in one pass (see ``Aggregator``)."""
    return Aggregator().extend(results).summary(**extra)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def format_table(summary: Summary) -> str:
    """The per-dimension table the CLI prints (percentages; unscored coverage and defects apart).

    The group column is as wide as the longest label (respondent model names are long and must
    not be cut to look alike).
    """
    labels = [
        "overall", *summary.by_dimension,
        *(f"ctx={k}" for k in summary.by_context), *(f"model={k}" for k in summary.by_respondent),
    ]
    width = min(60, max(14, *(len(label) + 1 for label in labels)))
    header = (
        f"{'group':<{width}}{'items':>6}{'unsc.C':>7}{'unsc.D':>7}{'BPC%':>7}{'BPCall%':>8}"
        f"{'PR%':>7}{'ROUGE-L':>9}{'BERTSc.':>9}{'len':>6}"
    )
    lines = [header, "-" * len(header)]

    def row(name: str, g: GroupSummary) -> str:
        ratio = "-" if g.length_ratio is None else f"{g.length_ratio:.2f}"
        return (
            f"{name[:width]:<{width}}{g.items:>6}{g.coverage_unscored:>7}{g.defects_unscored:>7}"
            f"{_pct(g.bpc):>7}{_pct(g.bpc_all):>8}{_pct(g.penalty_rate):>7}{_pct(g.rouge_l):>9}"
            f"{_pct(g.bertscore_f1):>9}{ratio:>6}"
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
    if summary.calibrated_metric is not None:
        mean = "-" if summary.calibrated_score is None else f"{summary.calibrated_score:.3f}"
        lines.append(
            f"calibrated score ({summary.calibrated_metric} mapped onto the human scale, 0-1): "
            f"mean {mean} over {summary.calibrated_n} item(s)"
        )
    routed = summary.decided_by_matcher + summary.decided_by_llm
    if routed:
        lines.append(
            f"cascade: {summary.decided_by_llm} of {routed} item(s) sent to the LLM judge "
            f"({_pct(summary.llm_share)}%), {summary.decided_by_matcher} decided by the embedded "
            f"matcher alone (defects not assessed); {summary.llm_calls_saved} LLM call(s) saved"
        )
    lines.append(
        "unsc.C / unsc.D: items whose coverage / defect verdict is unscored. BPC% counts "
        "coverage-scored items only; BPCall% counts unscored coverage's points as not covered; "
        "PR% counts defect-scored items only."
    )
    lines.extend(f"warning: {w}" for w in summary.warnings)
    return "\n".join(lines)


@dataclass
class ProvenanceCalls:
    """The judge calls that results' provenance records, summed for ``Aggregator.summary``.

    What a client of the service can know of the work done for it: the service's counters are
    its own, but every result lists its judge calls (``provenance.calls``). A call served from
    the cache counts as a cache hit; any other counts its attempts (re-asks and retries
    included), as the engine's own counter does.
    """

    judge_calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, result: GradeResult) -> None:
        """Count the calls of one result."""
        for call in result.provenance.calls:
            if call.cached:
                self.cache_hits += 1
            else:
                self.judge_calls += call.attempts
            self.prompt_tokens += call.prompt_tokens or 0
            self.completion_tokens += call.completion_tokens or 0
            self.cached_tokens += call.cached_tokens or 0
            self.cost_usd += call.cost_usd or 0.0

    def counters(self) -> dict[str, object]:
        """The counts as ``Aggregator.summary``'s keyword arguments (no cost: None)."""
        return {
            "judge_calls": self.judge_calls,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "cost_usd": round(self.cost_usd, 6) if self.cost_usd else None,
        }
