"""``selfcheck.draw_mismatch``: a trusted kernel against its reference by the grader's comparison."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from metakernelbench.problems import find_problem
from metakernelbench.testing.selfcheck import draw_mismatch, standard_draws

KERNEL = Path(__file__).resolve().parents[1] / "fixtures" / "kernels" / "rmsnorm_tirx_llvm.py"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_correct_kernel_passes_and_a_wrong_one_is_described(tmp_path):
    problem = find_problem("28")
    workload, seed = standard_draws(problem)[0]
    assert workload == problem.spec.small_workload
    good = _load(KERNEL, "mkb_selfcheck_good")
    assert draw_mismatch(problem, good.solve, workload, seed, torch.device("cpu")) is None
    wrong_file = tmp_path / "wrong.py"
    wrong_file.write_text(KERNEL.read_text().replace("EPS = 1e-5", "EPS = 1e-1"))
    wrong = _load(wrong_file, "mkb_selfcheck_wrong")
    mismatch = draw_mismatch(problem, wrong.solve, workload, seed, torch.device("cpu"))
    assert mismatch is not None and "output" in str(mismatch).lower()
