"""The grader's typed verdict and Harbor's flat reward file (design.md §4, "Statuses" and "Output").

``GradeResult`` is what every consumer reads (the agent's report, Harbor's reward, the skill-transfer
tables); its validator makes inconsistent verdicts impossible to construct (a PASSED result without
timings, a speedup on a failure, ...), so a bug in the grader surfaces as an error, not a score.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from metakernelbench.contract import SPEEDUP_CAP, Status  # defined in the contract; imported from here too

__all__ = ["SPEEDUP_CAP", "GradeResult", "Mismatch", "Status", "Timing", "failure"]


class Mismatch(BaseModel):
    """The first value that broke the contract, with how far it exceeds its allowance."""

    model_config = ConfigDict(extra="forbid")
    output: str
    draw: int
    check: str = Field(description="structure | nan | exact | max_abs | norm | row_norm | set")
    detail: str
    index: list[int] | None = None
    got: float | None = None
    expected: float | None = None
    error: float | None = None
    allowance: float | None = None

    @property
    def excess(self) -> float | None:
        """How many allowances the error is (>1 means it failed)."""
        if self.error is None or not self.allowance:
            return None
        return self.error / self.allowance


class Timing(BaseModel):
    """Fifty timed calls of one side, in milliseconds, plus summary statistics."""

    model_config = ConfigDict(extra="forbid")
    samples_ms: list[float]
    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    cv: float

    @classmethod
    def from_samples(cls, samples_ms: list[float]) -> Timing:
        ordered = sorted(samples_ms)
        n = len(ordered)
        mid = ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])
        mean = sum(ordered) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in ordered) / n)
        return cls(
            samples_ms=list(samples_ms), median_ms=mid, p10_ms=ordered[int(0.1 * (n - 1))],
            p90_ms=ordered[int(0.9 * (n - 1))], min_ms=ordered[0], cv=std / mean if mean else 0.0,
        )


class GradeResult(BaseModel):
    """One evaluation of one kernel file against one problem."""

    model_config = ConfigDict(extra="forbid")
    status: Status
    passed: bool
    problem: str
    dsl: str
    message: str = ""
    kernel_ms: float | None = None
    eager_ms: float | None = None
    speedup: float | None = None
    score_speedup: float | None = None
    floor_ms: float | None = None
    speed_of_light: float | None = Field(None, description="floor_ms / kernel_ms: share of peak")
    eager_drift: float | None = Field(None, description="|after-before|/before of the eager median")
    eager_drift_flag: bool = False
    mismatch: Mismatch | None = None
    kernel_timing: Timing | None = None
    eager_timing_before: Timing | None = None
    eager_timing_after: Timing | None = None
    launch_sites: list[str] = []
    bypass: dict[str, str] = Field({}, description="launch site -> outcome with it suppressed")
    dsl_share: dict[str, Any] | None = Field(None, description="the DSL kernels' share of one call's time, "
                                             "with every kernel listed (provenance.dsl_share)")
    rechecked_calls: list[int] = []
    violations: list[str] = []
    grade_wall_s: float | None = None
    stages_s: dict[str, float] = Field({}, description="seconds per grading stage (start, compile, "
                                       "correctness, eager, timing, rechecks, dsl_share, bypass)")
    sandbox: str = Field("", description="the OS limits the candidate's worker ran under")
    device: str = ""
    details: dict[str, str] = {}

    @model_validator(mode="after")
    def _consistent(self) -> GradeResult:
        if self.passed != (self.status is Status.PASSED):
            raise ValueError("passed must be true exactly when status is PASSED")
        if self.passed:
            if self.kernel_ms is None or self.eager_ms is None or self.speedup is None:
                raise ValueError("a PASSED result needs kernel_ms, eager_ms and speedup")
            if self.score_speedup != min(self.speedup, SPEEDUP_CAP):
                raise ValueError("score_speedup must be the speedup capped at 100")
        elif self.speedup is not None or self.score_speedup is not None:
            raise ValueError("only a PASSED result carries a speedup")
        return self

    def reward(self) -> dict[str, float]:
        """Harbor's ``reward.json``: flat, finite numbers only."""
        return {
            "reward": float(self.score_speedup or 0.0),
            "passed": 1.0 if self.passed else 0.0,
            "speedup": float(self.score_speedup or 0.0),
            "kernel_ms": float(self.kernel_ms or 0.0),
            "eager_ms": float(self.eager_ms or 0.0),
            "infra_error": 1.0 if self.status is Status.INFRA_ERROR else 0.0,
        }

    def write(self, directory: Path) -> None:
        """Write ``grade.json`` and ``reward.json`` into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "grade.json").write_text(self.model_dump_json(indent=2) + "\n")
        (directory / "reward.json").write_text(json.dumps(self.reward(), indent=2) + "\n")


def failure(status: Status, problem: str, dsl: str, message: str, **fields) -> GradeResult:
    """A non-passing verdict."""
    if status is Status.PASSED:
        raise ValueError("failure() cannot build a PASSED result")
    return GradeResult(status=status, passed=False, problem=problem, dsl=dsl, message=message, **fields)
