"""``bonusjudge openapi``: the service's OpenAPI document, built without starting the service.

The repository keeps it as ``docs/openapi.json``, and a test fails when the served document
drifts from it, so a change to the contract is a reviewed diff.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``openapi`` subcommand to the main ``bonusjudge`` parser."""
    parser = subparsers.add_parser(
        "openapi", help="print the service's OpenAPI document (docs/openapi.json)",
        description="Print the OpenAPI document the service serves at /openapi.json, built "
        "without starting it (it does not depend on the settings). The repository keeps it "
        "as docs/openapi.json: after changing the API, run `bonusjudge openapi --out "
        "docs/openapi.json` and review the diff.",
    )
    parser.add_argument("--out", metavar="FILE", help="write it to FILE instead of stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the OpenAPI document the service serves, or write it to ``--out``."""
    from api.app import openapi_document
    from api.openapi import render

    text = render(openapi_document())
    if args.out is None:
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text)
    return 0
