"""Whether a stored grade still stands for an item: the one rule of every resume.

``bonusjudge grade`` resuming an output file and ``bonusjudge calibrate`` reusing a grade file
both keep a stored result only when it grades the same content with the same judge: the same
configuration hash (which covers the embedded matcher's version and the digest of its
parameters, lexicons and encoders, :mod:`judge.identity`), the same judge version and the same
metrics. Anything else is graded again, and the reason is said, so one file never mixes judges;
so is an item a cost cap kept from being sent (``budget_exhausted``), so a run with a higher cap
grades exactly what the capped run left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judge.config import JudgeConfig

__all__ = ["JudgeStamp", "stale_reason"]


@dataclass(frozen=True)
class JudgeStamp:
    """What a result must carry to stand for this run's judge.

    Attributes:
        config_hash: ``JudgeConfig.config_hash()`` of the run (or the service's, from a probe).
        judge_version: The judge's own version (the matcher's), or None for an LLM judge.
        metrics: The metrics the run computes.
    """

    config_hash: str
    judge_version: str | None
    metrics: Sequence[str]

    @classmethod
    def of(cls, config: JudgeConfig) -> JudgeStamp:
        """The stamp of a run graded here with ``config``."""
        return cls(config.config_hash(), config.judge_version, list(config.metrics))


def stale_reason(
    obj: Mapping[str, Any], content_hash: str | None, stamp: JudgeStamp
) -> str | None:
    """Why a stored result cannot stand for its item under this run, or None when it can.

    Args:
        obj: The stored result (a JSON object with ``input_hash`` and ``provenance``).
        content_hash: The item's ``GradeRequest.content_hash()`` now; None when the item is not
            in this run's input (the result is then left as it is).
        stamp: This run's judge.

    Returns:
        A short reason for the log ("graded by matcher-v2, now matcher-v5"...), or None.
    """
    if content_hash is None:
        return None
    if any(reason.endswith(": budget_exhausted") for reason in obj.get("unscored_reasons") or []):
        # Never sent: the cost cap stopped the run before its call (``judge.budget``).
        return "not sent before the cost cap was reached"
    provenance = obj.get("provenance") or {}
    if obj.get("input_hash") != content_hash:
        return "with changed content"
    old_version = provenance.get("judge_version")
    if old_version != stamp.judge_version:
        # Checked before the hash: the version is what a person recognises.
        was = old_version or provenance.get("judge") or "another judge"
        return f"graded by {was}, now {stamp.judge_version or 'an LLM judge'}"
    if provenance.get("config_hash") != stamp.config_hash:
        return (
            f"graded by another judge configuration ({provenance.get('config_hash')}, "
            f"now {stamp.config_hash})"
        )
    if sorted(provenance.get("metrics") or []) != sorted(stamp.metrics):
        return "graded with other metrics"
    if obj.get("calibrated_score") is not None and obj.get("calibrated_metric") is None:
        # Written before results named the metric a mapping maps: which one is unknown.
        return "without the name of their calibrated metric"
    return None
