"""Multiple-choice scoring for the Theory-of-Mind suites (ToMBench, CogToM, XToM, ToMValley).

Extract the chosen option from free text (:func:`extract_answer`), score items
(:func:`score_item`, :func:`score_items`), summarise runs with the papers' breakdowns
(:func:`summarize`), build permuted presentations against position bias (:func:`expand_item`),
and score whole JSONL files (:func:`score_file`). The CLI subcommand lives in
:mod:`cli.mcq`.
"""

from judge.mcq.extract import (
    DEFAULT_FUZZY_MARGIN,
    DEFAULT_FUZZY_THRESHOLD,
    Extraction,
    extract_answer,
)
from judge.mcq.permute import (
    expand_item,
    plan_permutations,
    render_options,
    to_canonical,
    to_displayed,
)
from judge.mcq.runner import score_file, score_file_async, score_items
from judge.mcq.score import compute_metrics, multi_label_f1, score_item, summarize
from judge.mcq.types import (
    Aggregate,
    CoherentMetrics,
    CrossLingualMetrics,
    ExtractionMethod,
    LlmExtractor,
    McqItem,
    McqMetrics,
    McqResult,
    McqSummary,
    MultiSelectMetrics,
    Outcome,
    PermutationInfo,
    PermutationMetrics,
    SkippedLine,
    SlotMetrics,
    default_labels,
)

__all__ = [
    "DEFAULT_FUZZY_MARGIN",
    "DEFAULT_FUZZY_THRESHOLD",
    "Aggregate",
    "CoherentMetrics",
    "CrossLingualMetrics",
    "Extraction",
    "ExtractionMethod",
    "LlmExtractor",
    "McqItem",
    "McqMetrics",
    "McqResult",
    "McqSummary",
    "MultiSelectMetrics",
    "Outcome",
    "PermutationInfo",
    "PermutationMetrics",
    "SkippedLine",
    "SlotMetrics",
    "compute_metrics",
    "default_labels",
    "expand_item",
    "extract_answer",
    "multi_label_f1",
    "plan_permutations",
    "render_options",
    "score_file",
    "score_file_async",
    "score_item",
    "score_items",
    "summarize",
    "to_canonical",
    "to_displayed",
]
