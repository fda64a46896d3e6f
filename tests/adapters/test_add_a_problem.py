"""Adding a problem is one file and ``mkb build``: done literally, in a copy, nothing else is edited.

The test copies the problems tree, writes a throwaway problem file (a family folder the benchmark
already has, no catalogue entry, no oracle), runs the generator on the copy and then the problem
and family tests against the copy (``MKB_PROBLEMS_DIR``). No count, id range or catalogue entry
may stand in the way, and every count the generator writes (``adapters/metakernelbench/adapter_metadata.json``)
follows the new problem.

The throwaway problem takes the highest free id, counting down from 99, so it never collides with
the id a newcomer following docs/adding-a-problem.md picks (the next free one, 75 onwards): the
test keeps passing while such a problem is being added.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib

from adapters_support import ORACLES
from harbor.models.task.task import Task

from metakernelbench.adapters.build import build
from metakernelbench.problems import REPO_ROOT, problem_paths

NEW_PROBLEM = textwrap.dedent('''
    """Scaled residual add, fp32: a toy problem added after the published set.

    y = alpha * x + residual, elementwise, in fp32.
    """

    import torch

    PROVENANCE = dict(source="MetaKernelBench test", model="none", upstream="written for the add-a-problem test",
                      license="Apache-2.0")
    INPUTS = ("x", "residual", "alpha")
    OUTPUTS = ("y",)
    SMALL_WORKLOAD = dict(n=64)


    def make_inputs(device, generator, *, n=1 << 20):
        x = torch.randn(n, device=device, generator=generator)
        residual = torch.randn(n, device=device, generator=generator)
        alpha = float(torch.rand((), device=device, generator=generator)) + 0.5
        return x, residual, alpha


    def reference(x, residual, alpha):
        return alpha * x + residual


    def physical_floor(*, n):
        return {"bytes": 3 * 4 * n, "flops": 2 * n, "math": "fp32"}
''').lstrip()


def throwaway_id(used: set[str]) -> str:
    """The highest two-digit id no problem file uses (99 downwards): never a newcomer's next id."""
    return next(f"{n:02d}" for n in range(99, 0, -1) if f"{n:02d}" not in used)


def test_throwaway_id_skips_used_ids():
    assert throwaway_id({"01", "75"}) == "99"
    assert throwaway_id({"99", "98"}) == "97"


def test_a_new_problem_needs_one_file_and_the_generator(tmp_path):
    problems = tmp_path / "problems"
    shutil.copytree(REPO_ROOT / "problems", problems)
    pid = throwaway_id({p.stem[:2] for p in problem_paths(problems)})
    stem = f"{pid}_scaled_residual_add_fp32"
    (problems / "mlp_norm" / f"{stem}.py").write_text(NEW_PROBLEM)

    out = tmp_path / "tasks"
    build(problems, out, tmp_path / "dataset.toml", ORACLES, images=tmp_path)
    made = sorted(p.name for p in out.iterdir() if p.name.startswith(f"{pid}_"))
    assert made == [f"{stem}_cutedsl", f"{stem}_tirx"]
    for name in made:
        assert Task.is_valid_dir(out / name)
    assert f"{stem}_tirx" in (tmp_path / "registry.json").read_text()
    n_tasks = 2 * len(problem_paths(problems))
    metadata = json.loads((tmp_path / "adapters" / "metakernelbench" / "adapter_metadata.json").read_text())[0]
    assert metadata["harbor_adapter"][0]["adapted_benchmark_size"] == n_tasks
    assert metadata["harbor_adapter"][0]["registry_benchmark_size"] == n_tasks
    published = tomllib.loads((problems / "catalog.toml").read_text())["problem"]
    assert metadata["original_benchmark"][0]["size"] == 2 * len(published)  # the original's, not ours

    env = {**os.environ, "MKB_PROBLEMS_DIR": str(problems)}
    tests = [str(REPO_ROOT / "tests" / "problems"), str(REPO_ROOT / "tests" / "skill_transfer" / "test_st_families.py")]
    # every test of those files, but the per-problem reference runs only for the new problem: the others
    # run on the same files in the suite itself
    only_new = f"[{pid}] or not test_reference_small_workload"
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-k", only_new, *tests],
                          capture_output=True, text=True, timeout=1200, cwd=REPO_ROOT, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"test_reference_small_workload_is_deterministic_and_well_formed[{pid}] PASSED" in done.stdout
