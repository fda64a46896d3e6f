"""Typed rows that cross the boundaries of this package (JSON lines, JSON output, CSV).

``Attempt`` is one line of ``attempts.jsonl`` (written by ``mkb collect``, read by ``mkb compare``
and ``mkb report``); the other models are the pieces of the comparison that ``mkb compare --json``
prints. Validation lives here so that a hand-edited or foreign attempts file fails loudly at the
line that breaks the contract instead of skewing a table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from metakernelbench.contract import Status, other_dsl

__all__ = [
    "Arm", "Attempt", "Cell", "CompareResult", "Comparison", "DIRECTIONS", "Direction", "Dsl", "Exclusions",
    "GRADER_STATUSES", "Outcome", "ReverseRow", "STANDINGS", "STATUS_FAILED_UNKNOWN", "STATUS_INFRA",
    "STATUS_SKIPPED", "Standing", "StandingRow", "direction_of", "split_direction",
]

Dsl = Literal["cutedsl", "tirx"]  # the contract's DSLS, spelled out for the type checker (tests/test_contract.py)
Arm = Literal["solo", "transfer"]
Direction = Literal["cutedsl2tirx", "tirx2cutedsl"]
DIRECTIONS: tuple[str, str] = ("cutedsl2tirx", "tirx2cutedsl")
Standing = Literal["above", "same", "below"]
STANDINGS: tuple[str, str, str] = ("above", "same", "below")
Outcome = Literal["both_pass", "rescue", "break", "joint_fail", "skipped"]

# Grader statuses (design.md §4), plus two that only this package writes: ``FAILED`` when only
# Harbor's flat reward.json is available (it says "failed" but not why) and ``skipped`` for a
# treatment that was never run because the source attempt left no skill.
GRADER_STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
STATUS_FAILED_UNKNOWN = "FAILED"
STATUS_SKIPPED = "skipped"
STATUS_INFRA = Status.INFRA_ERROR.value


def direction_of(source_dsl: str, target_dsl: str) -> str:
    """``cutedsl2tirx`` for a CuTe skill given to a TIRx attempt, and so on."""
    if other_dsl(source_dsl) != target_dsl:
        raise ValueError(f"no transfer direction from {source_dsl!r} to {target_dsl!r}")
    return f"{source_dsl}2{target_dsl}"


def split_direction(direction: str) -> tuple[str, str]:
    """(source DSL, target DSL) of a direction name."""
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; expected one of {DIRECTIONS}")
    source, target = direction.split("2")
    return source, target


class Attempt(BaseModel):
    """One attempt: a (model, problem, DSL, arm) graded once.

    ``skill_chars`` is the length of the skill that matters for the row's role: for a solo attempt
    the ``SKILL.md`` it left (what a transfer would carry; ``None`` when it left none), for a
    transfer attempt the skill it was given (0 for a skipped treatment whose source skill was
    empty, ``None`` when unknown).
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    problem: str = Field(pattern=r"^\d{2}_[a-z0-9_]+$")
    family: str
    dsl: Dsl
    arm: Arm
    source_dsl: Dsl | None = None
    passed: bool
    runtime_ms: float | None = None
    speedup: float | None = None
    # the grade timed the eager reference call by call beside the kernel (``GradeConfig.interleave_eager``):
    # its speedup is one loop's ratio, steadier than either time on a host whose speed moves
    eager_interleaved: bool = False
    skill_chars: int | None = None
    status: str
    # Provenance, not needed by the metrics; kept so a number can be traced to its trial folder.
    job: str | None = None
    trial: str | None = None
    finished_at: datetime | None = None
    skill_violations: dict[str, int] | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Attempt:
        if self.arm == "transfer":
            if self.source_dsl is None:
                raise ValueError("a transfer attempt needs source_dsl")
            if self.source_dsl == self.dsl:
                raise ValueError("source_dsl must differ from dsl")
        elif self.source_dsl is not None:
            raise ValueError("a solo attempt has no source_dsl")
        if self.status == STATUS_SKIPPED and (self.arm != "transfer" or self.passed):
            raise ValueError("only a transfer attempt can be skipped, and it never passes")
        if self.passed != (self.status == "PASSED"):
            raise ValueError(f"passed={self.passed} contradicts status {self.status!r}")
        if self.passed:
            if self.runtime_ms is None or not self.runtime_ms > 0:
                raise ValueError("a passing attempt needs a positive runtime_ms")
        elif self.runtime_ms is not None:
            raise ValueError("runtime_ms must be null unless the attempt passed")
        if self.eager_interleaved and not (self.passed and self.speedup and self.speedup > 0):
            raise ValueError("eager_interleaved needs a passing attempt with a positive speedup")
        return self

    @property
    def excluded(self) -> bool:
        """Infrastructure faults are never scored (design.md §4)."""
        return self.status == STATUS_INFRA

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.model, self.problem, self.dsl, self.arm)


class Comparison(BaseModel):
    """One paired comparison: the transfer attempt against the solo attempt on the same target."""

    model_config = ConfigDict(extra="forbid")

    model: str
    problem: str
    family: str
    direction: Direction
    r: float
    outcome: Outcome
    solo_status: str
    transfer_status: str
    solo_ms: float | None = None
    transfer_ms: float | None = None
    # what r divides when both passed: "time" (t_solo / t_transfer, design.md §6), or "speedup"
    # (s_transfer / s_solo, when both grades timed the eager reference beside the kernel: each time in
    # units of the eager call timed with it, so a host that ran faster for one grading cancels out)
    basis: Literal["time", "speedup"] = "time"
    standing: Standing | None = None


class Cell(BaseModel):
    """Paired statistics of one (model, direction, family); ``family=None`` pools all families."""

    model_config = ConfigDict(extra="forbid")

    model: str
    direction: Direction
    family: str | None
    n: int
    paired_lift: float | None
    help_rate: float | None
    harm_rate: float | None
    rescues: int
    breaks: int
    both_pass: int
    joint_fail: int
    skipped: int
    lift_ci95: tuple[float, float] | None


class StandingRow(BaseModel):
    """Help and harm among comparisons whose source attempt stood above/level with/below the solo."""

    model_config = ConfigDict(extra="forbid")

    model: str
    direction: Direction
    standing: Standing
    n: int
    help_rate: float | None
    harm_rate: float | None


class ReverseRow(BaseModel):
    """Among helped comparisons of a model, how the reverse direction on the same problem fared."""

    model_config = ConfigDict(extra="forbid")

    model: str
    helped: int
    with_reverse: int
    reverse_helped: float | None
    reverse_harmed: float | None


class Exclusions(BaseModel):
    """What was left out of the comparisons of one model, and why."""

    model_config = ConfigDict(extra="forbid")

    model: str
    infra_error_attempts: int = 0
    comparisons_lost_to_infra: int = 0
    unpaired: int = 0
    superseded: int = 0


class CompareResult(BaseModel):
    """Everything ``mkb compare --json`` prints."""

    model_config = ConfigDict(extra="forbid")

    seed: int
    n_boot: int
    cells: list[Cell]
    standing: list[StandingRow]
    reverse: list[ReverseRow]
    excluded: list[Exclusions]
    comparisons: list[Comparison]
