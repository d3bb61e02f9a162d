import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from calibration.sets import (
    CALIBRATION_DIR_ENV,
    EXAMPLE_SETS,
    find_calibration_dir,
    load_example_set,
    load_set,
    load_shared_set,
    parse_scale,
    resolve_calibration_dir,
)
from core.errors import InputError


def _line(**overrides: Any) -> str:
    base = {
        "id": "a",
        "source": "unit",
        "question": "Why?",
        "reference": "Because.",
        "candidate": "Because so.",
        "human_score": 0.5,
        "score_scale": "0-1",
    }
    base.update(overrides)
    return json.dumps(base)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "kind", "lo", "hi", "level"),
    [
        ("binary: 1=correct, 0=incorrect (human)", "binary", 0, 1, "nominal"),
        ("0/1", "binary", 0, 1, "nominal"),
        ("mean of crowd ratings, 1-5 Likert (correctness)", "range", 1, 5, "ordinal"),
        ("0.2-1.0 (Chen et al. 2019 1-5 judgments /5, averaged)", "range", 0.2, 1.0, "interval"),
        (
            "TREC LiveQA 1-4: 1=incorrect/poor, 2=related/fair, 4=excellent",
            "range",
            1,
            4,
            "ordinal",
        ),
        (
            "key-point level, physician majority vote: 1=Entailment (point covered), "
            "0=Neutral (not covered), -1=Contradiction",
            "keypoint",
            -1,
            1,
            "nominal",
        ),
        ("1/0/-1", "keypoint", -1, 1, "nominal"),
        (
            "Comp = fraction of Must_have points judged Entailment by physician majority (0-1)",
            "range",
            0,
            1,
            "interval",
        ),
        ("1-5", "range", 1, 5, "ordinal"),
        ("0-1", "range", 0, 1, "interval"),
        ("mean rating 1-5", "range", 1, 5, "interval"),
    ],
)
def test_parse_scale(text: str, kind: str, lo: float, hi: float, level: str) -> None:
    scale = parse_scale(text)
    assert (scale.kind, scale.lo, scale.hi, scale.level) == (kind, lo, hi, level)


@pytest.mark.parametrize("text", ["", "   ", "excellent or not", "5-1"])
def test_parse_scale_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_scale(text)


def test_normalise_per_kind() -> None:
    likert = parse_scale("1-5 Likert")
    assert likert.normalize(1) == 0.0
    assert likert.normalize(4) == 0.75
    assert likert.denormalize(0.75) == 4.0
    kp = parse_scale("1/0/-1")
    assert [kp.normalize(v) for v in (1, 0, -1)] == [1.0, 0.0, 0.0]
    binary = parse_scale("0/1")
    assert binary.normalize(1) == 1.0
    with pytest.raises(ValueError, match="outside"):
        likert.normalize(6)
    with pytest.raises(ValueError, match="0 or 1"):
        binary.normalize(0.5)
    with pytest.raises(ValueError, match="covered"):
        kp.normalize(0.5)


def test_bad_lines_are_reported_with_numbers_and_the_rest_loads(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "set.jsonl",
        [
            _line(id="a"),  # 1 ok
            "{not json",  # 2
            _line(id="b", candidate=None),  # 3 candidate missing/invalid
            "",  # 4 blank: skipped silently
            _line(id="c", human_score=1.7),  # 5 out of range
            _line(id="a"),  # 6 duplicate of line 1
            _line(id="d", score_scale="1-5", human_score=3),  # 7 other scale
            "[1, 2]",  # 8 not an object
            _line(id="e", human_score="0.5"),  # 9 score as text
            _line(id="f", human_score=1.0),  # 10 ok
        ],
    )
    loaded = load_set(path)
    assert [item.id for item in loaded.items] == ["a", "f"]
    assert [item.line for item in loaded.items] == [1, 10]
    by_line = {p.line: p for p in loaded.problems}
    assert sorted(by_line) == [2, 3, 5, 6, 7, 8, 9]
    assert "invalid JSON" in by_line[2].message
    assert "candidate" in by_line[3].message
    assert "outside the scale" in by_line[5].message and by_line[5].id == "c"
    assert "duplicate id (first on line 1)" in by_line[6].message
    assert "one set has one scale" in by_line[7].message
    assert "JSON object" in by_line[8].message
    assert "human_score" in by_line[9].message
    assert "line 5 (id 'c')" in str(by_line[5])
    assert loaded.scale is not None and loaded.scale.kind == "range"
    assert len(loaded.sha256) == 64


