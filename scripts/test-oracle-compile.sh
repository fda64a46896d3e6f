#!/usr/bin/env bash
# The oracle compile tier: every oracle kernel under oracles/<family>/ compiled for sm_90a on the CPU
# (CuTe DSL to PTX and a cubin, TIRx to CUDA source and through NVRTC to a cubin), i.e. the tests of
# tests/oracles/<family>/ that need no GPU, marked oracle_compile by tests/conftest.py. The README's test
# command (scripts/test.sh) leaves them out so that it answers in minutes; .ci/run runs this right after
# it. Parallel workers as in scripts/test.sh (MKB_TEST_WORKERS); arguments go to pytest. Exits non-zero
# when a test fails or none ran (pytest's exit 5).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
workers=${MKB_TEST_WORKERS:-$(($(nproc) + 1))}
paths=(tests/oracles)  # unless the arguments name tests of their own
for arg in "$@"; do [ -e "${arg%%::*}" ] && paths=(); done
echo "[oracle compile tier] pytest -m oracle_compile ${paths[*]} $* on $workers workers"
.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadgroup --no-loadscope-reorder \
  -m oracle_compile --durations=15 "${paths[@]}" "$@"
echo "[oracle compile tier] passed in $((SECONDS - started)) s"
