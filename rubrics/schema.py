"""The rubric file format: a validated pydantic model per YAML file in ``rubrics/library``.

A rubric is one judge task (coverage, defects, point extraction) in one family (``chartom``,
``chartom-paper``), with a system and a user template per language. Templates are Jinja, rendered
in a sandboxed environment with strict undefined variables (``rubrics.loader``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.text import Language

RubricTask = Literal["coverage", "defects", "extract_points", "mcq_extract"]
"""The judge task a rubric performs."""

TASK_VARIABLES: dict[str, frozenset[str]] = {
    "coverage": frozenset({"question", "reference", "points", "response", "book_name", "domain"}),
    "defects": frozenset({"question", "reference", "response", "context", "book_name", "domain"}),
    "extract_points": frozenset({"question", "reference", "context", "book_name", "domain"}),
    "mcq_extract": frozenset({"question", "choices", "labels", "response"}),
}
"""The variables each task's templates may use; anything else is a load error."""


class RubricPrompt(BaseModel):
    """The two messages of one language."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str = Field(min_length=1, description="System message template.")
    user: str = Field(min_length=1, description="User message template.")


class RubricFile(BaseModel):
    """The content of one rubric YAML file, as validated at load."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,62}$", description="Unique rubric id.")
    version: int = Field(ge=1, description="Bumped on every change of wording or output.")
    family: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,62}$", description="Rubric family.")
    task: RubricTask = Field(description="The judge task.")
    description: str = Field(min_length=1, description="What the rubric does, for listings.")
    output: Literal["structured", "text"] = Field(
        description="`structured`: a pydantic response model; `text`: parsed from plain text."
    )
    parser: Literal["paper_coverage", "paper_defects"] | None = Field(
        default=None, description="Plain-text parser for `text` output."
    )
    fallback_language: Language | None = Field(
        default=None,
        description="Language whose prompt serves items in a language the rubric lacks (the "
        "paper published English prompts only).",
    )
    source: str | None = Field(default=None, description="Where the wording comes from.")
    prompts: dict[Language, RubricPrompt] = Field(
        min_length=1, description="Templates per language."
    )


class Rubric(RubricFile):
    """A loaded rubric: the file's content plus where it came from and its content hash."""

    path: str = Field(description="The file it was loaded from.")
    hash: str = Field(description="sha256 of the file's bytes, first 16 hex digits.")

    def summary(self) -> dict[str, object]:
        """A short description for listings (id, version, hash, task, family, languages)."""
        return {
            "id": self.id,
            "version": self.version,
            "hash": self.hash,
            "family": self.family,
            "task": self.task,
            "output": self.output,
            "languages": sorted(self.prompts),
            "description": self.description,
        }
