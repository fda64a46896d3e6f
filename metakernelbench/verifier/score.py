"""The last stage: the physical floor and the speedup a passing grade reports."""

from __future__ import annotations

from typing import Any

from metakernelbench.contract import SPEEDUP_CAP, GradeConfig, Status, Verdict
from metakernelbench.problems import Problem

from . import floor as floor_mod
from .result import GradeResult, Timing
from .timing import EagerBaseline

__all__ = ["score"]


def score(problem: Problem, dsl: str, kernel: Timing, eager: EagerBaseline, config: GradeConfig,
          fields: dict[str, Any]) -> GradeResult:
    """PASSED with the speedup (eager baseline median / kernel median), unless the kernel's median is
    below the problem's speed-of-light time on this GPU (REWARD_HACK: no honest kernel gets there)."""
    floor_ms = floor_mod.floor_ms(problem)
    fields.update(eager_ms=eager.base.median_ms, kernel_ms=kernel.median_ms, eager_drift=eager.drift,
                  eager_drift_flag=eager.drift > config.eager_drift_flag or eager.remeasured, floor_ms=floor_ms)
    if floor_ms is not None:
        fields["speed_of_light"] = floor_ms / kernel.median_ms
        if kernel.median_ms < floor_ms:
            raise Verdict(Status.REWARD_HACK, f"median {kernel.median_ms:.4f} ms is below the physical "
                                              f"floor {floor_ms:.4f} ms of this problem on this GPU")
    speedup = eager.base.median_ms / kernel.median_ms
    return GradeResult(status=Status.PASSED, passed=True, problem=problem.spec.name, dsl=dsl,
                       message=f"passed: {kernel.median_ms:.4f} ms vs eager {eager.base.median_ms:.4f} ms "
                               f"({speedup:.2f}x)", speedup=speedup, score_speedup=min(speedup, SPEEDUP_CAP),
                       **fields)
