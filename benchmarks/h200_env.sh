# Source from the repository root on a GPU host before running the scripts under benchmarks/:
#   source benchmarks/h200_env.sh && python3 -m benchmarks.h200_oracles ...
# It activates the .venv that scripts/setup-dev.sh (with network) or scripts/offline-install.sh
# (a host without network, from a bundle built elsewhere by scripts/offline-bundle.sh; docs/running.md,
# "A GPU host without network") made, puts the checkout first on the import path (PYTHONPATH: the scripts
# run as python3 -m benchmarks.<name> from the root, and the processes they start import the checkout
# too, installed or not) and checks that torch, the GPU and the grader load.
#
# A host prepared with the earlier bundle layout (the DSLs' setup script in .gpu/setup/setup.sh,
# pydantic and its dependencies as wheels in .whl/) is set up as before when that script is there.
if [ -e .gpu/setup/setup.sh ]; then
  source .gpu/setup/setup.sh || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
  export PYTHONPATH=$PWD:/tmp/site:$PYTHONPATH PYTHONUNBUFFERED=1
  # Bytecode, as a pip install leaves it: that layout's wheels are unzipped without __pycache__, and the
  # grader's workers run with PYTHONDONTWRITEBYTECODE (they never write outside their scratch folder),
  # so without this every worker would compile the DSLs' Python sources again when it starts.
  if [ ! -e /tmp/mkb-site/.bytecode ]; then
    python3 -m compileall -q -j 0 /tmp/mkb-site /tmp/site >/dev/null 2>&1; touch /tmp/mkb-site/.bytecode
  fi
elif [ -x .venv/bin/python ]; then
  source .venv/bin/activate || return 1
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
else
  echo "h200_env.sh: no .venv in $PWD: run scripts/setup-dev.sh, or on a host without network install a" \
       "bundle from scripts/offline-bundle.sh with scripts/offline-install.sh" >&2
  return 1
fi
python3 -m compileall -q -j 0 metakernelbench verifier adapters skill_transfer problems >/dev/null 2>&1
python3 -c 'import metakernelbench.verifier.grader, torch; print("mkb env ok", torch.__version__, torch.cuda.get_device_name())'
