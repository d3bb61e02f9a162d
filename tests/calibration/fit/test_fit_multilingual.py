"""The data of the matcher's Chinese model: parallel texts and the similarity scale."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from calibration.fit.multilingual import parallel_texts, similarity_scale
from core.errors import InputError


def test_parallel_texts_pair_each_english_text_with_its_chinese_version() -> None:
    english, chinese = parallel_texts()
    assert len(english) == len(chinese) >= 20
    assert english[0] == "Where will Xiaoming look for his chocolate first?"
    assert chinese[0] == "小明回来后会先去哪里找他的巧克力？"
    assert all(re.search(r"[\u4e00-\u9fff]", text) for text in chinese)


def test_similarity_scale_is_one_for_the_same_texts_and_above_one_for_chinese() -> None:
    english, chinese = parallel_texts()
    # The same texts give the same distances, so 1 whatever texts: six of them show it.
    assert similarity_scale(english[:6], english[:6]) == pytest.approx(1.0)
    # Chinese cosines sit nearer 1 than their English versions' (unrelated texts: 0.85 vs 0.80).
    assert 1.1 < similarity_scale(english, chinese) < 1.6


def test_a_bad_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "parallel.jsonl"
    row = {"id": "a", "language": "en", "question": "Q?", "choices": ["x"]}
    path.write_text(json.dumps(row) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"parallel.jsonl:2") as info:
        parallel_texts(path)
    assert info.value.line == 2
