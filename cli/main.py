"""The ``bonusjudge`` command: the parser of every subcommand and ``main``.

``grade`` grades a CharToM-format file (resumable), ``serve`` starts the HTTP service, ``mcq``
scores multiple-choice runs, ``calibrate`` measures agreement with human ratings, ``rubrics``
lists the rubric library and ``hash-key`` hashes an API key for the settings. Every subcommand is
imported plainly: none is dropped when something is missing. The heavy libraries (litellm,
torch, FastAPI, uvicorn) load only when a command runs, so ``--help`` stays quick.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cli import calibrate, grade, mcq, serve
from cli.common import PROG, VERBOSE_HELP, Parser, configure_logging
from core.errors import ConfigError, InputError, JudgeError


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = Parser(prog=PROG, description="Grade free-form answers by bonus-point coverage.")
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    grade.register(sub)
    serve.register(sub)

    rubrics = sub.add_parser("rubrics", help="list the rubric library")
    rubrics.set_defaults(func=_cmd_rubrics)

    hash_key = sub.add_parser("hash-key", help="print the sha256 digest of an API key")
    hash_key.add_argument("key")
    hash_key.set_defaults(func=_cmd_hash_key)

    mcq.register(sub)
    calibrate.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bonusjudge`` console script; the exit code.

    0 done; 2 a mistake (an invalid option, setting or input, a file that cannot be used, a judge
    that cannot work), reported on one line; 1 another bonusjudge error; 130 interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(verbose=getattr(args, "verbose", False))
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
