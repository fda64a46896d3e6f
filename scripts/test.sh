#!/usr/bin/env bash
# The project's test command (README): lint, generated-task drift, Harbor lint, the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step() { echo "[test $((SECONDS - started)) s] $*"; }
step "ruff"
.venv/bin/ruff check .
step "mkb build --check (the committed tasks/ match the problem files)"
.venv/bin/mkb build --check
step "harbor lint"
if docker compose version >/dev/null 2>&1; then
  .venv/bin/harbor lint tasks/*/
else
  # Harbor parses the tasks' docker-compose.yaml with the Compose plugin; without it (CI here), every
  # default rule that does not need Compose (task validity is also tested under tests/adapters).
  rules="unknown-config-field shared-verifier artifact-log-overlap overlapping-artifacts
    unpinned-python-dependency verifier-runtime-install verifier-network-download agent-image-test-leak"
  .venv/bin/harbor lint $(for r in $rules; do printf -- '--select %s ' "$r"; done) tasks/*/
fi
step "pytest (the 15 slowest tests are listed at the end)"
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