def test_strict_mode_raises_with_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "set.jsonl", [_line(id="a"), _line(id="b", human_score=9)])
    with pytest.raises(InputError) as info:
        load_set(path, strict=True)
    assert info.value.line == 2
    assert "human_score" in str(info.value)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_set(tmp_path / "absent.jsonl")


def test_scale_override_and_missing_scale(tmp_path: Path) -> None:
    raw = json.loads(_line())
    del raw["score_scale"]
    path = _write(tmp_path / "s.jsonl", [json.dumps(raw)])
    assert "score_scale" in load_set(path).problems[0].message
    loaded = load_set(path, scale="0-1")
    assert len(loaded.items) == 1 and loaded.items[0].human_norm == 0.5


def test_unicode_line_separators_inside_strings_do_not_split_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    # U+0085 and U+2028 are legal unescaped in JSON strings; str.splitlines() would cut there.
    path.write_text(_line(candidate="a\u0085b\u2028c", human_score=1.0) + "\n", encoding="utf-8")
    loaded = load_set(path)
    assert loaded.problems == []
    assert loaded.items[0].candidate == "a\u0085b\u2028c"


def test_blank_question_falls_back_to_original_question(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "s.jsonl",
        [
            _line(id="a", question="", meta={"original_question": "What is X?"}),
            _line(id="b", question=""),
        ],
    )
    loaded = load_set(path)
    assert loaded.items[0].question == "What is X?"
    assert loaded.items[0].meta["question_from"] == "original_question"
    assert [p.line for p in loaded.problems] == [2]


def test_calibration_format_fields_and_groups(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "s.jsonl",
        [
            _line(
                id=7,
                references=["r1", "r2"],
                annotator_scores=[0.5, None, 1.0],
                dimension="belief",
                meta={"system": "gpt", "qid": "Q1", "extra": 3},
                key_points={"must_have": ["p1", "p2"], "nice_to_have": ["p3"]},
                unknown_field="kept",
            )
        ],
    )
    item = load_set(path).items[0]
    assert item.id == "7"
    assert item.references == ["r1", "r2"]
    assert item.annotator_scores == [0.5, None, 1.0]
    assert item.bonus_points == ["p1", "p2"]
    assert item.group("system") == "gpt"
    assert item.group("dimension") == "belief"
    assert item.group("extra") == "3"
    assert item.group("absent") is None
    assert item.question_key == "Q1"
    assert item.meta["unknown_field"] == "kept"


def test_kqa_labels_become_annotator_scores(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "k.jsonl",
        [
            _line(
                score_scale="1/0/-1",
                human_score=-1,
                key_point="Point",
                meta={"labels": ["Contradiction", "Neutral", "Contradiction"]},
            ),
            _line(id="b", score_scale="1/0/-1", human_score=1),  # key point missing
        ],
    )
    loaded = load_set(path)
    item = loaded.items[0]
    assert item.annotator_scores == [-1.0, 0.0, -1.0]
    assert item.human_norm == 0.0 and item.is_contradicted
    assert "key_point" in loaded.problems[0].message


def test_chartom_format_is_mapped_onto_the_same_model(tmp_path: Path) -> None:
    chartom = {
        "book_name": "Anna Karenina by Leo Tolstoy",
        "tom_dimension": "emotion",
        "context_0": "",
        "context_1000": "short plot",
        "context_2000": "long plot",
        "question": "How does Anna feel?",
        "answer": "She feels trapped.",
        "bonus_points": ["She feels trapped"],
        "misleading_choices": ["happy", "bored", "calm"],
        "response": "Trapped and anxious.",
        "human_score": 0.8,
    }
    path = _write(
        tmp_path / "c.jsonl",
        [
            json.dumps(chartom),
            json.dumps({**chartom, "id": "x1", "human_score": 3.0}),
            _line(id="cal", human_score=0.1),  # calibration format in the same file
        ],
    )
    loaded = load_set(path, chartom_context=1000)
    first = loaded.items[0]
    assert first.format == "chartom"
    assert first.id == "line-1"
    assert first.source == "Anna Karenina by Leo Tolstoy"
    assert first.reference == "She feels trapped."
    assert first.candidate == "Trapped and anxious."
    assert first.bonus_points == ["She feels trapped"]
    assert first.dimension == "emotion"
    assert first.context == "short plot"
    assert first.human_norm == 0.8
    assert first.meta["misleading_choices"] == ["happy", "bored", "calm"]
    assert loaded.items[1].format == "calibration"
    (problem,) = loaded.problems
    assert problem.line == 2 and problem.id == "x1"
    assert "no score_scale" in problem.message
    rescaled = load_set(path, scale="0-5")
    assert {item.id for item in rescaled.items} == {"line-1", "x1", "cal"}


