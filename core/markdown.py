"""Markdown tables, for the reports and benchmark tables that print them.

The calibration report, the cascade fit's out-of-fold tables and the benchmarks' result tables
all write the same pipe tables; the cells are formatted by each caller, the table's syntax here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["table", "table_row"]


def table_row(*cells: object) -> str:
    """One row of a Markdown table: ``| a | b |`` (each cell as ``str()`` gives it)."""
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def table(header: Sequence[object], rows: Iterable[Iterable[object]] = ()) -> list[str]:
    """A Markdown table's lines: the ``header`` row, its rule, then one line per row of ``rows``."""
    return [table_row(*header), "|" + "---|" * len(header), *(table_row(*row) for row in rows)]
