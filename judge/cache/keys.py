"""Cache keys: everything that changes a cached value's content, and nothing else.

A judge call's key covers everything that changes the judge's output (model, base URL, sampling
settings, structured-output mode, rendered messages, rubric id + version + hash, response-schema
hash, cache format version) and nothing else: timeouts, retries and concurrency are left out, so
changing them still hits (style.md practice 5). A metric value's key covers the metric, its
parameters and the two texts. Every backend stores an entry under the same key, so a folder and
a Redis server can be compared entry by entry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from judge.config import CACHE_FORMAT_VERSION
from judge.identity import matcher_identity


def stable_hash(payload: Any) -> str:
    """sha256 hex digest of ``payload`` as canonical JSON (sorted keys, no ASCII escaping)."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@lru_cache(maxsize=256)
def schema_hash(response_model: type[Any] | None) -> str | None:
    """Hash of a pydantic response model's JSON schema (None for plain-text calls).

    Memoised per model class: generating a JSON schema costs ~5 ms and every judge call asks.
    """
    if response_model is None:
        return None
    return stable_hash(response_model.model_json_schema())[:16]


def judge_call_key(
    *,
    output_fields: dict[str, Any],
    messages: list[dict[str, str]],
    rubric: dict[str, Any],
    response_schema: str | None,
    tenant: str | None = None,
) -> str:
    """The cache key of one judge call.

    Args:
        output_fields: ``JudgeConfig.output_fields()``: model, base URL, mode, sampling.
        messages: The rendered messages, exactly as sent.
        rubric: Rubric id, version and content hash.
        response_schema: ``schema_hash`` of the response model, or None for text output.
        tenant: The caller the entry is kept for, when the cache is partitioned by caller
            (None: shared, and the key is the same as without it).
    """
    payload: dict[str, Any] = {
        "kind": "judge-call",
        "format": CACHE_FORMAT_VERSION,
        "config": output_fields,
        "messages": messages,
        "rubric": rubric,
        "schema": response_schema,
    }
    return _keyed(payload, tenant)


def metric_key(
    metric: str, params: dict[str, Any], response: str, reference: str,
    tenant: str | None = None,
) -> str:
    """The cache key of one metric value (e.g. BERTScore with its encoder and layer).

    Args:
        metric: The metric's name.
        params: What else changes its value (the encoder and layer, the segmenter).
        response: The text scored.
        reference: The text it is scored against.
        tenant: The caller the entry is kept for, when the cache is partitioned by caller
            (None: shared, and the key is the same as without it).
    """
    payload: dict[str, Any] = {
        "kind": "metric",
        "format": CACHE_FORMAT_VERSION,
        "metric": metric,
        "params": params,
        "response": response,
        "reference": reference,
    }
    return _keyed(payload, tenant)


def _keyed(payload: dict[str, Any], tenant: str | None) -> str:
    """The hash of ``payload``, kept apart for ``tenant`` when the cache is partitioned by caller.

    None (shared): the key is the one the payload had before caches were partitioned.
    """
    if tenant is not None:
        payload["tenant"] = tenant
    return stable_hash(payload)


def matcher_key(item: Mapping[str, Any], tenant: str | None = None) -> str:
    """The cache key of the embedded matcher's verdicts on one input.

    It covers the matcher's identity (version and digest of its parameters, lexicons and
    encoders) and every field of the input (``judge.matcher.MatchInput`` as a mapping: question,
    reference, points, response, language), so a new matcher or an edited point never reads an
    old verdict. A mapping, not the dataclass, so the cache never imports the matcher.
    ``tenant``: the caller the entry is kept for when the cache is partitioned by caller (None:
    shared, and the key is the same as without it).
    """
    payload: dict[str, Any] = {
        "kind": "matcher",
        "format": CACHE_FORMAT_VERSION,
        "judge": dict(matcher_identity()),
        "input": dict(item),
    }
    return _keyed(payload, tenant)
