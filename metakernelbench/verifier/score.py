"""The last stage: the physical floor and the speedup a passing grade reports."""

from __future__ import annotations

from metakernelbench.contract import GradeConfig, Status, Verdict
from metakernelbench.problems import Problem

from . import floor as floor_mod
from .result import Findings, GradeResult, Timing
from .timing import EagerBaseline

__all__ = ["score"]


def score(problem: Problem, dsl: str, kernel: Timing, eager: EagerBaseline, config: GradeConfig,
          found: Findings) -> GradeResult:
    """PASSED with the speedup (eager baseline median / kernel median), unless the kernel's median is
    below the problem's speed-of-light time on this GPU (REWARD_HACK: no honest kernel gets there)."""
    floor_ms = floor_mod.floor_ms(problem)
    found.eager_ms, found.kernel_ms, found.eager_drift = eager.base.median_ms, kernel.median_ms, eager.drift
    found.eager_drift_flag = eager.drift > config.eager_drift_flag or eager.remeasured
    found.floor_ms = floor_ms
    if floor_ms is not None:
        found.speed_of_light = floor_ms / kernel.median_ms
        if kernel.median_ms < floor_ms:
            raise Verdict(Status.REWARD_HACK, f"median {kernel.median_ms:.4f} ms is below the physical "
                                              f"floor {floor_ms:.4f} ms of this problem on this GPU")
    speedup = eager.base.median_ms / kernel.median_ms
    return found.passed(problem.spec.name, dsl, f"passed: {kernel.median_ms:.4f} ms vs eager "
                                                f"{eager.base.median_ms:.4f} ms ({speedup:.2f}x)", speedup)
