#!/usr/bin/env bash
# The default job: set up .venv, then run a miniature transfer study end to end (demo/study.py):
# Harbor's Terminus-2 agent against a local scripted model, all four arms on problems 28 and 25, the
# local judge, then mkb collect, compare and report. A demonstration of the pipeline, not a
# measurement; it needs tmux and root (or user namespaces).
#   - with an NVIDIA GPU: first every oracle under oracles/ through its task's final grade, with its
#     share of GPU time in DSL kernels -> results/local/oracles.json; then the study with the oracles
#     of both DSLs graded on the GPU
#   - CPU only: first one TIRx kernel compiled for the CPU (llvm) graded end to end; then the study with
#     the CPU TIRx kernels, the judge on the CPU at the small workloads
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
if .venv/bin/python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "CUDA GPU found: every oracle through its task's final grade"
  .venv/bin/python -m benchmarks.h200_oracles --out results/local/oracles.json
  echo "a miniature four-arm transfer study with a scripted model, graded on the GPU (a demonstration, not a measurement)"
  .venv/bin/python -m demo.study --gpu --out results/local/demo
else
  echo "no CUDA GPU here: grading the CPU (llvm) TIRx kernel for problem 28 end to end"
  .venv/bin/mkb grade 28 tests/fixtures/kernels/rmsnorm_tirx_llvm.py --dsl tirx --device cpu --small
  echo "a miniature four-arm transfer study with a scripted model (a demonstration, not a measurement)"
  .venv/bin/python -m demo.study --out results/local/demo
fi
