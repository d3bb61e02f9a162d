"""Multiple-choice scoring for the Theory-of-Mind suites (ToMBench, CogToM, XToM, ToMValley).

Extract the chosen option from free text (:func:`extract_answer`), score items
(:func:`score_item`, :func:`score_items`), summarise runs with the papers' breakdowns
(:func:`summarize`), build permuted presentations against position bias (:func:`expand_item`),
and score whole JSONL files (:func:`score_file`). The CLI subcommand lives in
:mod:`cli.mcq`.
"""

from typing import TYPE_CHECKING

# The names load with their module on first use (PEP 562), so that `bonusjudge mcq --help` and
# the service's schemas, which need one constant, do not import the whole package.
_MODULES = {
    "Aggregate": "bonusjudge_client.wire.mcq",
    "CoherentMetrics": "bonusjudge_client.wire.mcq",
    "CrossLingualMetrics": "bonusjudge_client.wire.mcq",
    "DEFAULT_FUZZY_MARGIN": "bonusjudge_client.wire.mcq_defaults",
    "DEFAULT_FUZZY_THRESHOLD": "bonusjudge_client.wire.mcq_defaults",
    "Extraction": "judge.mcq.extract",
    "ExtractionMethod": "bonusjudge_client.wire.mcq",
    "LlmExtractor": "bonusjudge_client.wire.mcq",
    "McqItem": "bonusjudge_client.wire.mcq",
    "McqMetrics": "bonusjudge_client.wire.mcq",
    "McqResult": "bonusjudge_client.wire.mcq",
    "McqSummary": "bonusjudge_client.wire.mcq",
    "MultiSelectMetrics": "bonusjudge_client.wire.mcq",
    "Outcome": "bonusjudge_client.wire.mcq",
    "PermutationInfo": "bonusjudge_client.wire.mcq",
    "PermutationMetrics": "bonusjudge_client.wire.mcq",
    "SkippedLine": "bonusjudge_client.wire.mcq",
    "SlotMetrics": "bonusjudge_client.wire.mcq",
    "compute_metrics": "judge.mcq.score",
    "default_labels": "bonusjudge_client.wire.mcq",
    "expand_item": "judge.mcq.permute",
    "extract_answer": "judge.mcq.extract",
    "multi_label_f1": "judge.mcq.score",
    "plan_permutations": "judge.mcq.permute",
    "render_options": "judge.mcq.permute",
    "score_file": "judge.mcq.runner",
    "score_file_async": "judge.mcq.runner",
    "score_item": "judge.mcq.score",
    "score_items": "judge.mcq.runner",
    "summarize": "judge.mcq.score",
    "to_canonical": "judge.mcq.permute",
    "to_displayed": "judge.mcq.permute",
}

if TYPE_CHECKING:
    from bonusjudge_client.wire.mcq import (
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
    from bonusjudge_client.wire.mcq_defaults import DEFAULT_FUZZY_MARGIN, DEFAULT_FUZZY_THRESHOLD
    from judge.mcq.extract import Extraction, extract_answer
    from judge.mcq.permute import (
        expand_item,
        plan_permutations,
        render_options,
        to_canonical,
        to_displayed,
    )
    from judge.mcq.runner import score_file, score_file_async, score_items
    from judge.mcq.score import compute_metrics, multi_label_f1, score_item, summarize


def __getattr__(name: str) -> object:
    """Import the submodule that defines ``name`` on first use (see ``_MODULES``)."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'judge.mcq' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
