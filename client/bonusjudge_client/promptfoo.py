"""A promptfoo assertion that grades an output through a running bonusjudge service.

In ``promptfooconfig.yaml`` (``examples/promptfoo/`` is one to copy), a Python assertion names a
file whose ``get_assert`` is this module's::

    defaultTest:
      options:
        disableVarExpansion: true     # bonus_points is a list: one test, not one per point
      assert:
        - type: python
          value: file://bonusjudge_assert.py
          config: {url: "http://127.0.0.1:8000", min_coverage: 0.5}

The test's ``vars`` are the item: ``question``, ``answer`` (or ``reference``), ``bonus_points``
and any other field of a request or CharToM-QA line (see
:func:`bonusjudge_client.harness.request_fields`); the output under test is the response.

The assertion's ``score`` is the output's coverage (covered bonus points over points); it passes
when the coverage reaches ``min_coverage`` (default 0.5) and, unless ``allow_defects`` is set, the
judge found no defect; its ``reason`` names the covered points and the defects. promptfoo has no
"unscored" value: an output the judge could not grade, or an item the service refused, fails with
a reason that starts with ``unscored`` (the score 0 there is promptfoo's, not a grade), so it is
looked at rather than averaged in.

``config`` keys: ``url`` (default ``BONUSJUDGE_URL``, else ``http://127.0.0.1:8000``),
``api_key`` (default ``BONUSJUDGE_API_KEY``), ``judge`` (``{"model": "openai/gpt-4o"}``),
``context_window``, ``min_coverage``, ``allow_defects``, ``timeout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bonusjudge_client import harness
from bonusjudge_client.errors import ClientHTTPError, ClientInputError
from bonusjudge_client.sync import JudgeClient
from bonusjudge_client.wire.grading import GradeResult

__all__ = ["DEFAULT_MIN_COVERAGE", "get_assert", "grading_result"]

DEFAULT_MIN_COVERAGE = 0.5
"""Coverage an output needs to pass when the assertion's config does not say."""

_REFUSALS = frozenset({400, 413, 422})
"""Statuses with which the service refuses the item itself (not the caller or its own state)."""


def _unscored(why: str) -> dict[str, Any]:
    """A result for an output that was not graded (see the module docstring)."""
    return {"pass": False, "score": 0.0, "reason": f"unscored (not a grade): {why}"}


def grading_result(
    result: GradeResult, *, min_coverage: float = DEFAULT_MIN_COVERAGE,
    allow_defects: bool = False,
) -> dict[str, Any]:
    """The promptfoo grading result (``pass``, ``score``, ``reason``) for one bonusjudge result."""
    tally = harness.Tally.of(result)
    coverage = result.coverage
    if coverage is None or coverage.coverage is None or tally.points is None:
        return _unscored("; ".join(result.unscored_reasons) or "coverage was not requested")
    named = harness.covered_points(result)
    reason = f"covers {tally.covered} of {tally.points} bonus points" + (
        ": " + "; ".join(named) if named else ""
    )
    defects = result.defects.defects if result.defects else []
    if defects:
        reason += ". Defects: " + "; ".join(d.description for d in defects)
    passed = coverage.coverage >= min_coverage and (allow_defects or not defects)
    return {"pass": passed, "score": coverage.coverage, "reason": reason}


def get_assert(output: str, context: Mapping[str, Any]) -> dict[str, Any]:
    """The promptfoo entry point: grade ``output`` against the test's ``vars``.

    Raises:
        JudgeClientError: the service cannot be reached, or refused the caller (not the item).
    """
    config: Mapping[str, Any] = context.get("config") or {}
    test_vars: Mapping[str, Any] = context.get("vars") or {}
    try:
        request = harness.grade_request(
            test_vars, response=output, context_window=config.get("context_window")
        )
    except ValueError as exc:  # pydantic's ValidationError is one
        return _unscored(f"the test's vars are not a gradable item: {exc}")
    with JudgeClient(config.get("url"), api_key=config.get("api_key"),
                     timeout=config.get("timeout")) as client:
        try:
            result = client.grade(request, judge=config.get("judge"))
        except ClientInputError as exc:
            return _unscored(str(exc))
        except ClientHTTPError as exc:
            if exc.status not in _REFUSALS:
                raise
            return _unscored(str(exc))
    return grading_result(
        result,
        min_coverage=float(config.get("min_coverage", DEFAULT_MIN_COVERAGE)),
        allow_defects=bool(config.get("allow_defects", False)),
    )
