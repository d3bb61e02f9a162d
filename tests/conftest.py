"""Test-wide rules.

Some tests read the shared data beside the checkout (``../shared``: calibration sets, the
benchmark workload) and skip when it is absent, so the suite still runs from a bare clone. In CI
(``CI`` set) such a skip is a failure: a run that silently skipped them would pass without
testing what it claims to.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

_SHARED_SKIP_WORDS = ("absent", "not present")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and os.environ.get("CI")):
        return
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
    if any(word in reason for word in _SHARED_SKIP_WORDS):
        report.outcome = "failed"
        report.longrepr = f"shared data missing in CI (would have skipped): {reason}"
