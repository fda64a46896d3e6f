#!/usr/bin/env bash
# The project's test command (README): lint, generated-task drift, Harbor lint, the test suite.
# pytest runs on parallel workers (pytest-xdist; tests/conftest.py says which tests share a worker);
# MKB_TEST_WORKERS sets how many (default: one more than the CPUs, since many tests wait on
# subprocesses). `mkb build --check` and Harbor's lint run beside pytest; their output follows it.
# The oracle compile tier (every oracle kernel compiled for sm_90a, tests marked oracle_compile) is left
# out: scripts/test-oracle-compile.sh runs it, and .ci/run runs both. Arguments go to pytest.
# Exits non-zero when any step fails (pytest's "no tests ran", exit 5, included).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step() { echo "[test $((SECONDS - started)) s] $*"; }
workers=${MKB_TEST_WORKERS:-$(($(nproc) + 1))}
step "ruff"
.venv/bin/ruff check .
step "lint-imports (the layering contracts of pyproject.toml)"
.venv/bin/lint-imports
checks_log=$(mktemp)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -f "$checks_log"' EXIT
step "mkb build --check and harbor lint (scripts/lint-tasks.sh), beside pytest"
(
  echo "[mkb build --check] the committed tasks/ match the problem files"
  .venv/bin/mkb build --check
  echo "[harbor lint] scripts/lint-tasks.sh"
  bash scripts/lint-tasks.sh
) >"$checks_log" 2>&1 &
checks=$!
step "pytest on $workers workers, the oracle compile tier left out (bash scripts/test-oracle-compile.sh runs it);" \
  "the 15 slowest tests are listed at the end"
pytest_status=0
.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadgroup --no-loadscope-reorder \
  -m "not oracle_compile" --durations=15 "$@" || pytest_status=$?
checks_status=0
wait "$checks" || checks_status=$?
step "mkb build --check and harbor lint: $([ "$checks_status" = 0 ] && echo passed || echo "FAILED (exit $checks_status)")"
cat "$checks_log"
[ "$pytest_status" = 0 ] || { step "pytest FAILED (exit $pytest_status)"; exit "$pytest_status"; }
[ "$checks_status" = 0 ] || exit "$checks_status"
step "all passed"
