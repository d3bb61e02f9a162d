"""The command line's shape: every subcommand registered, the judge options derived from the
configuration models (names, choices, help), and a quick `--help` that loads nothing heavy."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from typing import get_args

import pytest
from pydantic import BaseModel, SecretStr

from bonusjudge_client.wire.vocab import MetricName
from cli.common import JUDGE_FIELDS, Parser, add_judge_options, add_model_options
from cli.main import build_parser
from judge.config import JudgeConfig, JudgeOverrides, StructuredMode
from tests.helpers.processes import cli_env, run_cli

SUBCOMMANDS = ("grade", "serve", "calibrate", "mcq", "rubrics", "hash-key")


def judge_actions(command: str) -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[command]._actions}


@pytest.mark.process
def test_help_lists_every_subcommand() -> None:
    done = run_cli(["--help"], timeout=120)
    assert done.returncode == 0, done.stderr
    for command in SUBCOMMANDS:
        assert command in done.stdout, command
    for command in SUBCOMMANDS:
        sub = run_cli([command, "--help"], timeout=120)
        assert sub.returncode == 0 and "usage: bonusjudge " + command in sub.stdout, sub.stderr


@pytest.mark.process
def test_python_dash_m_cli_is_the_same_command() -> None:
    done = subprocess.run([sys.executable, "-m", "cli", "--help"], capture_output=True, text=True,
                          env=cli_env(), timeout=120, check=False)
    assert done.returncode == 0 and all(c in done.stdout for c in SUBCOMMANDS), done.stderr


@pytest.mark.parametrize("command", ["grade", "serve", "calibrate"])
def test_mode_accepts_exactly_the_structured_modes(command: str) -> None:
    mode = judge_actions(command)["mode"]
    assert mode.option_strings == ["--mode"]
    assert tuple(mode.choices or ()) == get_args(StructuredMode)
    parser = build_parser()
    head = [command, "x.jsonl"] if command in ("grade", "calibrate") else [command]
    tail = ["--out", "o.jsonl"] if command == "grade" else []
    for value in get_args(StructuredMode):
        assert parser.parse_args([*head, *tail, "--mode", value]).mode == value
    with pytest.raises(SystemExit) as refused:
        parser.parse_args([*head, *tail, "--mode", "xml"])
    assert refused.value.code == 2


def test_judge_options_are_the_config_fields() -> None:
    actions = judge_actions("grade")
    for name in JUDGE_FIELDS:
        info = JudgeConfig.model_fields[name]
        action = actions[name]
        assert action.default is None  # not given: the settings decide
        assert info.description
        assert info.description.rstrip(".").lower() in (action.help or "").lower()
    assert actions["cache"].option_strings == ["--no-cache"]
    assert actions["max_tokens"].option_strings == ["--max-tokens"]
    assert actions["max_tokens"].type is int and actions["timeout"].type is float
    assert actions["context_window"].option_strings == ["--context"]
    assert tuple(actions["context_window"].choices or ()) == (0, 1000, 2000)
    assert all(name in (actions["metrics"].help or "") for name in get_args(MetricName))


def test_switches_and_lists_parse_to_config_values() -> None:
    args = build_parser().parse_args(
        ["grade", "x.jsonl", "--out", "o", "--no-cache", "--length-control",
         "--metrics", "coverage,rouge_l", "--context", "1000"]
    )
    assert (args.cache, args.length_control, args.context_window) == (False, True, 1000)
    config = JudgeConfig(metrics=args.metrics, cache=args.cache)
    assert config.metrics == ("coverage", "rouge_l") and config.cache is False
    plain = build_parser().parse_args(["grade", "x.jsonl", "--out", "o"])
    assert plain.cache is None and plain.length_control is None


def test_server_options_are_the_per_request_overrides() -> None:
    from cli.grade.server import _local_only_options

    local = {dest for dest, _ in _local_only_options()}
    assert not local & set(JudgeOverrides.model_fields)
    assert {"mode", "api_base", "api_key_env", "cache_dir", "cache", "settings"} <= local
    flags = dict(_local_only_options())
    assert flags["cache"] == "--no-cache" and flags["mode"] == "--mode"


def test_a_field_without_a_command_line_spelling_is_refused() -> None:
    class Secret(BaseModel):
        key: SecretStr | None = None

    with pytest.raises(TypeError, match="key"):
        add_model_options(Parser(), Secret, ["key"])


def test_metrics_is_left_out_where_the_command_has_its_own() -> None:
    parser = Parser()
    dests = [a.dest for a in add_judge_options(parser, metrics=False)]
    assert "metrics" not in dests and "mode" in dests


@pytest.mark.process
def test_help_loads_no_heavy_library() -> None:
    code = textwrap.dedent(
        """
        import sys
        from cli.main import build_parser
        build_parser().format_help()
        heavy = ("litellm", "instructor", "torch", "transformers", "fastapi", "starlette",
                 "uvicorn", "sklearn", "matplotlib", "calibration")
        print(sorted(m for m in heavy if m in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=cli_env(), timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
