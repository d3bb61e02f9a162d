"""A result is tied to the exact judge that made it (issue 28, part 1).

The embedded matcher's identity (version + digest of its parameters, lexicons and encoders) is
part of the configuration hash, so resumes, calibration grade files, mappings and caches never
mix two matchers; its verdicts are cached under that identity.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import judge.config as config_module
from bonusjudge_client.wire.grading import GradeRequest
from judge.cache import JudgeCache, matcher_key
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.identity import MATCHER_VERSION, MatcherIdentity, matcher_identity
from judge.matcher import MatchInput
from judge.resume import JudgeStamp, stale_reason

OLD = MatcherIdentity(version="matcher-v2", digest="0" * 16)


def test_identity_names_the_shipped_version_and_a_digest() -> None:
    identity = matcher_identity()
    assert identity["version"] == MATCHER_VERSION
    assert len(identity["digest"]) == 16 and identity.label.startswith(MATCHER_VERSION + "+")


def test_the_config_hash_changes_with_the_matcher(monkeypatch: pytest.MonkeyPatch) -> None:
    now = JudgeConfig()
    assert now.judge_version == MATCHER_VERSION
    current = now.config_hash()
    monkeypatch.setattr(config_module, "matcher_identity", lambda: OLD)
    before = JudgeConfig()
    assert before.judge_version == "matcher-v2"
    assert before.config_hash() != current


def test_an_llm_judge_and_a_metrics_only_run_carry_no_matcher_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = JudgeConfig(model="openai/gpt-4o")
    plain = JudgeConfig(metrics=("rouge_l",))
    hashes = (llm.config_hash(), plain.config_hash())
    monkeypatch.setattr(config_module, "matcher_identity", lambda: OLD)
    assert (llm.config_hash(), plain.config_hash()) == hashes
    assert llm.judge_version is None and plain.judge_version is None


def test_a_mapping_fitted_on_another_matcher_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from calibration.mapping import fit_mapping
    from calibration.sets import load_set
    from judge.mapping import MappingConfigMismatch, load_mapping

    dataset = load_set(Path("calibration/data/example.jsonl"))
    scores = {item.id: min(1.0, max(0.0, item.human_score / 5)) for item in dataset.items}
    monkeypatch.setattr(config_module, "matcher_identity", lambda: OLD)
    old = JudgeConfig(metrics=("coverage",))
    mapping = fit_mapping(
        dataset.items, scores, judge_config_hash=old.config_hash(), set_name="example",
        set_hash=dataset.sha256, metric="coverage", judge_version=old.judge_version,
    )  # fmt: skip
    path = mapping.save(tmp_path / "coverage.json")
    monkeypatch.undo()
    assert load_mapping(path, judge_config_hash=None).judge_version == "matcher-v2"
    with pytest.raises(MappingConfigMismatch):
        load_mapping(path, judge_config_hash=JudgeConfig(metrics=("coverage",)).config_hash())


def test_stale_reason_names_the_old_judge() -> None:
    config = JudgeConfig(metrics=("coverage",))
    stamp = JudgeStamp.of(config)
    stored = {
        "input_hash": "h",
        "provenance": {
            "judge": "embedded-matcher",
            "judge_version": "matcher-v2",
            "config_hash": config.config_hash(),  # a hand-edited file keeps the hash
            "metrics": ["coverage"],
        },
    }
    assert stale_reason(stored, "h", stamp) == f"graded by matcher-v2, now {MATCHER_VERSION}"
    stored["provenance"]["judge_version"] = MATCHER_VERSION  # type: ignore[index]
    assert stale_reason(stored, "h", stamp) is None
    stored["provenance"]["config_hash"] = "0213e3616871c1c1"  # type: ignore[index]
    assert "another judge configuration" in str(stale_reason(stored, "h", stamp))


REQUEST = GradeRequest(
    question="How does Levin feel after Kitty refuses him?",
    reference="He feels humiliated and wants to return to his estate.",
    bonus_points=["Levin feels humiliated", "He wants to return to his estate"],
    response="He is humiliated and goes home to his estate.",
)


async def test_matcher_verdicts_are_cached_under_its_identity(tmp_path: Path) -> None:
    config = JudgeConfig(metrics=("coverage",))
    first = Grader(config, cache=JudgeCache(tmp_path))
    cold = await first.grade(REQUEST)
    await first.aclose()
    assert cold.status == "scored" and first.stats.cache_hits == 0

    second = Grader(config, cache=JudgeCache(tmp_path))
    loads: list[JudgeConfig] = []

    async def refuse_to_load(cfg: JudgeConfig) -> None:
        loads.append(cfg)

    # A re-run answered from the cache loads no encoder and runs no matcher.
    second._matcher._load = refuse_to_load
    warm = await second.grade(REQUEST)
    await second.aclose()
    assert second.stats.cache_hits == 1 and loads == []
    assert warm.coverage is not None and cold.coverage is not None
    assert warm.coverage.verdicts == cold.coverage.verdicts


def test_the_matcher_key_changes_with_the_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    import judge.cache.keys as keys

    item = MatchInput(question="q", reference="r", points=["p"], response="a", language="en")
    now = matcher_key(dataclasses.asdict(item))
    monkeypatch.setattr(keys, "matcher_identity", lambda: OLD)
    assert matcher_key(dataclasses.asdict(item)) != now
