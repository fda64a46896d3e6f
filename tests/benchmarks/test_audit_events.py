"""``benchmarks/audit_events.py`` on the CPU: it counts the audit events a call raises and times the
call in a plain process beside one with the candidate's armed guard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "problems" / "mlp_norm" / "28_fused_add_rmsnorm_h4096_llama31_8b_bf16.py"
CPU_KERNEL = REPO / "tests" / "fixtures" / "kernels" / "rmsnorm_tirx_llvm.py"


def _run(kernel: Path, tmp_path: Path) -> dict:
    out = tmp_path / "audit.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.audit_events", str(PROBLEM), str(kernel), "--dsl", "tirx",
                           "--device", "cpu", "--small", "--rounds", "2", "--calls", "5", "--warmup", "2",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_a_tirx_launch_raises_no_event_and_both_processes_time_it(tmp_path):
    result = _run(CPU_KERNEL, tmp_path)
    assert result["events_per_call"] == {}
    timing = result["timing"]
    for variant in ("plain", "guard"):
        assert timing[variant]["calls"] == 10 and timing[variant]["median_ms"] > 0
        assert timing["refusals"][variant] == []
    assert "guard_minus_plain_us" in timing


@pytest.mark.slow
def test_events_a_call_raises_are_counted_and_the_armed_guard_sees_them(tmp_path):
    kernel = tmp_path / "kernel_with_ctypes.py"
    kernel.write_text(
        "import ctypes\n"
        "import importlib.util\n"
        f"_spec = importlib.util.spec_from_file_location('fixture_rmsnorm', {str(CPU_KERNEL)!r})\n"
        "_fixture = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_fixture)\n"
        "_word = ctypes.c_int(0)\n\n\n"
        "def solve(*inputs):\n"
        "    for _ in range(3):\n"
        "        ctypes.addressof(_word)\n"
        "    return _fixture.solve(*inputs)\n")
    result = _run(kernel, tmp_path)
    assert result["events_per_call"].get("ctypes.addressof") == 3.0
    # the kernel file is the submission there: its own ctypes calls are refused (recorded, not acted on)
    assert any("ctypes.addressof" in text for text in result["timing"]["refusals"]["guard"])
    assert result["timing"]["refusals"]["plain"] == []


@pytest.mark.slow
def test_the_eager_reference_is_timed_beside_the_reference_workers_hook(tmp_path):
    out = tmp_path / "ref.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.audit_events", str(PROBLEM), "not-loaded.py",
                           "--dsl", "tirx", "--device", "cpu", "--small", "--reference", "--rounds", "2",
                           "--calls", "4", "--warmup", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    timing = json.loads(out.read_text())["timing"]
    assert timing["plain"]["calls"] == timing["guard"]["calls"] == 8
    assert timing["refusals"]["guard"] == []  # the reference worker's hook refuses nothing


def _controls(tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "controls.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.audit_events", str(PROBLEM), str(CPU_KERNEL),
                           "--dsl", "tirx", "--device", "cpu", "--small", "--rounds", "2", "--calls", "3",
                           "--warmup", "1", *extra, "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(out.read_text())["timing"]


@pytest.mark.slow
def test_the_controls_take_the_guard_apart(tmp_path):
    timing = _controls(tmp_path, "--variants", "plain,plain_b,nap,hook,gate,guard")
    assert set(timing["minus_plain_us"]) == {"plain_b", "nap", "hook", "gate", "guard"}
    assert all(timing[v]["calls"] == 6 for v in ("plain", "plain_b", "nap", "hook", "gate", "guard"))
    assert timing["cpus"] is None and timing["refusals"]["hook"] == timing["refusals"]["gate"] == []


@pytest.mark.slow
def test_pinned_timing_processes_each_get_a_cpu_of_their_own(tmp_path):
    timing = _controls(tmp_path, "--variants", "plain,guard", "--pin")
    assert sorted(timing["cpus"]) == ["guard", "plain"] and len(set(timing["cpus"].values())) == 2
    assert timing["guard"]["calls"] == timing["plain"]["calls"] == 6


def test_an_unknown_or_plainless_variant_list_is_refused_before_anything_starts():
    for bad in ("plain,slow", "guard,hook", "plain,plain"):
        done = subprocess.run([sys.executable, "-m", "benchmarks.audit_events", str(PROBLEM), str(CPU_KERNEL),
                               "--dsl", "tirx", "--device", "cpu", "--variants", bad],
                              capture_output=True, text=True, timeout=120, cwd=REPO)
        assert done.returncode == 2 and "--variants" in done.stderr, (bad, done.stderr[-500:])


def test_one_cpu_per_core_gives_distinct_cpus_of_this_process():
    from benchmarks.audit_events import one_cpu_per_core

    mine = os.sched_getaffinity(0)
    cpus = one_cpu_per_core(len(mine))
    assert len(cpus) == len(set(cpus)) == len(mine) and set(cpus) <= mine
    assert len(one_cpu_per_core(1)) == 1
