"""``mkb grade``'s usage errors: one line on stderr saying what to do, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
KERNEL = REPO / "tests" / "exploits" / "control_honest_28.py"


def _mkb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metakernelbench.cli", "grade", *args], capture_output=True,
                          text=True, timeout=300)


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stdout[-500:] + done.stderr[-1500:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_unknown_problem_lists_near_matches():
    _one_line_error(_mkb("99", str(KERNEL), "--dsl", "tirx"), "no problem matches '99'", "near:")


def test_unknown_device_says_which_exist():
    _one_line_error(_mkb("28", str(KERNEL), "--dsl", "tirx", "--device", "tpu"), "unknown device 'tpu'", "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU")
def test_no_gpu_points_to_the_cpu():
    _one_line_error(_mkb("28", str(KERNEL), "--dsl", "tirx", "--device", "cuda"), "--device cpu")


def test_missing_kernel_file():
    _one_line_error(_mkb("28", str(REPO / "nowhere.py"), "--dsl", "tirx"), "no kernel file at")


def test_wrong_dsl():
    _one_line_error(_mkb("28", str(KERNEL), "--dsl", "triton"), "--dsl must be cutedsl or tirx")


def test_a_syntax_error_is_a_compile_error(tmp_path):
    from metakernelbench.problems import find_problem
    from metakernelbench.verifier.grader import grade

    bad = tmp_path / "kernel.py"
    bad.write_text("import tvm\ndef solve(x:\n    return x\n")
    result = grade(find_problem("28"), bad, "tirx", device="cpu")
    assert result.status.value == "COMPILE_ERROR" and "syntax error on line 2" in result.message


def test_judge_help_names_the_mkb_command():
    done = subprocess.run([sys.executable, "-m", "metakernelbench.cli", "judge", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: mkb judge"), done.stdout[:200]


def test_a_non_positive_budget_is_a_usage_error():
    _one_line_error(_mkb("28", str(KERNEL), "--dsl", "tirx", "--call-timeout", "0"), "--call-timeout", "positive")


def test_budgets_are_options_and_progress_goes_to_stderr_only(tmp_path):
    """A kernel that never returns: TIMEOUT naming the budgets given on the command line; stage lines
    on stderr while it runs, and stdout holds nothing but the JSON result."""
    import json

    hang = tmp_path / "kernel.py"
    hang.write_text("import tvm\n\n\ndef solve(hidden_states, residual, weight):\n    while True:\n        pass\n")
    done = _mkb("28", str(hang), "--dsl", "tirx", "--device", "cpu", "--small", "--json",
                "--compile-timeout", "4", "--call-timeout", "3")
    assert done.returncode == 1, done.stderr[-1500:]
    result = json.loads(done.stdout)
    assert result["status"] == "TIMEOUT", result["message"]
    assert "call budget of 3 s" in result["message"] and "compile budget of 4 s" in result["message"]
    progress = [line for line in done.stderr.splitlines() if line.startswith("mkb grade [")]
    assert any("compile budget 4 s" in line for line in progress), done.stderr
    assert any("correctness" in line for line in progress), done.stderr


def test_interleave_eager_times_the_reference_beside_the_kernel():
    """``--interleave-eager``: the eager time is the reference's calls of the kernel's own loop (one
    per timed call, no cached baseline), and the speedup divides the two medians of that loop."""
    import json

    kernel = REPO / "tests" / "fixtures" / "kernels" / "blockcopy_tirx_llvm.py"
    done = _mkb("25", str(kernel), "--dsl", "tirx", "--device", "cpu", "--small", "--json", "--quiet",
                "--interleave-eager")
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    result = json.loads(done.stdout)
    assert result["details"]["eager_baseline"] == "interleaved"
    eager, kernel_timing = result["eager_timing_before"], result["kernel_timing"]
    assert len(eager["samples_ms"]) == len(kernel_timing["samples_ms"]) == 50
    assert result["eager_ms"] == eager["median_ms"] and result["eager_drift"] == 0.0
    assert abs(result["speedup"] - result["eager_ms"] / result["kernel_ms"]) < 1e-9
