"""The grader's typed verdict and Harbor's flat reward file (design.md §4, "Statuses" and "Output").

``GradeResult`` is what every consumer reads (the agent's report, Harbor's reward, the skill-transfer
tables); its validator makes inconsistent verdicts impossible to construct (a PASSED result without
timings, a speedup on a failure, ...), so a bug in the grader surfaces as an error, not a score.
``Findings`` collects what a grade establishes stage by stage, in the result's own field names and
types, and makes the one ``GradeResult`` whichever way the grade ends.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from metakernelbench.contract import SPEEDUP_CAP, Status  # defined in the contract; imported from here too

__all__ = ["SPEEDUP_CAP", "Findings", "GradeResult", "Mismatch", "Status", "Timing", "failure"]


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


@dataclass
class Findings:
    """What a grade has established so far, filled in by its stages: the ``GradeResult`` fields beside
    the verdict itself, typed as the result types them. A field still None takes the result's default,
    so a grade that ends early reports exactly what its finished stages found. ``stages_s`` and
    ``details`` are filled in place as the grade goes on."""

    stages_s: dict[str, float]
    details: dict[str, str]
    device: str | None = None
    sandbox: str | None = None
    mismatch: Mismatch | None = None
    kernel_timing: Timing | None = None
    eager_timing_before: Timing | None = None
    eager_timing_after: Timing | None = None
    rechecked_calls: list[int] | None = None
    launch_sites: list[str] | None = None
    dsl_share: dict[str, Any] | None = None
    bypass: dict[str, str] | None = None
    eager_ms: float | None = None
    kernel_ms: float | None = None
    eager_drift: float | None = None
    eager_drift_flag: bool | None = None
    floor_ms: float | None = None
    speed_of_light: float | None = None

    def take(self, found: dict[str, Any]) -> None:
        """What a ``Verdict`` carries (``Verdict.fields``: the mismatch, the details, a stage's partial
        findings), in place of what was there; a speedup it names is not a failure's to report."""
        known = {f.name for f in fields(self)}
        for name, value in found.items():
            if name == "speedup":
                continue
            if name not in known:
                raise TypeError(f"a verdict carried {name!r}, which is no field of a grade's findings")
            setattr(self, name, value)

    def _set(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def passed(self, problem: str, dsl: str, message: str, speedup: float) -> GradeResult:
        """The PASSED result: these findings and the speedup (its scored value capped at ``SPEEDUP_CAP``)."""
        return GradeResult(status=Status.PASSED, passed=True, problem=problem, dsl=dsl, message=message,
                           speedup=speedup, score_speedup=min(speedup, SPEEDUP_CAP), **self._set())

    def failed(self, status: Status, problem: str, dsl: str, message: str) -> GradeResult:
        """A non-passing result with these findings (``failure``)."""
        return failure(status, problem, dsl, message, **self._set())
