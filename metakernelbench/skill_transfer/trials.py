"""Read Harbor 0.25 trial folders into attempts.

A Harbor job folder is ``<jobs_dir>/<job_name>/`` holding ``config.json`` (the ``JobConfig``),
``result.json`` (the ``JobResult``) and one folder per trial. A trial folder
(``harbor.models.trial.paths.TrialPaths``) holds ``config.json`` (``TrialConfig``), ``result.json``
(``TrialResult``: task name, agent and model, ``verifier_result.rewards``, ``exception_info``),
``verifier/`` (our ``grade.json`` next to Harbor's ``reward.json``) and ``artifacts/`` (the
collected ``app/SKILL.md``). Harbor's own models parse these files, so a format change in Harbor
breaks here loudly rather than silently.

Outcome rules: ``verifier/grade.json`` (the grader's typed result) wins; without it the flat rewards
in ``result.json`` are used; with neither, or with a Harbor exception that says the sandbox, the
model provider or Harbor itself failed, the attempt is ``INFRA_ERROR`` and is excluded from every
comparison (design.md §4: an infrastructure fault is never scored as a result).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from harbor.models.trial.error_policy import FailureCause
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import TrialResult
from pydantic import BaseModel, ConfigDict, ValidationError

from metakernelbench.contract import other_dsl

from .families import parse_task_name
from .models import DIRECTIONS, STATUS_FAILED_UNKNOWN, STATUS_INFRA, split_direction
from .skill import read_skill

__all__ = [
    "GradeView", "INFRA_CAUSES", "TrialOutcome", "TrialReadError", "arm_of", "is_trial_dir", "iter_trial_dirs",
    "model_of", "read_trial",
]

# Harbor failure causes that say the attempt was cut short by something other than the agent.
INFRA_CAUSES = {
    FailureCause.SANDBOX_FAILED,
    FailureCause.MODEL_PROVIDER_FAILED,
    FailureCause.HARBOR_FAILED,
    FailureCause.CANCELLED,
}


class GradeView(BaseModel):
    """The fields of the grader's ``grade.json`` that the comparison needs (others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    status: str
    passed: bool
    problem: str | None = None
    dsl: str | None = None
    kernel_ms: float | None = None
    eager_ms: float | None = None
    speedup: float | None = None
    message: str | None = None
    details: dict[str, Any] = {}

    @property
    def eager_interleaved(self) -> bool:
        """The eager reference was timed call by call beside the kernel (``GradeConfig.interleave_eager``)."""
        return self.details.get("eager_baseline") == "interleaved"


class TrialOutcome(BaseModel):
    """What one finished trial says about its attempt, before it becomes an ``Attempt`` row."""

    model_config = ConfigDict(extra="forbid")

    trial_dir: Path
    job: str
    trial: str
    task_name: str
    problem: str
    dsl: str
    model: str
    arm: str
    source_dsl: str | None
    status: str
    passed: bool
    runtime_ms: float | None
    speedup: float | None
    eager_interleaved: bool = False
    finished_at: datetime | None
    skill: str | None
    attachment: Path | None = None
    note: str | None = None


class TrialReadError(ValueError):
    """A folder looks like a trial but cannot be read as a MetaKernelBench attempt."""


def is_trial_dir(path: Path) -> bool:
    """True for a folder holding a Harbor ``TrialResult`` (a job folder's result.json is not one)."""
    result = TrialPaths(path).result_path
    if not result.is_file():
        return False
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "trial_name" in data and "task_name" in data


def iter_trial_dirs(path: Path, depth: int = 2) -> Iterator[Path]:
    """Trial folders at or under ``path``: a trial, a job folder, or a folder of job folders."""
    if is_trial_dir(path):
        yield path
        return
    if depth == 0 or not path.is_dir():
        return
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        yield from iter_trial_dirs(child, depth - 1)


def model_of(result: TrialResult) -> str:
    """The model as the job config named it (``provider/name``), else as the agent reported it."""
    if result.config.agent.model_name:
        return result.config.agent.model_name
    info = result.agent_info.model_info
    if info is not None:
        return f"{info.provider}/{info.name}" if info.provider else info.name
    return "unknown"


