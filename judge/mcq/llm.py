"""The LLM answer extractor for multiple-choice runs: the judge reads what the rules could not.

Used only for rule-unparseable answers (``judge.mcq.runner`` calls it and reports its readings
as ``llm``). The response model constrains the reading to the item's own displayed labels, so the
judge cannot invent an option; an empty list means the answer committed to none.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from bonusjudge_client.wire.mcq import McqItem
from core.text import detect_language
from judge.config import JudgeConfig
from judge.engine import Grader


class McqReadingBase(BaseModel):
    """The option labels an answer chose (empty when it chose none)."""

    chosen: list[Any]


@lru_cache(maxsize=128)
def reading_model(labels: tuple[str, ...], multi_select: bool) -> type[McqReadingBase]:
    """The response model for one label set: ``chosen`` holds only those labels."""
    label_type = Literal[labels]  # type: ignore[valid-type]
    return create_model(
        "McqReading",
        __base__=McqReadingBase,
        chosen=(
            list[label_type],
            Field(
                max_length=len(labels) if multi_select else 1,
                description="The label(s) the answer chose; empty if it hedges or chose none.",
            ),
        ),
    )


class JudgeExtractor:
    """An ``LlmExtractor`` backed by the engine's judge (cached, retried).

    Args:
        grader: The engine.
        config: Judge configuration (default: the grader's); must be an LLM judge.
    """

    def __init__(self, grader: Grader, config: JudgeConfig | None = None) -> None:
        self.grader = grader
        self.config = config or grader.config

    async def extract(self, item: McqItem, response: str) -> set[str] | None:
        """Ask the judge which displayed label(s) ``response`` chose; None when it chose none."""
        labels = tuple(item.display_labels)
        model = reading_model(labels, bool(item.multi_select))
        question = item.tags.get("question") if item.tags else None
        reading, _ = await self.grader.ask(
            "mcq-extract",
            {
                "question": question,
                "choices": list(item.displayed_choices),
                "labels": list(labels),
                "response": response,
            },
            model,
            language=detect_language(response + " ".join(item.displayed_choices)),
            config=self.config,
        )
        chosen = {str(label) for label in reading.chosen}  # type: ignore[attr-defined]
        return chosen or None
