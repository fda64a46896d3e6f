# Source on the lent H200 machine (repo root as cwd) after the gpu-bundle parts are stashed:
#   carry [".gpu/setup", ".whl"]; command: source benchmarks/h200_env.sh && python3 benchmarks/...
# It unpacks the DSL bundle (../shared/tools/gpu-bundle), installs the few wheels the image lacks
# (pydantic and its deps, downloaded into .whl), and makes the repo importable as `metakernelbench`
# without installing it.
source .gpu/setup/setup.sh || return 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=$PWD:/tmp/site:$PYTHONPATH PYTHONUNBUFFERED=1
# Bytecode, as a pip install leaves it: the bundle's wheels are unzipped without __pycache__, and the
# grader's workers run with PYTHONDONTWRITEBYTECODE (they never write outside their scratch folder),
# so without this every worker would compile the DSLs' Python sources again when it starts.
if [ ! -e /tmp/mkb-site/.bytecode ]; then
  python3 -m compileall -q -j 0 /tmp/mkb-site /tmp/site >/dev/null 2>&1; touch /tmp/mkb-site/.bytecode
fi
python3 -m compileall -q -j 0 metakernelbench verifier adapters skill_transfer problems >/dev/null 2>&1
python3 -c 'import metakernelbench.verifier.grader, torch; print("mkb env ok", torch.__version__, torch.cuda.get_device_name())'
