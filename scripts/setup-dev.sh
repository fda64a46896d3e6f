#!/usr/bin/env bash
# Create .venv with Python >= 3.12 and install MetaKernelBench with both DSLs and the dev tools.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
pick_python() {
  for candidate in "${PYTHON:-}" python3.12 python3.13 python3; do
    [ -n "$candidate" ] || continue
    if command -v pyenv >/dev/null 2>&1 && [ "$candidate" = python3.12 ]; then
      path=$(PYENV_VERSION=3.12.1 pyenv which python3.12 2>/dev/null || true)
      [ -n "$path" ] && { echo "$path"; return; }
    fi
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$candidate"; return
    fi
  done
  echo "MetaKernelBench needs Python >= 3.12 (set PYTHON=/path/to/python3.12)" >&2
  exit 1
}
started=$SECONDS
step() { echo "[setup $((SECONDS - started)) s] $*"; }
if [ ! -x .venv/bin/python ]; then
  step "creating .venv"
  "$(pick_python)" -m venv .venv
fi
step "upgrading pip"
.venv/bin/python -m pip install -q --upgrade pip
# terminal-bench, in a venv of its own (its dependency pins are not Harbor's): the test of the
# Terminal-Bench layout (`mkb build --format terminal-bench`) validates tasks with its own task model.
# Installed beside the main install (pinned by requirements-tb.lock); its log is shown if it fails.
if [ ! -x .venv-tb/bin/python ]; then
  step "creating .venv-tb"
  "$(pick_python)" -m venv .venv-tb
fi
step "installing terminal-bench into .venv-tb, beside the main install"
tb_log=$(mktemp)
.venv-tb/bin/python -m pip install -q -c requirements-tb.lock terminal-bench==0.2.18 >"$tb_log" 2>&1 &
tb_pid=$!
step "installing metakernelbench with both DSLs, the dev tools and the judge's Docker SDK (torch with its CUDA libraries: a few minutes on a fresh machine)"
# (setuptools prints an information notice for every editable install of a package whose folders are
# mapped; it says nothing about this project, so it is filtered out)
# requirements.lock: the version of every package, the records' and the grader images' (torch 2.11.0, the
# CUDA build from PyPI, on CPU machines too); README "Pinned versions" says how to update it.
PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install -q -c requirements.lock \
  -e ".[cutedsl,tirx,dev,engine,judge]"
tb_status=0
wait "$tb_pid" || tb_status=$?
if [ "$tb_status" != 0 ]; then
  cat "$tb_log"; rm -f "$tb_log"
  echo "installing terminal-bench into .venv-tb failed (exit $tb_status)" >&2
  exit "$tb_status"
fi
rm -f "$tb_log"
step "checking the install"
.venv/bin/python -c 'import metakernelbench, torch, cutlass, tvm, harbor; print("setup ok: torch", torch.__version__, "tvm", tvm.__version__)'