def arm_of(result: TrialResult) -> tuple[str, str | None]:
    """``("solo", None)`` or ``("transfer", source_dsl)`` from the trial's extra instructions.

    ``mkb arms`` names every attachment ``<out>/skills/<direction>/<target task>.md``, so the arm is
    recorded in the trial's own config even when the attachment file is no longer on this machine.
    """
    paths = [Path(p) for p in result.config.extra_instruction_paths]
    if not paths and not result.config.extra_instructions:
        return "solo", None
    directions = {p.parent.name for p in paths if p.parent.name in DIRECTIONS}
    if len(directions) != 1 or len(paths) != 1 or result.config.extra_instructions:
        raise TrialReadError(
            f"trial {result.trial_name}: extra instructions {[str(p) for p in paths]} are not one "
            "skill attachment written by `mkb arms`; cannot tell its arm"
        )
    source, _target = split_direction(directions.pop())
    return "transfer", source


def _read_grade(trial: TrialPaths) -> GradeView | None:
    path = trial.verifier_dir / "grade.json"
    if not path.is_file():
        return None
    try:
        return GradeView.model_validate_json(path.read_text())
    except (OSError, ValidationError) as exc:
        raise TrialReadError(f"{path}: not a readable grade: {exc}") from exc


def _outcome(
    result: TrialResult, grade: GradeView | None
) -> tuple[str, bool, float | None, float | None, str | None]:
    """(status, passed, runtime_ms, speedup, note) by the rules in the module docstring."""
    exc = result.exception_info
    if exc is not None and exc.policy.cause in INFRA_CAUSES:
        return STATUS_INFRA, False, None, None, f"harbor exception {exc.exception_type}"
    if grade is not None:
        status, passed = grade.status, grade.passed and grade.status == "PASSED"
        runtime, speedup = grade.kernel_ms, grade.speedup
        note = None
    else:
        rewards = result.verifier_result.rewards if result.verifier_result else None
        if not rewards:
            why = f"harbor exception {exc.exception_type}" if exc else "no grade and no reward"
            return STATUS_INFRA, False, None, None, why
        if rewards.get("infra_error", 0):
            return STATUS_INFRA, False, None, None, "reward.json flags infra_error"
        passed = bool(rewards.get("passed", 0))
        status = "PASSED" if passed else STATUS_FAILED_UNKNOWN
        runtime = rewards.get("kernel_ms") or None
        speedup = rewards.get("speedup") or None
        note = "no grade.json; outcome from Harbor rewards"
    if status == STATUS_INFRA:
        return STATUS_INFRA, False, None, None, note
    if not passed:
        return status, False, None, None, note
    if runtime is None or not runtime > 0:
        return STATUS_INFRA, False, None, None, "graded PASSED without a kernel time"
    return "PASSED", True, float(runtime), None if speedup is None else float(speedup), note


def read_trial(trial_dir: Path) -> TrialOutcome | None:
    """One finished trial's outcome; None while the trial is still running (no finish time)."""
    paths = TrialPaths(trial_dir)
    try:
        result = TrialResult.model_validate_json(paths.result_path.read_text())
    except (OSError, ValidationError) as exc:
        raise TrialReadError(f"{paths.result_path}: not a Harbor TrialResult: {exc}") from exc
    if result.finished_at is None:
        return None
    grade = _read_grade(paths)
    try:
        problem, dsl = parse_task_name(result.task_name)
    except ValueError:
        if result.config.task.path is None:
            raise
        problem, dsl = parse_task_name(result.config.task.path.name)
    if grade is not None and grade.problem not in (None, problem):
        raise TrialReadError(f"{trial_dir}: grade.json is for {grade.problem}, the task for {problem}")
    arm, source_dsl = arm_of(result)
    if source_dsl is not None and other_dsl(source_dsl) != dsl:
        raise TrialReadError(f"{trial_dir}: a {source_dsl} skill was attached to a {dsl} task")
    status, passed, runtime, speedup, note = _outcome(result, grade)
    return TrialOutcome(
        trial_dir=trial_dir,
        job=trial_dir.parent.name,
        trial=result.trial_name,
        task_name=result.task_name,
        problem=problem,
        dsl=dsl,
        model=model_of(result),
        arm=arm,
        source_dsl=source_dsl,
        status=status,
        passed=passed,
        runtime_ms=runtime,
        speedup=speedup,
        eager_interleaved=passed and grade is not None and grade.eager_interleaved,
        finished_at=result.finished_at,
        skill=read_skill(trial_dir),
        attachment=result.config.extra_instruction_paths[0] if arm == "transfer" else None,
        note=note,
    )
