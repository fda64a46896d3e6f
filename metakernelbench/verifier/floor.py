"""The physical floor: the fastest time any correct implementation could reach on the grading GPU.

floor = max(bytes / peak bandwidth, flops / peak throughput for the problem's math). A measured time
below it is not clipped into a 100x score but rejected, because it can only come from skipped work
or a broken clock. Peaks are the H200's datasheet figures (dense, no sparsity); other GPUs would
need their own table, and an unknown GPU gets no floor check rather than a wrong one.
"""

from __future__ import annotations

import torch

from metakernelbench.problems import Problem

__all__ = ["H200", "PEAKS", "floor_ms", "peaks_for_device"]

H200 = {
    "bandwidth": 4.8e12,
    "fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12,
    "fp4": 1979e12,  # no FP4 tensor cores on Hopper: FP4 work runs at best at FP8 rate
    "int": 67e12,
}
PEAKS = {"H200": H200, "H100": {**H200, "bandwidth": 3.35e12}, "cpu": None}


def peaks_for_device() -> dict[str, float] | None:
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    for key, table in PEAKS.items():
        if key in name:
            return table
    return None


def floor_ms(problem: Problem, peaks: dict[str, float] | None = None) -> float | None:
    """The problem's speed-of-light time in ms on the given peaks (default: this machine's GPU)."""
    peaks = peaks if peaks is not None else peaks_for_device()
    declared = problem.physical_floor()
    if peaks is None or declared is None:
        return None
    seconds = max(declared.get("bytes", 0) / peaks["bandwidth"],
                  declared.get("flops", 0) / peaks[declared.get("math", "fp32")])
    return seconds * 1e3
