"""The names of what can be computed for an item: the leaf of the engine's configuration.

Both :mod:`judge.config` (which metrics a configuration computes) and :mod:`judge.types` (the
request and result models) read them, so configuration sits at the bottom of the engine room.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["ALL_METRICS", "CALIBRATION_METRICS", "MetricName"]

MetricName = Literal["coverage", "defects", "rouge_l", "bertscore"]
"""What a caller can ask to be computed for an item."""

ALL_METRICS: tuple[MetricName, ...] = get_args(MetricName)
"""Every metric, in the order results and tables show them."""

CALIBRATION_METRICS: tuple[MetricName, ...] = ("rouge_l", "bertscore", "coverage")
"""What a calibration run computes by default: the paper's comparison (defects are not a score)."""
