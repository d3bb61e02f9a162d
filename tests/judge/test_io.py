"""Input reading (line-numbered problems) and the resumable, tail-recovering result writer."""

from __future__ import annotations

import json

from core.jsonl import BadLine
from judge.io import ResultWriter, chartom_to_request, read_items

ITEM = {
    "book_name": "B",
    "tom_dimension": "belief",
    "context_0": "",
    "context_1000": "short plot",
    "context_2000": "long plot",
    "question": "Q?",
    "answer": "A.",
    "bonus_points": ["A"],
    "misleading_choices": ["x"],
    "response": "A!",
}


def test_chartom_mapping_picks_window_and_keeps_extras():
    req = chartom_to_request(ITEM, 1000)
    assert req.reference == "A." and req.context == "short plot" and req.context_window == 1000
    assert req.metadata["misleading_choices"] == ["x"]
    assert chartom_to_request(ITEM).context == "long plot"
    assert chartom_to_request(ITEM, 0).context is None


def test_read_items_reports_bad_lines_and_loads_the_rest(tmp_path):
    path = tmp_path / "in.jsonl"
    lines = [
        json.dumps({**ITEM, "id": "a"}),
        "{not json",
        json.dumps({**ITEM, "id": "b", "question": "  "}),
        "",
        json.dumps({**ITEM, "id": "c", "bonus_points": ["x"] * 40}),
        json.dumps({**ITEM, "id": "a"}),
        json.dumps({k: v for k, v in ITEM.items()}),
    ]
    path.write_text("\n".join(lines) + "\n")
    out = list(read_items(path))
    good = [e for e in out if not isinstance(e, BadLine)]
    bad = [e for e in out if isinstance(e, BadLine)]
    assert [g[0] for g in good] == ["a", "7"]  # no id: the line number
    assert [(p.line, p.field) for p in bad] == [
        (2, None),
        (3, "question"),
        (5, "bonus_points"),
        (6, "id"),
    ]


def test_an_empty_response_is_an_item_not_a_bad_line(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({**ITEM, "id": "e", "response": " "}) + "\n")
    (entry,) = list(read_items(path))
    assert not isinstance(entry, BadLine) and entry[1].response == " "


def test_writer_resumes_and_drops_torn_tail(tmp_path):
    path = tmp_path / "out.jsonl"
    with ResultWriter(path) as w:
        w.write({"id": "1", "status": "scored"})
        w.write({"id": "2", "status": "unscored"})
    with open(path, "a") as handle:
        handle.write('{"id": "3", "sta')  # killed mid-line
    w = ResultWriter(path).open()
    assert w.recovered_tail and set(w.done) == {"1", "2"}
    w.write({"id": "3", "status": "scored"})
    w.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["1", "2", "3"]


def test_writer_rewrite_is_atomic_and_keeps_only_given(tmp_path):
    path = tmp_path / "out.jsonl"
    w = ResultWriter(path).open()
    w.write({"id": "1", "status": "scored"})
    w.write({"id": "2", "status": "unscored"})
    w.rewrite([o for o in w.done.values() if o["status"] == "scored"])
    w.write({"id": "2", "status": "scored"})
    w.close()
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["1", "2"]
    assert not (tmp_path / "out.jsonl.tmp").exists()


def test_writer_keeps_good_lines_after_a_corrupt_middle_line(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "1"}\n{garbage\n{"id": "3"}\n{"id": "4", "x')
    w = ResultWriter(path).open()
    assert set(w.done) == {"1", "3"}
    assert w.corrupt_lines == [2] and w.recovered_tail
    w.close()
    assert path.read_text().endswith('{"id": "3"}\n')


def test_missing_reference_is_named_by_the_key_the_line_uses(tmp_path):
    # GradeRequest reads CharToM's `answer` as `reference`; the error names the user's key.
    chartom = {k: v for k, v in ITEM.items() if k != "answer"}
    plain = {"question": "Q?", "response": "A!"}
    lines = [chartom, plain, {**plain, "reference": None}, {**plain, "answer": ""}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(obj) + "\n" for obj in lines))
    problems = list(read_items(path))
    assert all(isinstance(p, BadLine) for p in problems)
    assert [p.field for p in problems] == ["answer", "answer", "reference", "answer"]
    assert str(problems[0]) == "line 1 (field answer): answer: Field required"
