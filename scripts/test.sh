#!/usr/bin/env bash
# The test command of the README and of CI: install (if needed), lint, type-check, test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/mypy core rubrics judge calibration api cli
.venv/bin/lint-imports
.venv/bin/pytest "$@"
