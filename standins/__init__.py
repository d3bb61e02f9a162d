"""The stand-in judge server that ships with bonusjudge, for three providers' APIs.

The stand-in speaks OpenAI's chat completions, Anthropic's Messages API and Gemini's
``generateContent`` on one port, each as strict as the real API: an unknown request field gets
HTTP 400 in that API's own error shape (``OpenAIStandIn(strict=False)`` for lenient local
servers).

It ships because more than the tests use it: a harness author runs bonusjudge against it
without an API key (``python -m standins.openai_server``), as do the benchmarks (``bench/``) and
the cluster demo. Only the server and what it needs ship (:mod:`standins.schemas`,
:mod:`standins.lifecycle`); the tests' own helpers are the unshipped :mod:`tests.helpers`.

The public names are those of :mod:`standins.openai_server` (its command-line ``main``
aside) and :mod:`standins.schemas`, as their ``__all__`` lists them. They are loaded on first
access (PEP 562) rather than at import: the stand-in pulls in aiohttp and the openai SDK (most of
a second), which code that only needs :func:`schema_instance` or
:class:`standins.lifecycle.StartStop` should not pay for.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first access
    from standins.openai_server import *  # noqa: F403
    from standins.schemas import *  # noqa: F403

# Where the names come from; the light module first, so a schema name never loads the server.
_SOURCES = ("schemas", "openai_server")
_NOT_EXPORTED = frozenset({"main"})  # the stand-in's command line, not a test double


def _source(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def _public_names() -> list[str]:
    names = {n for s in _SOURCES for n in _source(s).__all__ if n not in _NOT_EXPORTED}
    # Constants, then classes, then functions, each alphabetical: how ruff sorts an __all__.
    return sorted(names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))


def __getattr__(name: str) -> Any:
    """Load ``__all__`` or a public name from its submodule on first access."""
    if name == "__all__":
        value: Any = _public_names()
    else:
        # A dunder probe, or a submodule not imported yet (``from standins import schemas``
        # asks here first), is no public name: answer at once, without loading the server.
        if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
            module = None
        else:
            module = next((m for m in map(_source, _SOURCES) if name in m.__all__), None)
        if module is None or name in _NOT_EXPORTED:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_public_names()})
