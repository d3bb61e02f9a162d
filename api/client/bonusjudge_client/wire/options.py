"""Option values shared by the command line, the service's query parameters and the config.

A list option (metrics, ``group_by`` fields) may be written comma-separated
(``coverage,rouge_l``), repeated (``?metrics=coverage&metrics=rouge_l``), or both; ``comma_list``
reads every form the same way, so the CLI, the routes and the judge configuration agree.
"""

from __future__ import annotations

from collections.abc import Iterable


def comma_list(value: str | Iterable[object]) -> tuple[str, ...]:
    """The names in ``value``: one comma-separated string, or several (each may hold commas).

    Blanks around a name are dropped, and so are empty names (``"a,,b,"`` is ``("a", "b")``).

    Args:
        value: A string such as ``"coverage, rouge_l"``, or a sequence of them (a repeated
            query parameter).
    """
    entries: Iterable[object] = [value] if isinstance(value, str) else value
    return tuple(
        part.strip() for entry in entries for part in str(entry).split(",") if part.strip()
    )
