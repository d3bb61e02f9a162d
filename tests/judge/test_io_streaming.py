"""ResultWriter for long runs: results not kept once written, and a rewrite in input order that
moves the file's own lines instead of re-serialising results held in memory."""

from __future__ import annotations

import json
from pathlib import Path

from judge.io import ResultWriter


def test_a_writer_that_does_not_keep_holds_only_what_it_read_back(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "old", "status": "scored"}\n')
    writer = ResultWriter(path, keep=False).open()
    assert set(writer.done) == {"old"}
    for n in range(50):
        writer.write({"id": str(n), "status": "scored"})
    assert set(writer.done) == {"old"}
    writer.close()
    assert len(path.read_text().splitlines()) == 51
    assert set(ResultWriter(path).open().done) == {"old", *map(str, range(50))}


def test_rewrite_sorted_orders_the_file_by_position_and_keeps_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    rows = [{"id": i, "x": "é"} for i in ("c", "a", "b", "z")]
    with ResultWriter(path, keep=False) as writer:
        for row in rows:
            writer.write(row)
    before = set(path.read_text(encoding="utf-8").splitlines())
    writer = ResultWriter(path, keep=False).open()
    order = {"a": 0, "b": 1, "c": 2}
    writer.rewrite_sorted(lambda item_id: order.get(item_id, len(order)))
    writer.write({"id": "d"})  # still open for appending afterwards
    writer.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b", "c", "z", "d"]
    assert set(lines[:4]) == before  # moved, not re-serialised
    assert not (tmp_path / "out.jsonl.tmp").exists()


def test_rewrite_sorted_puts_unreadable_lines_last(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "b"}\n{garbage\n{"id": "a"}\n')
    writer = ResultWriter(path).open()
    writer.rewrite_sorted({"a": 0, "b": 1}.__getitem__)
    writer.close()
    assert path.read_text().splitlines() == ['{"id": "a"}', '{"id": "b"}', "{garbage"]
