#!/usr/bin/env bash
# The default job: set up .venv, then
#   - with an NVIDIA GPU: grade every oracle kernel under oracles/ with the full grader -> results/local/pilot.json
#   - CPU only: grade one TIRx kernel compiled for the CPU (llvm), then run a miniature transfer study end
#     to end (demo/study.py): Harbor's Terminus-2 agent against a local scripted model, all four arms on
#     problems 28 and 25, the local judge on the CPU, then mkb collect, compare and report. A
#     demonstration of the pipeline, not a measurement; it needs tmux and root (or user namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
if .venv/bin/python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  .venv/bin/python benchmarks/h200_pilot.py --only oracles --out results/local/pilot.json
else
  echo "no CUDA GPU here: grading the CPU (llvm) TIRx kernel for problem 28 end to end"
  .venv/bin/mkb grade 28 tests/fixtures/kernels/rmsnorm_tirx_llvm.py --dsl tirx --device cpu --small
  echo "a miniature four-arm transfer study with a scripted model (a demonstration, not a measurement)"
  .venv/bin/python -m demo.study --out results/local/demo
fi
