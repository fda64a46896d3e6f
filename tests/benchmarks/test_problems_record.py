"""``h200_problems.py`` on the CPU: the record's fields, the controls, and the sample count rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import h200_problems

REPO = Path(__file__).resolve().parents[2]


def test_fast_references_get_the_full_loop():
    assert h200_problems.timed_count(0.02) == (10, 50)


@pytest.mark.parametrize("first_call_s", [2.0, 5.0, 60.0])
def test_slow_references_get_fewer_calls_but_never_fewer_than_the_minimum(first_call_s):
    warmup, timed = h200_problems.timed_count(first_call_s)
    assert timed >= h200_problems.MIN_TIMED and timed < 50 and warmup < 10
    if first_call_s * (h200_problems.MIN_TIMED + warmup) <= h200_problems.SLOW_BUDGET_S:
        assert (warmup + timed) * first_call_s <= h200_problems.SLOW_BUDGET_S


def test_small_run_records_controls_and_no_ceiling(tmp_path):
    out = tmp_path / "problems.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.h200_problems", "--out", str(out),
                           "--device", "cpu", "--small", "--only", "28"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(out.read_text())
    (row,) = record["problems"]
    assert row["problem"].startswith("28_") and "error" not in row
    assert all(v.startswith(("rejected", "not applicable")) for v in row["controls"].values()), row["controls"]
    assert row["eager_timed_calls"] == {"warmup": 10, "timed": 50} and len(row["eager_samples_ms"]) == 50
    assert row["eager_measurable"] is (row["eager_ms"] >= h200_problems.EAGER_MIN_MS)
    assert "eager_in_range" not in row and "eager_in_range" not in record["summary"]
    assert record["summary"]["problems"] == 1 and record["summary"]["errors"] == []


def test_grade_peak_records_a_final_grade_per_dsl_and_keeps_the_other_fields(tmp_path):
    """``--grade-peak`` on the CPU (no GPU memory to sample: the peak is null) with a CPU kernel for
    problem 28: the row keeps its earlier fields and gains the final grade's."""
    out = tmp_path / "problems.json"
    name = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"
    out.write_text(json.dumps({"problems": [{"problem": name, "eager_ms": 1.0, "final_grade_peak_gib": None}]}))
    kernel = REPO / "tests" / "fixtures" / "kernels" / "rmsnorm_tirx_llvm.py"
    done = subprocess.run([sys.executable, "-m", "benchmarks.h200_problems", "--out", str(out),
                           "--device", "cpu", "--small", "--only", "28", "--grade-peak", "--merge", "--dsl", "tirx",
                           "--kernel", f"{name}_tirx={kernel}"],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (row,) = json.loads(out.read_text())["problems"]
    assert row["eager_ms"] == 1.0 and row["final_grade_peak_gib"] == {"tirx": None}
    graded = row["final_grade"]["tirx"]
    assert graded["status"] == "PASSED", graded["message"]
    assert graded["memory_plan"] and graded["estimate"] is None  # no card to plan for on the CPU
    assert {"command", "commit", "date", "device"} <= set(row["final_grade_run"])


def test_peaks_from_a_sweep_fill_only_what_the_sweep_measured():
    """An oracle sweep's memory peaks go into the problem rows; a row's own ``--grade-peak`` measurement
    for a DSL is kept, and an entry without a peak, or whose grade did not complete, writes nothing."""
    record = {"problems": [
        {"problem": "47_z", "final_grade_peak_gib": None},
        {"problem": "34_x", "final_grade_peak_gib": None},
        {"problem": "45_y", "final_grade_peak_gib": {"tirx": 70.0}, "final_grade": {"tirx": {"status": "PASSED"}}},
    ]}
    sweep = {"runs": [{"device": "NVIDIA H100 80GB HBM3", "commit": "abc"}], "entries": [
        {"task": "34_x_cutedsl", "run": 0, "status": "PASSED", "gpu_memory": {"peak_gib": 61.2, "tool": "nvidia-smi"}},
        {"task": "34_x_tirx", "run": 0, "status": "PASSED", "gpu_memory": {"peak_gib": None, "error": "none"}},
        {"task": "45_y_tirx", "run": 0, "status": "PASSED", "gpu_memory": {"peak_gib": 99.0, "tool": "nvidia-smi"}},
        {"task": "45_y_cutedsl", "run": 0, "status": "PASSED", "gpu_memory": {"peak_gib": 66.0, "tool": "nvidia-smi"}},
        {"task": "47_z_tirx", "run": 0, "status": "INFRA_ERROR",
         "gpu_memory": {"peak_gib": 73.0, "tool": "nvidia-smi"}},
    ]}
    assert h200_problems.peaks_from_sweep(record, sweep, "oracles.json") == 2
    unfinished, first, second = record["problems"]
    assert unfinished["final_grade_peak_gib"] is None
    assert first["final_grade_peak_gib"] == {"cutedsl": 61.2}
    assert first["final_grade_peak_source"]["cutedsl"]["device"] == "NVIDIA H100 80GB HBM3"
    assert second["final_grade_peak_gib"] == {"tirx": 70.0, "cutedsl": 66.0}
