"""The ``bonusjudge`` command: the parser of every subcommand and ``main``.

``grade`` grades a CharToM-format file (resumable), ``serve`` starts the HTTP service, ``mcq``
scores multiple-choice runs, ``calibrate`` measures agreement with human ratings, ``rubrics``
lists the rubric library, ``hash-key`` hashes an API key for the settings and ``openapi`` prints
the service's OpenAPI document.

Start-up is paid on every invocation, so ``main`` builds only what the command line asks for:
the subcommand named in ``argv`` gets its full parser (its module is imported, and with it the
configuration models its options are derived from); every other subcommand is listed by name and
one-line help from :data:`SUBCOMMANDS` without importing anything. ``bonusjudge --help`` thus
loads no pydantic at all, and ``bonusjudge grade --help`` loads what ``grade`` needs and nothing
of ``serve``, ``mcq`` or ``calibrate``. Every subcommand is still imported plainly when it runs:
none is dropped when something is missing. The heavy libraries (litellm, torch, FastAPI,
uvicorn) load only when a command runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple

from cli.common import PROG, VERBOSE_HELP, Parser, configure_logging


class Subcommand(NamedTuple):
    """One ``bonusjudge`` subcommand: where it is registered, and its line in ``--help``.

    Attributes:
        name: What users type (``hash-key``).
        module: The ``cli`` module whose ``register(subparsers)`` adds it; None for the small
            commands defined in this module.
        help: The one-line help; the module's ``register`` passes the same text (a test keeps
            them equal), so the top-level ``--help`` reads the same built either way.
    """

    name: str
    module: str | None
    help: str


SUBCOMMANDS = (
    Subcommand("grade", "cli.grade", "grade a JSONL file of CharToM-format items"),
    Subcommand("serve", "cli.serve", "start the HTTP grading service"),
    Subcommand("rubrics", None, "list the rubric library"),
    Subcommand("hash-key", None, "print the sha256 digest of an API key"),
    Subcommand(
        "mcq", "cli.mcq",
        "score multiple-choice answers (ToMBench, CogToM, XToM, ToMValley, CharToM MC)",
    ),
    Subcommand("calibrate", "cli.calibrate", "correlate judges and metrics with human ratings"),
    Subcommand(
        "openapi", "cli.openapi", "print the service's OpenAPI document (docs/openapi.json)"
    ),
)
"""Every subcommand, in the order ``--help`` lists them."""


def _cmd_rubrics(args: argparse.Namespace) -> int:
    """Print one line per rubric of the library: id, version, hash, family, task, prompts."""
    from rubrics import load_library

    library = load_library()
    for rubric in library:
        print(
            f"{rubric.id:<26} v{rubric.version}  {rubric.hash}  {rubric.family:<14} "
            f"{rubric.task:<15} {','.join(sorted(rubric.prompts))}"
        )
    return 0


def _cmd_hash_key(args: argparse.Namespace) -> int:
    """Print the ``sha256:`` digest of an API key, as the settings accept it."""
    import hashlib

    print("sha256:" + hashlib.sha256(args.key.encode()).hexdigest())
    return 0


def _register(sub: argparse._SubParsersAction, command: Subcommand) -> None:  # type: ignore[type-arg]
    """Add ``command`` with all its options."""
    if command.module is not None:
        importlib.import_module(command.module).register(sub)
    elif command.name == "rubrics":
        sub.add_parser("rubrics", help=command.help).set_defaults(func=_cmd_rubrics)
    else:
        hash_key = sub.add_parser("hash-key", help=command.help)
        hash_key.add_argument("key")
        hash_key.set_defaults(func=_cmd_hash_key)


def build_parser(only: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The argument parser of the ``bonusjudge`` command.

    Args:
        only: With ``lazy``, the one subcommand to build in full (None: none, as for
            ``bonusjudge --help`` or a mistyped command).
        lazy: Build only ``only`` in full and list the others by name and help (what ``main``
            does); False builds every subcommand in full (the parser tests inspect).
    """
    parser = Parser(prog=PROG, description="Grade free-form answers by bonus-point coverage.")
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in SUBCOMMANDS:
        if not lazy or command.name == only:
            _register(sub, command)
        else:
            # Listed only: parsing never reaches it, since argv names another subcommand.
            sub.add_parser(command.name, help=command.help)
    return parser


def chosen_subcommand(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is one (None when there is none).

    The top-level parser takes no option with a value (only ``--verbose`` and ``--help``), so the
    first word not starting with ``-`` is where the subcommand must be.
    """
    names = {command.name for command in SUBCOMMANDS}
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in names else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bonusjudge`` console script; the exit code.

    0 done; 2 a mistake (an invalid option, setting or input, a file that cannot be used, a judge
    that cannot work), reported on one line; 1 another bonusjudge error, or invalid input lines
    skipped with ``--fail-on-bad-lines`` (``grade``, ``mcq``); 3 ``grade`` stopped at
    its cost cap (``--max-cost``/``--max-calls``: what finished is written, a re-run with a
    higher cap resumes); 130 interrupted.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(chosen_subcommand(words), lazy=True)
    args = parser.parse_args(words)
    configure_logging(verbose=getattr(args, "verbose", False))
    # Imported once a command runs: the error tree loads pydantic, which --help never needs.
    from core.errors import ConfigError, InputError, JudgeError

    try:
        return int(args.func(args) or 0)
    except JudgeError as exc:
        field = getattr(exc, "field", None)
        print(
            f"{PROG}: error: {exc}" + (f" [{field}]" if field and field not in str(exc) else ""),
            file=sys.stderr,
        )
        return 2 if isinstance(exc, ConfigError | InputError) else 1
    except OSError as exc:
        # A file or disk problem (missing, unwritable, full): one line naming the file.
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{PROG}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; finished results are saved (re-run to resume)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
