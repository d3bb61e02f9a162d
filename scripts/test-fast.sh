#!/usr/bin/env bash
# The developer's fast loop (issue 29): ruff, then every in-process test on every core (pytest-xdist),
# stopping at the first failure. Left out: the tests marked `process` (they start the CLI, an
# interpreter, bonusjudge serve, Redis or PostgreSQL). Hypothesis tests (the API fuzz among them)
# run the `fast` profile of tests/conftest.py: a tenth of their examples. scripts/test.sh, what
# CI runs, runs everything at full count.
# Arguments go to pytest, after the loop's own (scripts/test-fast.sh tests/judge -k cache; -n 0
# runs in one process; --hypothesis-profile full, the last one given, runs every example).
# Installs nothing: run scripts/setup.sh dev once.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/pytest ]; then
    echo "test-fast.sh: no .venv/bin/pytest; run scripts/setup.sh dev first" >&2
    exit 2
fi
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# A loop runs again and again: keep compiled modules (pytest's rewritten tests too) in the
# git-ignored __pycache__ folders even where the shell turns that off; collecting then takes 8 s
# less per worker.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check .
.venv/bin/pytest -n auto --dist worksteal -m "not process" -x -q \
    --hypothesis-profile fast "$@"
