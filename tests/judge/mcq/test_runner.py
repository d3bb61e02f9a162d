"""The file runner and the CLI, on the shipped example runs and on damaged copies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bonusjudge_client.wire.mcq import McqItem, McqResult, McqSummary
from core.errors import ConfigError, InputError
from judge.mcq.runner import read_items, score_file, score_file_async, score_items

DATA = Path(__file__).resolve().parents[3] / "judge" / "data"
CHARTOM = DATA / "mcq_example_chartom.jsonl"
TOMBENCH = DATA / "mcq_example_tombench.jsonl"


def _lines(path: Path) -> list[McqResult]:
    return [McqResult.model_validate_json(line) for line in path.read_text("utf-8").splitlines()]


def test_chartom_example(tmp_path: Path) -> None:
    out, summary_path = tmp_path / "out.jsonl", tmp_path / "summary.json"
    summary = score_file(CHARTOM, out, summary_path)
    results = _lines(out)
    assert len(results) == summary.items == 20
    assert summary.bad_lines == []
    assert summary.unparseable == 5
    assert summary.accuracy == pytest.approx(13 / 20)
    assert summary.methods == {"strict": 5, "lenient": 7, "fuzzy": 3, "llm": 0, "unparseable": 5}
    assert set(summary.breakdowns) == {"tom_dimension", "language"}
    assert summary.breakdowns["language"]["zh"].questions == 8
    assert McqSummary.model_validate_json(summary_path.read_text("utf-8")) == summary
    # Every unparseable line says why, and the Chinese hedge is among them.
    by_id = {r.id: r for r in results}
    assert by_id["ct-zh-004"].outcome == "unparseable"
    assert all(r.detail for r in results if r.outcome == "unparseable")
    assert by_id["ct-zh-002"].method == "lenient" and by_id["ct-zh-002"].correct


def test_tombench_example_majority_vote(tmp_path: Path) -> None:
    summary = score_file(TOMBENCH, tmp_path / "o.jsonl", tmp_path / "s.json", aggregate="majority")
    assert (summary.items, summary.questions, summary.unparseable) == (60, 12, 4)
    assert summary.accuracy == pytest.approx(10 / 12)
    assert summary.permutation is not None
    assert (summary.permutation.ties, summary.permutation.position_consistency) == (1, 0.25)
    assert summary.cross_lingual is not None and summary.cross_lingual.inconsistent == 2
    assert summary.coherent is not None and summary.coherent.coherent == 6
    assert set(summary.dimension_over_abilities) == {
        "Belief",
        "Emotion",
        "Intention",
        "Knowledge",
        "Non-literal communication",
    }
    mean = score_file(TOMBENCH, tmp_path / "o2.jsonl", tmp_path / "s2.json", aggregate="mean")
    assert mean.accuracy == pytest.approx(44 / 60)


def test_bad_lines_are_reported_with_line_numbers_and_the_rest_scored(tmp_path: Path) -> None:
    good = CHARTOM.read_text("utf-8").splitlines()
    first = json.loads(good[0])
    damaged = [
        good[0],
        "{not json",
        "",  # blank lines are skipped silently
        json.dumps({**first, "id": "x-1", "answer": "7"}),
        "[1, 2]",
        good[0],  # duplicate of line 1
        json.dumps({**first, "id": "x-2", "choices": ["only"], "labels": ["1"]}),
        *good[1:],
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(damaged) + "\n", encoding="utf-8")
    summary = score_file(src, tmp_path / "out.jsonl", tmp_path / "s.json")
    assert [bad.line for bad in summary.bad_lines] == [2, 4, 5, 6, 7]
    errors = {bad.line: bad.error for bad in summary.bad_lines}
    assert errors[2].startswith("invalid JSON")
    assert "answer: label '7' is not among the labels 1, 2, 3, 4" in errors[4]
    assert "expected a JSON object" in errors[5]
    assert "duplicate of line 1" in errors[6]
    assert "choices" in errors[7]
    assert summary.items == 20
    assert len((tmp_path / "out.jsonl").read_text("utf-8").splitlines()) == 20


def test_missing_input_and_bad_settings_raise_named_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        score_file(tmp_path / "nope.jsonl", tmp_path / "o", tmp_path / "s")
    with pytest.raises(ConfigError) as info:
        score_file(CHARTOM, tmp_path / "o", tmp_path / "s", fuzzy_threshold=150)
    assert info.value.field == "fuzzy_threshold"
    with pytest.raises(ConfigError, match="cannot group by"):
        score_file(CHARTOM, tmp_path / "o", tmp_path / "s", group_by=["colour"])


def test_non_utf8_input_is_an_input_error(tmp_path: Path) -> None:
    src = tmp_path / "latin1.jsonl"
    src.write_bytes(b'{"id": "caf\xe9"}\n')
    with pytest.raises(InputError, match="not UTF-8"):
        list(read_items(src))


class FakeExtractor:
    """Answers from a table keyed by response text; records every call."""

    def __init__(self, answers: dict[str, set[str] | Exception | None]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def extract(self, item: McqItem, response: str) -> set[str] | None:
        self.calls.append(response)
        answer = self.answers.get(response)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _item(response: str, item_id: str, answer: str = "B") -> McqItem:
    return McqItem(id=item_id, choices=["w", "x", "y", "z"], answer=answer, response=response)


async def test_llm_extractor_only_sees_rule_unparseable_answers() -> None:
    extractor = FakeExtractor(
        {
            "Hmm, the second one.": {"b"},
            "Could be B or D": {"B", "D"},
            "Timeout please": RuntimeError("provider down"),
            "Not an option": {"Q"},
            "Nothing": None,
        }
    )
    items = [
        _item("[[B]]", "strict"),
        _item("Hmm, the second one.", "llm"),
        _item("Could be B or D", "several"),
        _item("Timeout please", "failed"),
        _item("Not an option", "bogus"),
        _item("Nothing", "none"),
    ]
    results = {r.id: r for r in await score_items(items, llm_extractor=extractor)}
    assert "[[B]]" not in extractor.calls and len(extractor.calls) == 5
    assert (results["llm"].method, results["llm"].chosen, results["llm"].correct) == (
        "llm",
        ["B"],
        True,
    )
    assert results["several"].method == "unparseable"
    assert "several options" in (results["several"].detail or "")
    assert "llm extractor failed: RuntimeError: provider down" in (results["failed"].detail or "")
    assert "non-options" in (results["bogus"].detail or "")
    assert results["none"].outcome == "unparseable"


async def test_score_file_async_counts_llm_failures(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(_item("Timeout please", "f").model_dump_json() + "\n", encoding="utf-8")
    extractor = FakeExtractor({"Timeout please": RuntimeError("down")})
    summary = await score_file_async(src, tmp_path / "o", tmp_path / "s", llm_extractor=extractor)
    assert (summary.llm_extractor, summary.llm_failures, summary.unparseable) == (True, 1, 1)
