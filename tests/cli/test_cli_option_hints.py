"""Every option a message names exists on the commands that show the message (issue 28).

``bonusjudge mcq --llm-model openai/gpt-4o`` answered "missing credentials ... name the variable
that holds the key with --api-key-env", then refused ``--api-key-env`` as an unrecognized
argument. This reads every string of the packages (docstrings aside) that names an option
(``--flag`` inside a sentence) and checks the option against the argparse parsers of the commands
that can show it.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.main import SUBCOMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("client", "core", "rubrics", "judge", "calibration", "api", "cli")

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
"""An option as a message names it (``--api-key-env``; ``--no-{name}`` is a template, not one)."""

JUDGING = ("grade", "serve", "calibrate", "mcq")
"""The subcommands that take a judge model on the command line (``mcq`` as ``--llm-model``)."""

SHOWN_BY: dict[str, tuple[str, ...]] = {
    "cli/grade/__init__.py": ("grade",),
    "cli/grade/local.py": ("grade",),
    "cli/grade/report.py": ("grade",),
    "cli/grade/server.py": ("grade",),
    "cli/serve.py": ("serve",),
    "cli/mcq.py": ("mcq",),
    "cli/calibrate.py": ("calibrate",),
    "cli/openapi.py": ("openapi",),
    "cli/main.py": ("",),
    # The judge options' group and the settings: the subcommands built on add_judge_options.
    "cli/common.py": ("grade", "serve", "calibrate"),
    # Preflight and the transports: every command that checks a judge before using it.
    "judge/providers/base.py": JUDGING,
    "judge/providers/litellm.py": JUDGING,
    "judge/providers/direct.py": JUDGING,
    "calibration/sets/tables.py": ("calibrate",),
}
"""Which commands show a module's messages (``""``: the top-level ``bonusjudge``). A module not
listed must name only options some subcommand has, unless it is a script with its own parser
(``python -m calibration.fit.lexicon``), whose own flags it must name."""


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every ``bonusjudge`` parser, built in full: ``""`` is the top level."""
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {"": top, **sub.choices}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return set(parser._option_string_actions)


def messages(path: Path) -> Iterator[tuple[int, str]]:
    """The strings of a module that may reach a user, with their line: no docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    # One walk: ast.walk yields a node before its children, so a docstring's statement and an
    # f-string are seen (and their strings put in ``skip``) before the strings themselves.
    for node in ast.walk(tree):
        # Docstrings and attribute docstrings: a string standing alone as a statement.
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in node.values)
            yield node.lineno, "".join(
                part.value if isinstance(part, ast.Constant) else "{}" for part in node.values
            )
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in skip
        ):
            yield node.lineno, node.value


def own_flags(path: Path) -> set[str]:
    """The flags a script module defines for its own parser (the strings that are one flag)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and FLAG.fullmatch(node.value)
    }


@functools.cache
def named_options() -> tuple[tuple[str, int, str], ...]:
    """``(module, line, option)`` for every option named inside a sentence.

    Scanned once per session (parsing every module of the packages is most of these tests'
    cost); the sources do not change while the tests run.
    """
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "testing" in path.parts:
                continue  # the stand-in servers' own command lines, not bonusjudge's
            module = path.relative_to(ROOT).as_posix()
            for line, text in messages(path):
                if not re.search(r"\s", text):
                    continue  # one word: an argv element or a flag being defined, not a message
                found.extend((module, line, flag) for flag in FLAG.findall(text))
    return tuple(found)


def test_the_scan_finds_the_messages_it_is_about() -> None:
    found = {(module, flag) for module, _, flag in named_options()}
    assert ("judge/providers/litellm.py", "--api-key-env") in found
    assert ("judge/providers/direct.py", "--api-key-env") in found
    assert ("judge/providers/direct.py", "--transport") in found
    assert ("cli/grade/server.py", "--server") in found
    assert {command.name for command in SUBCOMMANDS} <= set(parsers())


def test_every_option_a_message_names_exists_where_it_is_shown() -> None:
    commands = parsers()
    anywhere = set().union(*(options(parser) for parser in commands.values()))
    missing = []
    for module, line, flag in named_options():
        shown_by = SHOWN_BY.get(module)
        if shown_by is not None:
            missing += [
                f"{module}:{line}: {flag} (bonusjudge {name})".replace(" )", ")")
                for name in shown_by if flag not in options(commands[name])
            ]
        elif re.search(r"\b(ArgumentParser|fit_parser)\(", (ROOT / module).read_text("utf-8")):
            # A script with a parser of its own (a fit's is made by fit_parser).
            if flag not in own_flags(ROOT / module):
                missing.append(f"{module}:{line}: {flag} (its own parser)")
        elif flag not in anywhere:
            missing.append(f"{module}:{line}: {flag} (no subcommand)")
    assert missing == []


@pytest.mark.parametrize("command", JUDGING)
def test_every_judging_command_takes_the_options_the_judge_messages_suggest(
    command: str,
) -> None:
    # The one case of the issue, spelled out: the preflight's hints, on every judging command.
    assert {"--api-key-env", "--api-base", "--transport"} <= options(parsers()[command])
