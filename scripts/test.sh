#!/usr/bin/env bash
# The test command of the README and of CI: install (if needed), lint, type-check, build the
# docs, test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/mypy client core rubrics judge calibration api cli standins tests/helpers
.venv/bin/lint-imports
# The docs site: a broken link or anchor fails here (strict). Built into a git-ignored folder;
# nothing is fetched (no web fonts, the offline plugin's shim vendored).
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir .site
# The harnesses the scorer and generated-client tests run (inspect_ai, lm-eval, promptfoo...),
# each in its own environment under .harness/, built once and rebuilt when its pins or the
# light client change; an install that fails stops here, never a skipped test.
scripts/harness-envs.sh
.venv/bin/pytest --run-process "$@"
