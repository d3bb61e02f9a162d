"""The promptfoo assertion of promptfooconfig.yaml: bonusjudge's, from the light client.

promptfoo calls ``get_assert(output, context)`` with the test's ``vars`` and the assertion's
``config`` in ``context``; see ``bonusjudge_client.promptfoo`` for what it returns.

promptfoo runs this file with ``PROMPTFOO_PYTHON`` when it is set, else with the first ``python3``
on the PATH, which is seldom a Python with the light client. So when ``bonusjudge_client`` is not
importable here, the assertion runs in the Python of this clone's environment (``.venv``, made by
``scripts/setup.sh`` or ``scripts/demo.sh``) instead, one process per test, with the same
arguments and answer. Elsewhere: set ``PROMPTFOO_PYTHON`` to a Python that has ``pip install
bonusjudge-client``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["get_assert"]

_CLONE_PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
"""The Python of the clone this example ships in, which has the light client installed."""

_RUN = (
    "import json, sys\n"
    "from bonusjudge_client.promptfoo import get_assert\n"
    "given = json.load(sys.stdin)\n"
    "json.dump(get_assert(given['output'], given['context']), sys.stdout)\n"
)


def _in_clone_python(output: str, context: dict[str, Any]) -> dict[str, Any]:
    """``get_assert`` run by the clone's Python: the same call, its answer read back."""
    if not _CLONE_PYTHON.exists():
        raise ImportError(
            f"{sys.executable} has no bonusjudge_client, and {_CLONE_PYTHON} does not exist: "
            "set PROMPTFOO_PYTHON to a Python with the light client (pip install "
            "bonusjudge-client), or run scripts/setup.sh in the clone"
        )
    done = subprocess.run(
        [str(_CLONE_PYTHON), "-c", _RUN],
        input=json.dumps({"output": output, "context": context}),
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bonusjudge assertion failed in {_CLONE_PYTHON}: {done.stderr[-2000:]}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


try:
    from bonusjudge_client.promptfoo import get_assert
except ImportError:
    get_assert = _in_clone_python
