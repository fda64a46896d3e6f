"""``h200_scale.py``: the per-N summary scale.json holds, and a run on two fake CPU devices."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.h200_scale import entry

REPO = Path(__file__).resolve().parents[2]


def _run(n, medians, cvs, statuses=("PASSED",)):
    return {"n": n, "gradings_per_hour": 100.0 * n, "tasks": {
        t: {"speedup_median": m, "speedup_cv": c, "statuses": list(statuses)}
        for t, m, c in zip(("a", "b"), medians, cvs, strict=True)}}


def test_drift_is_against_the_one_device_run_and_the_worst_oracle_counts():
    base = _run(1, (10.0, 4.0), (0.01, 0.02))
    row = entry(_run(2, (10.2, 3.6), (0.03, 0.01)), base)
    assert row["n"] == 2 and row["gradings_per_hour"] == 200.0
    assert row["max_speedup_drift"] == pytest.approx(0.10) and row["speedup_cv"] == 0.03
    assert entry(base, base)["max_speedup_drift"] == 0.0


def test_a_failed_grading_is_visible():
    row = entry(_run(2, (10.0, 4.0), (None, None), statuses=("PASSED", "INCORRECT")), None)
    assert row["all_passed"] is False and row["max_speedup_drift"] is None and row["speedup_cv"] is None


@pytest.mark.slow
def test_two_fake_devices_on_the_cpu(tmp_path):
    out = tmp_path / "scale.json"
    task = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"
    done = subprocess.run([sys.executable, "-m", "benchmarks.h200_scale", "--out", str(out),
                           "--devices", "cpu,cpu", "--gradings", "1", "--only", "28_tirx", "--judge-args",
                           "--small --draws 2 --warmup 2 --timed 5 --rechecks 1", "--kernel",
                           f"{task}={REPO / 'tests' / 'fixtures' / 'kernels' / 'rmsnorm_tirx_llvm.py'}"],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert {"command", "commit", "device", "date", "entries"} <= set(record)
    assert [e["n"] for e in record["entries"]] == [1, 2]
    for e in record["entries"]:
        assert {"n", "gradings_per_hour", "max_speedup_drift", "speedup_cv"} <= set(e)
        assert e["all_passed"], e["run"]["tasks"]
        assert e["run"]["gradings"] == e["n"]
