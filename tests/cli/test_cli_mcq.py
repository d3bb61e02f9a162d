"""``bonusjudge mcq``: its tables, files, exit codes and registration."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from cli import mcq as cli

DATA = Path(__file__).resolve().parents[2] / "judge" / "data"
CHARTOM = DATA / "mcq_example_chartom.jsonl"
TOMBENCH = DATA / "mcq_example_tombench.jsonl"


def test_cli_prints_group_tables_and_writes_files(tmp_path: Path) -> None:
    out, summary_path = tmp_path / "o.jsonl", tmp_path / "s.json"
    stdout, stderr = io.StringIO(), io.StringIO()
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(
        [
            str(TOMBENCH),
            "--out",
            str(out),
            "--summary",
            str(summary_path),
            "--aggregate",
            "majority",
            "--group-by",
            "tom_dimension,language",
        ]
    )
    assert cli.run(args, stdout=stdout, stderr=stderr) == 0
    text = stdout.getvalue()
    assert "tom_dimension" in text and "Non-literal communication" in text
    assert "accuracy 83.3%" in text and "ties 1" in text
    assert "\ntask " not in text  # only the requested breakdowns
    assert json.loads(summary_path.read_text("utf-8"))["items"] == 60
    assert stderr.getvalue() == ""


def test_cli_main_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(CHARTOM.read_text("utf-8") + "{oops\n", encoding="utf-8")
    assert cli.main([str(src), "--quiet"]) == 0
    assert (tmp_path / "in.mcq.jsonl").exists() and (tmp_path / "in.mcq.summary.json").exists()
    assert f"{src}:21: skipped: invalid JSON" in capsys.readouterr().err
    assert cli.main([str(src), "--quiet", "--fail-on-bad-lines"]) == 1
    assert cli.main([str(tmp_path / "missing.jsonl"), "--quiet"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "missing.mcq.jsonl").exists()  # a mistake creates no output
    with pytest.raises(SystemExit):
        cli.main([str(src), "--fuzzy-threshold", "lots"])


def test_register_adds_the_subcommand() -> None:
    parser = argparse.ArgumentParser(prog="bonusjudge")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["mcq", "x.jsonl", "--aggregate", "majority"])
    assert args.command == "mcq" and args.func is cli.run and args.aggregate == "majority"


def test_cli_writes_the_summary_next_to_out_never_beside_package_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A stand-in for the package's data folder holds the input; nothing may be written there.
    data = tmp_path / "pkg" / "data"
    data.mkdir(parents=True)
    src = data / "run.jsonl"
    src.write_text(CHARTOM.read_text("utf-8"), encoding="utf-8")
    monkeypatch.setattr(cli, "_PACKAGE_DATA", data.resolve(), raising=False)
    out = tmp_path / "results" / "scored.jsonl"
    assert cli.main([str(src), "--out", str(out)]) == 0
    summary = tmp_path / "results" / "scored.summary.json"
    assert json.loads(summary.read_text("utf-8"))["items"] == 20
    assert f"wrote summary to {summary}" in capsys.readouterr().out
    # Without --out, results and summary go to the working directory.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert cli.main([str(src)]) == 0
    assert sorted(p.name for p in work.iterdir()) == ["run.mcq.jsonl", "run.mcq.summary.json"]
    assert "wrote summary to run.mcq.summary.json" in capsys.readouterr().out
    assert [p.name for p in data.iterdir()] == ["run.jsonl"]
