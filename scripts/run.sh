#!/usr/bin/env bash
# The default job: set up .venv, then grade kernels with the full grader.
#   - with an NVIDIA GPU: the 12 pilot oracle kernels -> results/local/pilot.json
#   - CPU only: a TIRx kernel compiled for the CPU (llvm) on problem 28's small workload
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
if .venv/bin/python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  .venv/bin/python benchmarks/h200_pilot.py --only oracles --out results/local/pilot.json
else
  echo "no CUDA GPU here: grading the CPU (llvm) TIRx kernel for problem 28 end to end"
  .venv/bin/mkb grade 28 tests/fixtures/kernels/rmsnorm_tirx_llvm.py --dsl tirx --device cpu --small
fi
