#!/usr/bin/env bash
# Create .venv (if missing) and install bonusjudge with the tested pins in constraints.txt.
# Usage: scripts/setup.sh [EXTRAS]   e.g. scripts/setup.sh dev
# An install says so first and then shows pip's progress, a line per package it collects (the
# first one takes a few minutes); pip's whole output goes to $BONUSJUDGE_SETUP_LOG (default
# .venv/setup.log). Nothing is installed, or printed, while the install is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
stamp=".venv/.bonusjudge-installed${extras:+-$extras}"
log=${BONUSJUDGE_SETUP_LOG:-.venv/setup.log}

pip_install() {
  # pip's progress lines on the terminal as they come (the rest only in the log); on failure,
  # the end of the log, so a CI run shows why without the file.
  if ! .venv/bin/python -m pip install --progress-bar off "$@" 2>&1 | tee -a "$log" \
      | { grep --line-buffered -E '^(Collecting|Installing collected packages)' || true; }; then
    echo "setup: pip install failed; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}

# Reinstall only when the pins or the project metadata changed since the last install.
if [ ! -f "$stamp" ] || [ constraints.txt -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
    || [ client/pyproject.toml -nt "$stamp" ]; then
  mkdir -p "$(dirname "$log")"
  : > "$log"
  echo "setup: installing bonusjudge${extras:+[$extras]} into .venv with the pinned versions" \
    "(the first run takes a few minutes; pip's log: $log)"
  started=$SECONDS
  pip_install --upgrade pip
  # torch first, alone: pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
  pip_install -c constraints.txt "torch==2.13.0"
  # The light client (client/, its own distribution) with the project: bonusjudge depends on
  # it by name, and this is where that name is found.
  pip_install -c constraints.txt -e ./client -e ".${extras:+[$extras]}"
  touch "$stamp"
  echo "setup: installed in $((SECONDS - started)) s"
fi
