"""Scoring: one item to one result, and results to the metrics the ToM papers report.

Pure functions, no I/O. Results are first grouped into *questions* (same ``id`` and ``language``):
runs of one question over permuted options become one question score, by ``mean`` accuracy
(CogToM) or the ``majority`` answer (ToMBench). A question counts as *right* when its score is above
0.5; with one run, or under majority vote, that is simply "answered correctly". Story coherence,
slot exact match and cross-lingual consistency are built on that.

Unparseable answers are never wrong answers in disguise: they are counted in ``unparseable``;
``accuracy`` counts them as not correct (so refusing hard questions cannot raise it) and
``accuracy_parsed`` leaves them out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bonusjudge_client.wire.mcq import (
    Aggregate,
    CoherentMetrics,
    CrossLingualMetrics,
    ExtractionMethod,
    McqItem,
    McqMetrics,
    McqResult,
    McqSummary,
    MultiSelectMetrics,
    PermutationMetrics,
    SkippedLine,
    SlotMetrics,
)
from judge.mcq.extract import DEFAULT_FUZZY_MARGIN, DEFAULT_FUZZY_THRESHOLD, Extraction
from judge.mcq.extract import extract_answer as _extract
from judge.mcq.permute import to_canonical

__all__ = [
    "DEFAULT_GROUP_FIELDS",
    "NO_GROUP",
    "check_group_fields",
    "compute_metrics",
    "extract_item",
    "multi_label_f1",
    "result_from_extraction",
    "score_item",
    "summarize",
]

DEFAULT_GROUP_FIELDS: tuple[str, ...] = ("task", "ability", "tom_dimension", "language")
"""Fields broken down by default (plus every ``tags`` key, as ``tags.<key>``)."""

NO_GROUP = "(none)"
"""Group name for results without a value in a breakdown field; left out of macro averages (and
counted in the summary's ``ungrouped``)."""

_GROUPABLE = ("task", "ability", "tom_dimension", "language", "story_id", "slot_group")
_METHODS: tuple[ExtractionMethod, ...] = ("strict", "lenient", "fuzzy", "llm", "unparseable")


def extract_item(
    item: McqItem,
    *,
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
    fuzzy_margin: float = DEFAULT_FUZZY_MARGIN,
) -> Extraction:
    """Run the extraction rules on an item's response, against what the model was shown."""
    return _extract(
        item.response,
        item.display_labels,
        item.displayed_choices,
        multi_select=item.is_multi_select,
        fuzzy_threshold=fuzzy_threshold,
        fuzzy_margin=fuzzy_margin,
    )


def _f1(tp: int, fp: int, fn: int) -> float:
    denominator = 2 * tp + fp + fn
    # Nothing expected and nothing chosen is a perfect (empty) match.
    return 1.0 if denominator == 0 else 2 * tp / denominator


def result_from_extraction(item: McqItem, extraction: Extraction) -> McqResult:
    """Map an extraction (displayed labels) back to canonical labels and score it.

    Raises:
        ValueError: If the extraction names a label the item does not have.
    """
    labels = item.display_labels
    chosen_set = {to_canonical(label, labels, item.order) for label in extraction.labels}
    chosen = sorted(chosen_set, key=labels.index)
    answer = list(item.answer_labels)
    correct: bool | None = None
    f1: float | None = None
    if extraction.parsed:
        correct = chosen_set == set(answer)
        if item.is_multi_select:
            tp = len(chosen_set & set(answer))
            f1 = _f1(tp, len(chosen_set) - tp, len(answer) - tp)
    outcome = "unparseable" if correct is None else ("correct" if correct else "wrong")
    return McqResult(
        id=item.id,
        language=item.language,
        task=item.task,
        ability=item.ability,
        tom_dimension=item.tom_dimension,
        story_id=item.story_id,
        slot_group=item.slot_group,
        tags=dict(item.tags),
        permutation=item.permutation,
        multi_select=item.is_multi_select,
        answer=answer,
        extracted=list(extraction.labels),
        chosen=chosen,
        method=extraction.method,
        detail=extraction.detail,
        outcome=outcome,
        correct=correct,
        f1=f1,
    )


def score_item(
    item: McqItem,
    *,
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
    fuzzy_margin: float = DEFAULT_FUZZY_MARGIN,
) -> McqResult:
    """Extract the answer of one item by the rules (no LLM) and score it."""
    extraction = extract_item(item, fuzzy_threshold=fuzzy_threshold, fuzzy_margin=fuzzy_margin)
    return result_from_extraction(item, extraction)


@dataclass(frozen=True)
class _Question:
    """All runs of one question (id x language) and their aggregated score."""

    runs: tuple[McqResult, ...]
    score: float
    permuted: bool
    tie: bool
    no_votes: bool

    @property
    def first(self) -> McqResult:
        return self.runs[0]

    @property
    def right(self) -> bool:
        return self.score > 0.5


def _question_key(result: McqResult) -> tuple[str, str]:
    return (result.id, result.language or "")


def _aggregate_one(runs: tuple[McqResult, ...], aggregate: Aggregate) -> _Question:
    permuted = any(run.permutation is not None for run in runs)
    if aggregate == "mean":
        score = sum(1 for run in runs if run.correct) / len(runs)
        return _Question(runs, score, permuted, tie=False, no_votes=False)
    votes = Counter(frozenset(run.chosen) for run in runs if run.correct is not None)
    if not votes:
        return _Question(runs, 0.0, permuted, tie=False, no_votes=True)
    ranked = votes.most_common()
    # A tie at the top has no majority; picking one would be a guess, so it is not correct.
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return _Question(runs, 0.0, permuted, tie=True, no_votes=False)
    score = 1.0 if ranked[0][0] == frozenset(runs[0].answer) else 0.0
    return _Question(runs, score, permuted, tie=False, no_votes=False)


def _questions(results: Iterable[McqResult], aggregate: Aggregate) -> list[_Question]:
    grouped: dict[tuple[str, str], list[McqResult]] = defaultdict(list)
    for result in results:
        grouped[_question_key(result)].append(result)
    return [_aggregate_one(tuple(runs), aggregate) for runs in grouped.values()]


def multi_label_f1(pairs: Iterable[tuple[Iterable[str], Iterable[str]]]) -> tuple[float, float]:
    """Micro and macro F1 over (gold labels, predicted labels) pairs.

    Micro pools every (item, label) decision; macro averages per-label F1 over the labels that
    occur in some gold or predicted set (as scikit-learn does by default).

    Returns:
        ``(micro_f1, macro_f1)``; ``(1.0, 1.0)`` when no label occurs at all.
    """
    per_label: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for gold_raw, pred_raw in pairs:
        gold, pred = set(gold_raw), set(pred_raw)
        for label in gold & pred:
            per_label[label][0] += 1
        for label in pred - gold:
            per_label[label][1] += 1
        for label in gold - pred:
            per_label[label][2] += 1
    if not per_label:
        return 1.0, 1.0
    tp, fp, fn = (sum(counts[i] for counts in per_label.values()) for i in range(3))
    macro = sum(_f1(*counts) for counts in per_label.values()) / len(per_label)
    return _f1(tp, fp, fn), macro


def _all_right(
    questions: Sequence[_Question], group_of: Callable[[McqResult], str | None]
) -> tuple[int, int]:
    """Groups of questions (``group_of`` x language) and how many have every question right."""
    groups: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for question in questions:
        group = group_of(question.first)
        if group is not None:
            groups[(group, question.first.language or "")].append(question.right)
    return len(groups), sum(1 for rights in groups.values() if all(rights))


def _slot_metrics(questions: Sequence[_Question]) -> SlotMetrics | None:
    groups, exact = _all_right(questions, lambda result: result.slot_group)
    if not groups:
        return None
    return SlotMetrics(groups=groups, exact=exact, exact_match=exact / groups)


def _coherent_metrics(questions: Sequence[_Question]) -> CoherentMetrics | None:
    stories, coherent = _all_right(questions, lambda result: result.story_id)
    if not stories:
        return None
    return CoherentMetrics(stories=stories, coherent=coherent, accuracy=coherent / stories)


def _multi_metrics(results: Sequence[McqResult]) -> MultiSelectMetrics | None:
    multi = [result for result in results if result.multi_select]
    if not multi:
        return None
    # An unparseable multi-select answer chose nothing: every correct label is a miss.
    micro, macro = multi_label_f1((result.answer, result.chosen) for result in multi)
    return MultiSelectMetrics(
        items=len(multi),
        unparseable=sum(1 for result in multi if result.correct is None),
        micro_f1=micro,
        macro_f1=macro,
        exact_set=sum(1 for result in multi if result.correct) / len(multi),
    )


def _permutation_metrics(
    questions: Sequence[_Question], aggregate: Aggregate
) -> PermutationMetrics | None:
    permuted = [question for question in questions if question.permuted]
    if not permuted:
        return None
    multi_run = [question for question in permuted if len(question.runs) >= 2]
    consistent = sum(
        1
        for question in multi_run
        if all(run.correct is not None for run in question.runs)
        and len({frozenset(run.chosen) for run in question.runs}) == 1
    )
    return PermutationMetrics(
        aggregate=aggregate,
        questions=len(permuted),
        min_runs=min(len(question.runs) for question in permuted),
        max_runs=max(len(question.runs) for question in permuted),
        consistency_questions=len(multi_run),
        position_consistency=consistent / len(multi_run) if multi_run else None,
        ties=sum(1 for question in permuted if question.tie),
        no_votes=sum(1 for question in permuted if question.no_votes),
    )


def compute_metrics(results: Sequence[McqResult], *, aggregate: Aggregate = "mean") -> McqMetrics:
    """Accuracy, unparseable rate and the structural metrics over a set of results.

    Args:
        results: Result lines; runs of one question (same id and language) must all be present.
        aggregate: How permuted runs of a question combine (``mean`` or ``majority``).
    """
    questions = _questions(results, aggregate)
    correct = sum(question.score for question in questions)
    parsed = [result for result in results if result.correct is not None]
    unparseable = len(results) - len(parsed)
    methods = Counter(result.method for result in results)
    return McqMetrics(
        items=len(results),
        questions=len(questions),
        correct=correct,
        accuracy=correct / len(questions) if questions else None,
        accuracy_parsed=(
            sum(1 for result in parsed if result.correct) / len(parsed) if parsed else None
        ),
        unparseable=unparseable,
        unparseable_rate=unparseable / len(results) if results else None,
        methods={method: methods.get(method, 0) for method in _METHODS},
        exact_match=_slot_metrics(questions),
        multi_select=_multi_metrics(results),
        coherent=_coherent_metrics(questions),
        permutation=_permutation_metrics(questions, aggregate),
    )


def _field_getter(name: str) -> Callable[[McqResult], str | None]:
    if name.startswith("tags.") and len(name) > len("tags."):
        key = name.removeprefix("tags.")
        return lambda result: result.tags.get(key)
    if name not in _GROUPABLE:
        raise ValueError(
            f"cannot group by {name!r}: use one of {', '.join(_GROUPABLE)} or tags.<key>"
        )
    return lambda result: getattr(result, name)


def check_group_fields(fields: Iterable[str]) -> None:
    """Check that each name is a grouping field (``task``, ..., or ``tags.<key>``).

    Raises:
        ValueError: Naming the first field that is not.
    """
    for name in fields:
        _field_getter(name)


def _split(
    results: Sequence[McqResult], getter: Callable[[McqResult], str | None]
) -> dict[str, list[McqResult]]:
    groups: dict[str, list[McqResult]] = defaultdict(list)
    for result in results:
        value = getter(result)
        groups[NO_GROUP if value is None else str(value)].append(result)
    return dict(sorted(groups.items()))


def _mean(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


def _cross_lingual(questions: Sequence[_Question]) -> CrossLingualMetrics | None:
    by_id: dict[str, dict[str, bool]] = defaultdict(dict)
    for question in questions:
        if question.first.language is not None:
            by_id[question.first.id][question.first.language] = question.right
    parallel = {item_id: langs for item_id, langs in by_id.items() if len(langs) >= 2}
    if not parallel:
        return None
    right = sum(1 for langs in parallel.values() if all(langs.values()))
    wrong = sum(1 for langs in parallel.values() if not any(langs.values()))
    mixed = len(parallel) - right - wrong
    n = len(parallel)
    return CrossLingualMetrics(
        languages=sorted({lang for langs in parallel.values() for lang in langs}),
        instances=n,
        consistently_right=right,
        consistently_wrong=wrong,
        inconsistent=mixed,
        consistently_right_rate=right / n,
        consistently_wrong_rate=wrong / n,
        inconsistent_rate=mixed / n,
    )


def summarize(
    results: Sequence[McqResult],
    *,
    aggregate: Aggregate = "mean",
    group_by: Sequence[str] | None = None,
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
    llm_extractor: bool = False,
    llm_failures: int = 0,
    bad_lines: Sequence[SkippedLine] = (),
) -> McqSummary:
    """The full summary of a run: overall metrics, breakdowns, macro averages, cross-lingual.

    Args:
        results: Every result line of the run.
        aggregate: How permuted runs of a question combine.
        group_by: Fields to break down by; default :data:`DEFAULT_GROUP_FIELDS` plus each tag
            key. A field no result has a value for is left out.
        fuzzy_threshold: Recorded in the summary.
        llm_extractor: Recorded in the summary (whether one was used).
        llm_failures: Recorded in the summary.
        bad_lines: Input lines that were skipped, recorded in the summary.

    Raises:
        ValueError: If ``group_by`` names a field results do not have.
    """
    if group_by is None:
        tag_keys = sorted({key for result in results for key in result.tags})
        group_by = [*DEFAULT_GROUP_FIELDS, *(f"tags.{key}" for key in tag_keys)]
    overall = compute_metrics(results, aggregate=aggregate)
    breakdowns: dict[str, dict[str, McqMetrics]] = {}
    macro: dict[str, float] = {}
    ungrouped: dict[str, int] = {}
    for field in group_by:
        getter = _field_getter(field)
        if all(getter(result) is None for result in results):
            continue
        groups = {
            name: compute_metrics(members, aggregate=aggregate)
            for name, members in _split(results, getter).items()
        }
        breakdowns[field] = groups
        average = _mean(metrics.accuracy for name, metrics in groups.items() if name != NO_GROUP)
        if average is not None:
            macro[field] = average
            # The average leaves these lines out; the count says so where the average is read.
            ungrouped[field] = groups[NO_GROUP].items if NO_GROUP in groups else 0
    dimension_over_abilities: dict[str, float] = {}
    for dimension, members in _split(results, _field_getter("tom_dimension")).items():
        if dimension == NO_GROUP:
            continue
        abilities = _split(members, _field_getter("ability"))
        abilities.pop(NO_GROUP, None)
        average = _mean(
            compute_metrics(group, aggregate=aggregate).accuracy for group in abilities.values()
        )
        if average is not None:
            dimension_over_abilities[dimension] = average
    return McqSummary(
        **overall.model_dump(),
        fuzzy_threshold=fuzzy_threshold,
        llm_extractor=llm_extractor,
        llm_failures=llm_failures,
        breakdowns=breakdowns,
        macro=macro,
        ungrouped=ungrouped,
        dimension_over_abilities=dimension_over_abilities,
        ability_view=_mean(dimension_over_abilities.values()),
        cross_lingual=_cross_lingual(_questions(results, aggregate)),
        bad_lines=list(bad_lines),
    )
