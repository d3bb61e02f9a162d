"""The static part of every judge prompt comes first, so providers' prefix caching can serve it.

Issue 32.3: two items with the same question, reference, points, book and plot but different
responses must render messages, and the request bodies the direct transport sends (tool and
response-format definitions first, as providers render them), identical up to where the
response starts (its fence, or the response itself in the paper's unfenced prompts). Checked
for every shipped rubric that takes a response, in every language it has, and through the
engine in every structured mode.
"""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest

from bonusjudge_client.wire.grading import GradeRequest
from core.text import Language
from judge.config import JudgeConfig, StructuredMode
from judge.engine import Grader
from rubrics.loader import load_library
from rubrics.schema import TASK_VARIABLES
from standins import OpenAIStandIn
from standins.openai_server.prompt_cache import prompt_text

SAME: dict[str, dict[str, Any]] = {
    "en": {
        "question": "How does Levin feel right after Kitty refuses him?",
        "reference": "He feels humiliated and wants to go back to his estate.",
        "points": ["Levin feels humiliated", "He wants to return to his estate"],
        "book_name": "Anna Karenina by Leo Tolstoy",
        "context": "Kitty said: 'That cannot be... forgive me.' Levin bowed and left.",
        "choices": ["He is proud", "He is humiliated"],
        "labels": ["A", "B"],
    },
    "zh": {
        "question": "吉蒂拒绝列文之后，列文有什么感受？",
        "reference": "他感到羞辱，想回到自己的庄园。",
        "points": ["列文感到羞辱", "他想回到庄园"],
        "book_name": "《安娜·卡列尼娜》列夫·托尔斯泰",
        "context": "吉蒂说：“这不可能……请原谅我。”列文鞠了一躬，离开了。",
        "choices": ["他很骄傲", "他感到羞辱"],
        "labels": ["A", "B"],
    },
}
RESPONSES = {
    "en": ("He is ashamed and longs to flee to the countryside.", "He is happy."),
    "zh": ("他很羞愧，想逃回乡下。", "他很开心。"),
}
FENCE = "<<<BEGIN RESPONSE-"


def response_start(text: str, response: str) -> int:
    """Where the response starts in ``text``: its fence, or the response (unfenced prompts)."""
    at = text.find(FENCE)
    return at if at >= 0 else text.index(response)


def flat(messages: list[dict[str, str]]) -> str:
    """The messages as one text, in order."""
    return "\n".join(f"<|{m['role']}|>\n{m['content']}" for m in messages)


def responding_rubrics() -> list[tuple[str, Language]]:
    """(rubric id, language) of every shipped rubric that takes a response."""
    return [
        (rubric.id, language)
        for rubric in load_library()
        if "response" in TASK_VARIABLES[rubric.task]
        for language in rubric.prompts
    ]


def test_the_shipped_rubrics_are_all_checked() -> None:
    checked = {rubric for rubric, _ in responding_rubrics()}
    assert checked == {"chartom-coverage", "chartom-defects", "chartom-paper-coverage",
                       "chartom-paper-defects", "mcq-extract"}


@pytest.mark.parametrize(("rubric_id", "language"), responding_rubrics())
def test_every_rubric_renders_its_static_part_first(rubric_id: str, language: Language) -> None:
    library = load_library()
    rubric = library.get(rubric_id)
    wanted = TASK_VARIABLES[rubric.task]
    same = {name: value for name, value in SAME[language].items() if name in wanted}
    first, second = RESPONSES[language]
    one = flat(library.render(rubric, language, {**same, "response": first}).messages)
    two = flat(library.render(rubric, language, {**same, "response": second}).messages)
    cut = response_start(one, first)
    assert one[:cut] == two[:cut]
    # The static part holds every item-constant input: none of it comes after the response.
    for name in ("question", "reference", "choices", "points"):
        for text in (same[name] if isinstance(same.get(name), list) else [same.get(name)]):
            if text:
                assert text in one[:cut], (name, text)


def pair(language: str) -> list[tuple[str, GradeRequest]]:
    """Two items differing only in their response."""
    same = SAME[language]
    return [
        (str(n), GradeRequest(
            id=str(n), question=same["question"], reference=same["reference"],
            bonus_points=same["points"], book_name=same["book_name"], context=same["context"],
            response=response,
        ))
        for n, response in enumerate(RESPONSES[language])
    ]


def body_text(body: dict[str, Any]) -> str:
    """A request body as providers read its prompt: tool and format definitions, then messages
    (the stand-in's prefix-cache rule)."""
    return prompt_text(body)


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize(
    ("rubric", "mode"),
    [("chartom", mode) for mode in get_args(StructuredMode)] + [("chartom-paper", "tools")],
)
async def test_the_direct_transports_bodies_share_the_static_prefix(
    rubric: str, mode: str, language: str
) -> None:
    async with OpenAIStandIn(record_requests=20) as judge:
        config = JudgeConfig(
            model="openai/standin", api_base=judge.base_url, transport="direct", mode=mode,
            rubric=rubric, metrics=("coverage", "defects"), cache=False,
        )
        grader = Grader(config)
        try:
            results = [r async for r in grader.grade_many(pair(language))]
        finally:
            await grader.aclose()
        bodies = judge.requests
    assert all(r.status == "scored" for r in results), [r.unscored_reasons for r in results]
    assert len(bodies) == 4  # coverage and defects, for each response
    first, second = RESPONSES[language]
    point = SAME[language]["points"][0]
    for is_coverage in (True, False):
        texts = {
            response: body_text(body)
            for body in bodies
            for response in (first, second)
            if response in json.dumps(body, ensure_ascii=False)
            and (point in json.dumps(body, ensure_ascii=False)) == is_coverage
        }
        cut = response_start(texts[first], first)
        assert texts[first][:cut] == texts[second][:cut], ("coverage" if is_coverage else
                                                           "defects")
        assert cut > len(texts[first]) // 2  # most of the prompt is the static part
