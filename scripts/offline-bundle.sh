#!/usr/bin/env bash
# Build, on a machine with package access, the wheels a GPU host without network needs to grade
# kernels and run benchmarks/: torch, CuTe DSL and TIRx at the project's pinned versions
# (pyproject.toml, requirements.lock), pydantic, typer and rich, and setuptools to install the
# checkout. Copy the bundle folder and this checkout to the host and run scripts/offline-install.sh
# there (docs/running.md, "A GPU host without network").
#
#   bash scripts/offline-bundle.sh [--out DIR] [--python 3.12] [--arch x86_64] [--glibc 2.28] [--without-torch]
#
# The wheels are chosen for the host's Python, CPU architecture and glibc (the options; `ldd --version`
# on the host prints its glibc), not this machine's, so any machine with Python >= 3.11 and pip can
# build the bundle. Harbor and LiteLLM are left out (they drive trials and annotate skills; grading
# needs neither), and so is Triton, as in the grader images: it is a forbidden kernel language.
# --without-torch leaves torch and its CUDA libraries out, for a host whose own torch is the pinned one.
set -euo pipefail
cd "$(dirname "$0")/.."
out=offline-bundle
pyver=3.12
arch=x86_64
glibc=2.28
with_torch=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --python) pyver=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --glibc) glibc=$2; shift 2 ;;
    --without-torch) with_torch=0; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "offline-bundle: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-python3}
rm -rf "$out/wheels"
mkdir -p "$out/wheels"

# What grading needs, read from pyproject.toml so that the versions are the project's own pins.
"$python" - "$with_torch" > "$out/requirements.txt" <<'PY'
import sys
import tomllib

with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
skip = {"harbor", "litellm"} | (set() if sys.argv[1] == "1" else {"torch"})
extras = project["optional-dependencies"]
for requirement in [*project["dependencies"], *extras["cutedsl"], *extras["tirx"], "setuptools"]:
    if requirement.split("[")[0].split("=")[0] not in skip:
        print(requirement)
PY

# Every manylinux tag a host with this glibc accepts (pip takes --platform literally: a wheel tagged
# manylinux_2_17, as most are, does not match manylinux_2_28 alone).
platforms=()
for ((minor = ${glibc#2.}; minor >= 5; minor--)); do platforms+=(--platform "manylinux_2_${minor}_$arch"); done
platforms+=(--platform "manylinux2014_$arch")
echo "[offline-bundle] downloading wheels for Python $pyver on $arch, glibc $glibc, into $out/wheels"
# -c requirements.lock: every package, dependencies included, at the version the project was tested with
"$python" -m pip download --quiet --dest "$out/wheels" --only-binary=:all: --implementation cp \
  --python-version "$pyver" "${platforms[@]}" -c requirements.lock -r "$out/requirements.txt"
rm -f "$out"/wheels/triton-*.whl
if [ "$with_torch" = 0 ] && ls "$out"/wheels/torch-*.whl >/dev/null 2>&1; then
  echo "offline-bundle: torch came in as a dependency; it should not have" >&2
  exit 1
fi
(cd "$out/wheels" && sha256sum -- *.whl) > "$out/SHA256SUMS"
git rev-parse HEAD > "$out/COMMIT" 2>/dev/null || echo unknown > "$out/COMMIT"
echo "[offline-bundle] $(ls "$out/wheels" | wc -l) wheels, $(du -sh "$out/wheels" | cut -f1), for commit $(cat "$out/COMMIT")"
echo "[offline-bundle] on the GPU host, from the checkout at that commit: bash scripts/offline-install.sh $out"
