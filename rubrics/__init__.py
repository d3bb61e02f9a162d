"""Versioned rubric files (prompts for the judge's tasks) and their validating loader."""

from rubrics.loader import LIBRARY, RenderedPrompt, RubricLibrary, fence, load_library, numbered
from rubrics.schema import Rubric, RubricFile, RubricPrompt

__all__ = [
    "LIBRARY",
    "RenderedPrompt",
    "Rubric",
    "RubricFile",
    "RubricLibrary",
    "RubricPrompt",
    "fence",
    "load_library",
    "numbered",
]
