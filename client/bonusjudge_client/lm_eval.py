"""Scoring for lm-evaluation-harness: a ``process_results`` that grades through bonusjudge.

A generative task (``output_type: generate_until``) over CharToM-QA-format documents names these
in its YAML, through a ``utils.py`` beside it (``examples/lm_eval/`` is one to copy)::

    process_results: !function utils.process_results
    metric_list:
      - metric: bpc
        aggregation: !function utils.bpc
        higher_is_better: true
      - metric: penalty_rate
        aggregation: !function utils.penalty_rate
        higher_is_better: false
      - metric: unscored
        aggregation: !function utils.unscored
        higher_is_better: false

For each document, ``process_results`` grades the model's generation against the document (its
``answer``, ``bonus_points``, plot windows...; see :func:`bonusjudge_client.harness.request_fields`)
with ``POST /v1/grade`` and returns the document's share of each figure; the aggregations then
compute, over the task, BPC micro-averaged as the CharToM-QA paper does (covered points over
points, coverage-scored documents only), the penalty rate (documents with a defect over
defect-scored documents) and the number of documents whose coverage is unscored. An unscored
document, or one the service refused, leaves BPC's base and is counted in ``unscored``: it is
never a zero.

lm-evaluation-harness calls ``process_results`` once per document, in turn; the client behind it
is created on the first call and kept for the run (connections reused), and closed at exit.
"""

from __future__ import annotations

import atexit
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bonusjudge_client import harness
from bonusjudge_client.calls import JudgeInput
from bonusjudge_client.errors import ClientHTTPError, ClientInputError
from bonusjudge_client.sync import JudgeClient

__all__ = ["bpc", "make_process_results", "penalty_rate", "process_results", "unscored"]

logger = logging.getLogger(__name__)

_REFUSALS = frozenset({400, 413, 422})
"""Statuses with which the service refuses the item itself (not the caller or its own state)."""

ProcessResults = Callable[[Mapping[str, Any], Sequence[str]], dict[str, Any]]
"""lm-evaluation-harness's ``process_results(doc, results)``: a document's metric values."""


def make_process_results(
    url: str | None = None,
    api_key: str | None = None,
    *,
    judge: JudgeInput = None,
    context_window: int | None = None,
    timeout: float | None = None,
) -> ProcessResults:
    """A ``process_results`` grading through the service at ``url``.

    Args:
        url: The service (several replicas comma-separated); default ``BONUSJUDGE_URL``, else
            ``http://127.0.0.1:8000``.
        api_key: Sent as a bearer token; default ``BONUSJUDGE_API_KEY``.
        judge: The judge for every document (``{"model": "openai/gpt-4o"}``); unset fields keep
            the service's default.
        context_window: Which CharToM plot window (0, 1000, 2000) the defect judge reads;
            default the largest the document holds.
        timeout: Seconds per request (default 300).
    """
    clients: list[JudgeClient] = []

    def client() -> JudgeClient:
        if not clients:
            clients.append(JudgeClient(url, api_key=api_key, timeout=timeout))
            atexit.register(clients[0].close)
        return clients[0]

    def process(doc: Mapping[str, Any], results: Sequence[str]) -> dict[str, Any]:
        """Grade the document's first generation; its values for bpc, penalty_rate, unscored."""
        response = results[0] if results else None
        try:
            request = harness.grade_request(doc, response=response,
                                            context_window=context_window)
            result = client().grade(request, judge=judge)
        except (ValueError, ClientInputError) as exc:  # pydantic's ValidationError is one
            return _refused(doc, exc)
        except ClientHTTPError as exc:
            if exc.status not in _REFUSALS:
                raise  # the service or the caller's key, not this document: the run stops
            return _refused(doc, exc)
        tally = harness.Tally.of(result)
        return {
            "bpc": None if tally.points is None else [tally.covered, tally.points],
            "penalty_rate": tally.penalized,
            "unscored": int(tally.points is None),
        }

    return process


def _refused(doc: Mapping[str, Any], error: Exception) -> dict[str, Any]:
    """A document that could not be graded at all: unscored, with a warning saying why."""
    logger.warning("bonusjudge: document %s not graded: %s", doc.get("id"), error)
    return {"bpc": None, "penalty_rate": None, "unscored": 1}


process_results = make_process_results()
"""``process_results`` on the service of ``BONUSJUDGE_URL`` (and ``BONUSJUDGE_API_KEY``)."""


def bpc(items: Sequence[Sequence[int] | None]) -> float:
    """Bonus Point Coverage, micro, over the documents' ``[covered, points]`` (None: unscored).

    NaN when no document is scored.
    """
    value = harness.bpc(
        harness.Tally(item[0], item[1], None) for item in items if item is not None
    )
    return math.nan if value is None else value


def penalty_rate(items: Sequence[bool | None]) -> float:
    """Documents with a defect over defect-scored ones (None: not judged); NaN when none is."""
    value = harness.penalty_rate(harness.Tally(None, None, item) for item in items)
    return math.nan if value is None else value


def unscored(items: Sequence[int]) -> int:
    """How many documents are unscored (their coverage, or the whole item)."""
    return sum(items)
