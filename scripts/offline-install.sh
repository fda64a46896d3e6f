#!/usr/bin/env bash
# Install, on a GPU host without network, a bundle built by scripts/offline-bundle.sh: a .venv in
# this checkout with the bundle's wheels (no index, no dependency resolution: the bundle is the whole
# set, checked against its SHA256SUMS) and the checkout itself installed editable, so that
# .venv/bin/mkb grades kernels and `source benchmarks/h200_env.sh` prepares the benchmarks/ scripts.
#
#   bash scripts/offline-install.sh BUNDLE_DIR
#
# A bundle built --without-torch has no torch wheel: the .venv then sees the host's own Python
# packages (--system-site-packages), and the check at the end reports which torch it found.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=${1:?usage: bash scripts/offline-install.sh BUNDLE_DIR}
python=${PYTHON:-python3}
[ -f "$bundle/SHA256SUMS" ] || { echo "offline-install: $bundle holds no SHA256SUMS (build it with scripts/offline-bundle.sh)" >&2; exit 2; }
(cd "$bundle/wheels" && sha256sum --quiet -c ../SHA256SUMS)
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$(cat "$bundle/COMMIT")" != "$commit" ]; then
  echo "offline-install: note: the bundle was built at $(cat "$bundle/COMMIT"), this checkout is $commit" >&2
fi
if [ ! -x .venv/bin/python ]; then
  if ls "$bundle"/wheels/torch-*.whl >/dev/null 2>&1; then
    "$python" -m venv .venv
  else
    "$python" -m venv --system-site-packages .venv
  fi
fi
.venv/bin/python -m pip install --quiet --no-index --no-deps "$bundle"/wheels/*.whl
.venv/bin/python -m pip install --quiet --no-index --no-deps --no-build-isolation -e .
.venv/bin/python -c 'import torch, cutlass, tvm, metakernelbench.verifier.grader
print("offline install ok: torch", torch.__version__, "tvm", tvm.__version__, "GPU:",
      torch.cuda.get_device_name() if torch.cuda.is_available() else "none visible")'
