#!/usr/bin/env bash
# Create .venv (if missing) and install bonusjudge with the tested pins in constraints.txt.
# Usage: scripts/setup.sh [EXTRAS]   e.g. scripts/setup.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
stamp=".venv/.bonusjudge-installed${extras:+-$extras}"
# pip is quiet unless BONUSJUDGE_PIP_QUIET is set to "" (demo.sh shows pip's progress).
quiet=${BONUSJUDGE_PIP_QUIET--q}
# Reinstall only when the pins or the project metadata changed since the last install.
if [ ! -f "$stamp" ] || [ constraints.txt -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install $quiet --upgrade pip
  # torch first, alone: pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
  .venv/bin/python -m pip install $quiet -c constraints.txt "torch==2.13.0"
  .venv/bin/python -m pip install $quiet -c constraints.txt -e ".${extras:+[$extras]}"
  touch "$stamp"
fi
