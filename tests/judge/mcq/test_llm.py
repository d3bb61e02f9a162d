"""The judge-backed MCQ extractor: constrained to the item's labels, used only when rules fail."""

from __future__ import annotations

import pytest

from bonusjudge_client.wire.mcq import McqItem
from core.errors import JudgeOutputError
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.mcq.llm import JudgeExtractor
from judge.mcq.runner import score_items
from judge.providers.fake import FakeProvider

ITEM = McqItem(
    id="1",
    choices=["He is sad", "He is angry", "He is happy", "He is bored"],
    answer="B",
    response="Well, it could be anger, I'd lean towards the angry one.",
)


async def test_extractor_reads_and_is_constrained():
    fake = FakeProvider(outputs=[{"chosen": ["B"]}])
    extractor = JudgeExtractor(Grader(JudgeConfig(model="fake/j"), provider=fake))
    assert await extractor.extract(ITEM, ITEM.response) == {"B"}
    assert "(B) He is angry" in fake.calls[0].user
    schema = str(fake.calls[0].response_model.model_json_schema())
    assert "'A', 'B', 'C', 'D'" in schema


async def test_invalid_label_is_an_error_not_a_guess():
    fake = FakeProvider(outputs=[{"chosen": ["E"]}] * 3)
    extractor = JudgeExtractor(Grader(JudgeConfig(model="fake/j"), provider=fake))
    with pytest.raises(JudgeOutputError):
        await extractor.extract(ITEM, ITEM.response)


async def test_runner_uses_llm_only_for_unparseable():
    fake = FakeProvider(outputs=[{"chosen": ["B"]}])
    extractor = JudgeExtractor(Grader(JudgeConfig(model="fake/j"), provider=fake))
    strict = ITEM.model_copy(update={"id": "2", "response": "[[B]]"})
    results = await score_items([ITEM, strict], llm_extractor=extractor)
    methods = {r.id: r.method for r in results}
    assert methods == {"1": "llm", "2": "strict"}
    assert len(fake.calls) == 1
