"""Test doubles that ship with bonusjudge: an OpenAI-compatible stand-in judge server.

The stand-in is strict like OpenAI's API: a request with a top-level field outside
:data:`OPENAI_CHAT_PARAMS` gets HTTP 400 (``OpenAIStandIn(strict=False)`` for lenient servers).

Tests, benchmarks (``bench/``) and the fault-injection suite import from here, so the stand-in
is part of the package rather than of the test tree.

Names are loaded on first access (PEP 562) rather than at import: ``python -m
judge.testing.openai_server`` would otherwise find its own module already imported by this
package and warn, and code that only needs :func:`schema_instance` does not pay for aiohttp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judge.testing.openai_server import (
        FAULT_KINDS,
        OPENAI_CHAT_PARAMS,
        FaultKind,
        FaultPlan,
        Handler,
        OpenAIStandIn,
        Reply,
        ReplyLike,
        StandInStats,
        ToolCall,
    )
    from judge.testing.schemas import (
        SchemaError,
        find_embedded_schema,
        invalid_instance,
        schema_instance,
    )

__all__ = [
    "FAULT_KINDS",
    "OPENAI_CHAT_PARAMS",
    "FaultKind",
    "FaultPlan",
    "Handler",
    "OpenAIStandIn",
    "Reply",
    "ReplyLike",
    "SchemaError",
    "StandInStats",
    "ToolCall",
    "find_embedded_schema",
    "invalid_instance",
    "schema_instance",
]

_SCHEMA_NAMES = frozenset(
    {"SchemaError", "find_embedded_schema", "invalid_instance", "schema_instance"}
)


def __getattr__(name: str) -> Any:
    """Load a public name from its submodule on first access."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = "schemas" if name in _SCHEMA_NAMES else "openai_server"
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