def test_calibration_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path))
    assert find_calibration_dir() == tmp_path.resolve()
    assert find_calibration_dir(tmp_path / ".") == tmp_path.resolve()
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path / "nope"))
    with pytest.raises(InputError, match=CALIBRATION_DIR_ENV):
        find_calibration_dir()
    monkeypatch.delenv(CALIBRATION_DIR_ENV)
    monkeypatch.chdir(tmp_path)
    found = find_calibration_dir()
    # Falls back to ../shared/calibration of cwd, then of the repository root.
    assert found is None or found.name == "calibration"
    if found is None:
        with pytest.raises(InputError, match="no calibration folder"):
            resolve_calibration_dir()


def test_unknown_shared_set_name() -> None:
    with pytest.raises(InputError, match="unknown calibration set"):
        load_shared_set("nope")


@pytest.mark.parametrize(
    ("name", "kind"),
    [("example", "range"), ("example_binary", "binary"), ("example_keypoints", "keypoint")],
)
def test_example_sets_load_cleanly(name: str, kind: str) -> None:
    assert name in EXAMPLE_SETS
    loaded = load_example_set(name)
    assert loaded.problems == []
    assert 12 <= len(loaded.items) <= 20
    assert loaded.scale is not None and loaded.scale.kind == kind
    if name == "example":
        assert all(item.annotator_scores for item in loaded.items)
        assert {item.system for item in loaded.items} == {"sys_a", "sys_b"}
    if name == "example_keypoints":
        assert any(item.is_contradicted for item in loaded.items)


# --- issue 28: exact normalisation, CSV sets, annotators kept in meta ---------------------------


def test_normalize_is_exact_on_the_scale_as_written() -> None:
    kpqa = parse_scale("0.2-1.0 (Chen et al. 2019 1-5 judgments /5, averaged)")
    # In floats (0.6 - 0.2) / 0.8 is 0.49999999999999994: below a >= 0.5 cut.
    assert kpqa.normalize(0.6) == 0.5
    assert [kpqa.normalize(v) for v in (0.2, 0.36, 0.28, 0.52, 0.84, 1.0)] == [
        0.0, 0.2, 0.1, 0.4, 0.8, 1.0
    ]
    assert kpqa.denormalize(0.5) == 0.6
    assert parse_scale("1-5").normalize(4.4444444444444455) == pytest.approx(0.861111, abs=1e-6)


@given(st.integers(min_value=0, max_value=80))
def test_every_kpqa_step_normalises_to_its_exact_share(step: int) -> None:
    kpqa = parse_scale("0.2-1.0")
    raw = float(f"{0.2 + step / 100:.2f}")  # 0.20, 0.21, ..., 1.00 as a set stores them
    assert kpqa.normalize(raw) == step / 80
    assert kpqa.denormalize(kpqa.normalize(raw)) == raw


