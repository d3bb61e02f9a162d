"""Fixtures shared by the calibration tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import calibration.report


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Write reports without drawing their PNGs, for tests about something else.

    Drawing is most of what writing a small report costs (about 0.2 s of CPU a figure, two per
    metric), and nothing of a plot reaches ``report.json`` or ``report.md``. A plot file missing
    is created empty (one there is left as it is), so every path a report lists exists. The
    drawing itself is tested where it is the subject: ``test_cal_report.py`` (files, titles
    that fit, degenerate metrics) and the first run of ``test_cal_runner.py``.
    """

    def blank(path: Path, *args: Any, **kwargs: Any) -> None:
        Path(path).touch()

    monkeypatch.setattr(calibration.report, "_scatter_png", blank)
    monkeypatch.setattr(calibration.report, "_reliability_png", blank)
