#!/usr/bin/env bash
# The project's test command (README): lint, generated-task drift, Harbor lint, the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/mkb build --check
.venv/bin/harbor lint tasks/*
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
