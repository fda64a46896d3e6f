"""Adding a problem is one file and ``mkb build``: done literally, in a copy, nothing else is edited.

The test copies the problems tree, writes a 75th problem file (a family folder the benchmark
already has, no catalogue entry, no oracle), runs the generator on the copy and then the problem
and family tests against the copy (``MKB_PROBLEMS_DIR``). No count, id range or catalogue entry
may stand in the way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from adapters_support import ORACLES
from harbor.models.task.task import Task

from metakernelbench.adapters.build import build
from metakernelbench.problems import REPO_ROOT

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


def test_a_75th_problem_needs_one_file_and_the_generator(tmp_path):
    problems = tmp_path / "problems"
    shutil.copytree(REPO_ROOT / "problems", problems)
    new_file = problems / "mlp_norm" / "75_scaled_residual_add_fp32.py"
    new_file.write_text(NEW_PROBLEM)

    out = tmp_path / "tasks"
    build(problems, out, tmp_path / "dataset.toml", ORACLES, images=tmp_path)
    made = sorted(p.name for p in out.iterdir() if p.name.startswith("75_"))
    assert made == ["75_scaled_residual_add_fp32_cutedsl", "75_scaled_residual_add_fp32_tirx"]
    for name in made:
        assert Task.is_valid_dir(out / name)
    assert "75_scaled_residual_add_fp32_tirx" in (tmp_path / "registry.json").read_text()

    env = {**os.environ, "MKB_PROBLEMS_DIR": str(problems)}
    tests = [str(REPO_ROOT / "tests" / "problems"), str(REPO_ROOT / "tests" / "skill_transfer" / "test_st_families.py")]
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *tests],
                          capture_output=True, text=True, timeout=1200, cwd=REPO_ROOT, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "test_reference_small_workload_is_deterministic_and_well_formed[75] PASSED" in done.stdout
