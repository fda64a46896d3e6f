"""Other processes on the grading GPU (``verifier.gpu_procs``, ``grader``): never a silent slow grade."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from metakernelbench.verifier.gpu_procs import GpuProcesses


class _Listed(GpuProcesses):
    def __init__(self, pids):
        super().__init__(handle=object())
        self._pids = pids

    def pids(self):
        return self._pids


def test_foreign_by_pid_when_the_namespaces_match():
    assert _Listed([10, 11, 99]).foreign({10, 11}) == [99]
    assert _Listed([10, 11]).foreign({10, 11, 12}) == []


def test_foreign_by_count_across_pid_namespaces():
    # inside a container NVML reports host PIDs: none matches ours, so count instead
    assert _Listed([5001, 5002, 5003]).foreign({1, 2, 3}) == []
    assert _Listed([5001, 5002, 5003, 5004]).foreign({1, 2, 3}) == [5001, 5002, 5003, 5004]


def test_without_nvml_there_is_nothing_to_check():
    assert GpuProcesses(why="no NVML").foreign({1}) == []


@pytest.mark.gpu
def test_a_process_computing_on_the_gpu_makes_the_grade_infra_error(tmp_path):
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier.grader import GradeConfig, grade

    hog = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import torch
        x = torch.randn(8192, 8192, device="cuda")
        while True:
            x = x @ x
            x /= x.norm()
    """)])
    try:
        oracles = Path(__file__).resolve().parents[2] / "oracles" / "mlp_norm"
        oracle = oracles / "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx.py"
        result = grade(find_problem("28"), oracle, "tirx", config=GradeConfig(foreign_gpu_wait_s=2.0))
        assert result.status.value == "INFRA_ERROR" and "other processes" in result.message
    finally:
        hog.kill()
