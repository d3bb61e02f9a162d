"""Issue 42.5: ``config_hash()`` (JSON and SHA-256 of every output field) ran twice per graded
item with a calibrated mapping, and once per item without; now once per judge."""

from __future__ import annotations

import pytest

from judge.config import JudgeConfig
from judge.engine import Grader
from tests.helpers.engine import levin_request


async def test_the_config_is_hashed_once_per_judge_not_per_item(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    original = JudgeConfig.config_hash

    def counted(self: JudgeConfig) -> str:
        calls.append(self.model)
        return original(self)

    grader = Grader(JudgeConfig(metrics=("rouge_l",)))
    try:
        monkeypatch.setattr(JudgeConfig, "config_hash", counted)
        results = [await grader.grade(levin_request(id=f"item-{n}")) for n in range(5)]
    finally:
        await grader.aclose()
    assert len({result.provenance.config_hash for result in results}) == 1
    assert results[0].provenance.config_hash == original(grader.config)
    assert len(calls) <= 1, calls
