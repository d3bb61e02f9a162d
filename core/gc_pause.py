"""Pausing the cyclic garbage collector while a large table of acyclic objects is built.

Python's collector runs whenever enough container objects have been made since the last run, and
its oldest generation walks every tracked object of the process. Building a table of millions of
small lists, tuples and frozensets (WordNet read for the lexicon build; the matcher's lexicons
parsed from JSON) sets it off again and again over a heap that only grows, and none of those
objects can be garbage: the collector then costs more than the building itself (reading WordNet:
3.9 s, 1.8 s without it; loading the matcher's English lexicon beside torch: 0.26 s, 0.09 s).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block, and enable it again after if it was on.

    Also a decorator (``@gc_paused()``: the function's whole call). Reference counting still
    frees everything as usual; only cycles wait for the next run after the block.
    Process-wide: keep the block to building one table.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
