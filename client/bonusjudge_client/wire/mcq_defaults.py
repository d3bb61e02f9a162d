"""The answer extraction's default thresholds, in a module that imports nothing.

The command line's ``--help`` and the service's request schema show them; importing them from
:mod:`judge.mcq.extract` would load its patterns and the item models first.
"""

__all__ = ["DEFAULT_FUZZY_MARGIN", "DEFAULT_FUZZY_THRESHOLD"]

DEFAULT_FUZZY_THRESHOLD = 85.0
"""rapidfuzz score (0-100) an option's text must reach to be read as the answer."""

DEFAULT_FUZZY_MARGIN = 8.0
"""Points the best option must lead the runner-up by; ToM options often differ in one word."""