def _csv(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_csv_set_is_read_like_jsonl(tmp_path: Path) -> None:
    path = _csv(
        tmp_path / "mine.csv",
        "\ufeffItem_ID,Question,Reference,Response,human_score,bonus_points,annotator_scores,"
        "Rater Notes\n"
        'q1,Why did he leave?,He was afraid.,"Because he feared them, clearly.",4,'
        'He was afraid|He left,4|5|,first pass\n'
        'q2,Who won?,"Anna,\nin the end",Anna,5,"[""Anna won""]",,\n'
        "\n"
        "q3,What colour?,Red,Blue,six,,,\n"
        "q4,Again?,Yes,No,9,,,\n",
    )
    loaded = load_set(path, scale="1-5")
    assert [item.id for item in loaded.items] == ["q1", "q2"]
    first, second = loaded.items
    assert first.candidate == "Because he feared them, clearly."
    assert first.bonus_points == ["He was afraid", "He left"]
    assert first.annotator_scores == [4.0, 5.0, None]
    assert first.meta == {"Rater Notes": "first pass"}
    assert first.source == "mine" and first.human_norm == 0.75
    assert second.reference == "Anna,\nin the end" and second.bonus_points == ["Anna won"]
    # Rows are numbered by the line they start on (q2's reference spans lines 3-4).
    assert [(p.line, p.id) for p in loaded.problems] == [(6, "q3"), (7, "q4")]
    assert "human_score must be a number" in loaded.problems[0].message
    assert "outside the scale" in loaded.problems[1].message


def test_a_csv_takes_its_scale_from_a_column_and_tsv_and_semicolons_are_read(
    tmp_path: Path,
) -> None:
    tsv = _csv(
        tmp_path / "mine.tsv",
        "question\treference\tcandidate\thuman_score\tscore_scale\n"
        "Why?\tBecause.\tBecause so.\t1\t0/1\n",
    )
    loaded = load_set(tsv)
    assert loaded.scale is not None and loaded.scale.kind == "binary"
    assert loaded.items[0].id == "line-2" and loaded.items[0].candidate == "Because so."
    semicolons = _csv(
        tmp_path / "excel.csv",
        "question;answer;response;human_score\nWhy?;Because, so.;Because.;3\n",
    )
    item = load_set(semicolons, scale="1-5").items[0]
    assert item.reference == "Because, so." and item.human_norm == 0.5


def test_a_csv_without_a_required_column_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _csv(tmp_path / "mine.csv", "question,answer,score\nWhy?,Because.,1\n")
    with pytest.raises(InputError) as caught:
        load_set(path, scale="0/1")
    message = str(caught.value)
    assert "\n" not in message
    assert "missing column(s) response, human_score" in message
    assert caught.value.field == "columns"


def test_a_csv_without_a_scale_asks_for_one(tmp_path: Path) -> None:
    path = _csv(tmp_path / "mine.csv", "question,reference,response,human_score\nA?,B,C,1\n")
    with pytest.raises(InputError, match=r"no score_scale column.*--scale") as caught:
        load_set(path)
    assert caught.value.field == "scale"


def _nq301_line(**meta: Any) -> str:
    return _line(score_scale="0/1", human_score=1, meta=meta)


def test_annotators_in_meta_are_the_annotator_scores(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "held_out.jsonl",
        [
            # NQ-301: one verdict per annotator in meta.annotators, in the shapes sets use.
            _line(id="a", score_scale="0/1", human_score=1, meta={"annotators": [1, 1]}),
            _line(id="b", score_scale="0/1", human_score=0,
                  meta={"annotators": [{"annotator": "x", "judgment": "incorrect"},
                                       {"annotator": "y", "judgment": True}]}),
            _line(id="c", score_scale="0/1", human_score=1,
                  meta={"annotators": {"x": "correct", "y": None}}),
            # Names are not ratings: nothing is read from them.
            _line(id="d", score_scale="0/1", human_score=1, meta={"annotators": ["x", "y"]}),
        ],
    )
    items = load_set(path).by_id()
    assert items["a"].annotator_scores == [1.0, 1.0]
    assert items["a"].annotator_scores_from == "meta.annotators"
    assert items["b"].annotator_scores == [0.0, 1.0]
    assert items["c"].annotator_scores == [1.0, None]
    assert items["d"].annotator_scores is None and items["d"].annotator_scores_from is None


def test_the_rater_field_the_human_score_summarises_is_taken(tmp_path: Path) -> None:
    squality = {
        "rater_correctness": [60, 70, 80],
        "rater_coverage": [20, 30, 40],
        "rater_ids": ["r1", "r2", "r3"],
    }
    path = _write(
        tmp_path / "squality.jsonl",
        [
            _line(id="s1", score_scale="1-100", human_score=70, meta=squality),
            # Neither field averages to the score: which one it is cannot be told.
            _line(id="s2", score_scale="1-100", human_score=50, meta=squality),
            _line(id="s3", score_scale="1-100", human_score=30,
                  meta={"rater_correctness": [101, 20]}),  # off the scale: not ratings
        ],
    )
    items = load_set(path).by_id()
    assert items["s1"].annotator_scores == [60.0, 70.0, 80.0]
    assert items["s1"].annotator_scores_from == "meta.rater_correctness"
    assert items["s2"].annotator_scores is None
    assert items["s3"].annotator_scores is None


def test_calibration_dir_is_a_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder is read through Settings: a settings file's ``calibration_dir`` counts too."""
    monkeypatch.delenv(CALIBRATION_DIR_ENV, raising=False)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"calibration_dir": str(tmp_path)}), encoding="utf-8")
    monkeypatch.setenv("BONUSJUDGE_SETTINGS_FILE", str(settings))
    assert find_calibration_dir() == tmp_path.resolve()


@pytest.mark.process
def test_loading_a_set_or_a_mapping_imports_no_statistics_or_plotting_library() -> None:
    # The service's calibration routes load sets; sklearn, scipy.stats and matplotlib (about 3 s
    # of CPU together) wait until a statistic is computed or a figure drawn.
    code = (
        "import sys\n"
        "import calibration\n"
        "from calibration.mapping import load_mapping\n"
        "from calibration.sets import load_example_set\n"
        "load_example_set('example')\n"
        "heavy = ('sklearn', 'scipy.stats', 'matplotlib')\n"
        "print([m for m in heavy if m in sys.modules])\n"
        "from calibration.agreement import correlation\n"
        "correlation([1, 2, 3, 4], [1, 3, 2, 4], 'spearman')\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "True"]
