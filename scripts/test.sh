#!/usr/bin/env bash
# The project's test command (README): lint, generated-task drift, Harbor lint, the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step() { echo "[test $((SECONDS - started)) s] $*"; }
step "ruff"
.venv/bin/ruff check .
step "lint-imports (the layering contracts of pyproject.toml)"
.venv/bin/lint-imports
step "mkb build --check (the committed tasks/ match the problem files)"
.venv/bin/mkb build --check
step "harbor lint (scripts/lint-tasks.sh)"
bash scripts/lint-tasks.sh
step "pytest (the 15 slowest tests are listed at the end)"
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
