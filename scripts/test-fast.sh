#!/usr/bin/env bash
# The developer's fast loop (issue 29): ruff, then every in-process test, stopping at the first
# failure. Tests marked `process` (they start the CLI, an interpreter, bonusjudge serve, Redis or
# PostgreSQL) are left out; scripts/test.sh, what CI runs, runs everything. Arguments go to pytest
# (scripts/test-fast.sh tests/judge -k cache). Installs nothing: run scripts/setup.sh dev once.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/pytest ]; then
    echo "test-fast.sh: no .venv/bin/pytest; run scripts/setup.sh dev first" >&2
    exit 2
fi
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/pytest -m "not process" -x -q "$@"
