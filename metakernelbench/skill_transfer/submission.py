"""``mkb check-submission``: did a set of Harbor job folders follow the leaderboard protocol?

A leaderboard row is only comparable with another if both ran the same protocol (docs/running.md,
"Leaderboard"). This reads the job and trial folders with Harbor's own models and lists every
departure, one line each:

- the four arms are present (solo CuTe DSL, solo TIRx, CuTe DSL->TIRx, TIRx->CuTe DSL), each with one
  finished trial per task of its DSL;
- every trial ran the same agent configuration (agent, model, kwargs; environment variable names);
- nothing was overridden: no timeout multiplier or timeout override, no disabled verifier, no
  resource override, no ``MKB_*`` variable set by the job (the judge's address and budget come from
  the task and the judge);
- the attempt's time budget held: agent execution no longer than the task's agent timeout;
- every task is the published one: Harbor's task checksum equals that of the reference ``tasks/``;
- every grade can be checked from its records: ``verifier/reward.json`` is what Harbor recorded in
  ``result.json``, ``verifier/grade.json`` exists, and its status and speedup imply that reward.

What it cannot check is whether the judge that produced the grades was honest: that needs a judge
the leaderboard operator runs (docs/running.md says what a self-hosted judge proves).
"""

from __future__ import annotations

import json
import tomllib
import warnings
from collections import Counter, defaultdict
from pathlib import Path

from harbor.models.job.config import JobConfig
from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import TrialResult
from pydantic import BaseModel, ValidationError

from metakernelbench.contract import DSLS, SPEEDUP_CAP

from .families import parse_task_name
from .trials import GradeView, TrialReadError, arm_of, iter_trial_dirs

__all__ = [
    "AGENT_OVERRIDES", "ARMS", "ENV_OVERRIDES", "MULTIPLIERS", "SPEEDUP_CAP", "SubmissionReport", "arm_name",
    "check_submission", "dataset_version",
]

ARMS = ("solo_cutedsl", "solo_tirx", "cutedsl2tirx", "tirx2cutedsl")
MULTIPLIERS = ("timeout_multiplier", "agent_timeout_multiplier", "verifier_timeout_multiplier",
               "agent_setup_timeout_multiplier", "environment_build_timeout_multiplier")
AGENT_OVERRIDES = ("override_timeout_sec", "override_setup_timeout_sec", "max_timeout_sec")
ENV_OVERRIDES = ("override_cpus", "override_memory_mb", "override_storage_mb", "override_gpus", "override_tpu")


class SubmissionReport(BaseModel):
    """The verdict on a submitted set of job folders."""

    trials: int
    arms: dict[str, int]
    agent: str | None
    problems: list[str]

    @property
    def accepted(self) -> bool:
        return not self.problems


def arm_name(result: TrialResult, dsl: str) -> str:
    """The arm a trial of a ``dsl`` task belongs to (``solo_tirx``, ``cutedsl2tirx``, ...)."""
    kind, source = arm_of(result)
    return f"solo_{dsl}" if kind == "solo" else f"{source}2{dsl}"


def _agent_signature(result: TrialResult) -> str:
    agent = result.config.agent.model_dump(mode="json", exclude={"env"})
    agent["env_names"] = sorted(result.config.agent.env)
    return json.dumps(agent, sort_keys=True)


def _job_problems(job_dir: Path) -> list[str]:
    problems = []
    try:
        config = JobConfig.model_validate_json((job_dir / "config.json").read_text())
    except (OSError, ValidationError) as exc:
        return [f"{job_dir}: no readable Harbor job config.json ({type(exc).__name__})"]
    for name in MULTIPLIERS:
        value = getattr(config, name)
        if value not in (None, 1.0):
            problems.append(f"{job_dir.name}: {name} = {value} (timeouts may not be changed)")
    return problems


def _trial_problems(result: TrialResult, trial_dir: Path, reference_tasks: Path, task_dir_name: str) -> list[str]:
    where = trial_dir.parent.name + "/" + trial_dir.name
    problems = []
    cfg = result.config
    for name in AGENT_OVERRIDES:
        if getattr(cfg.agent, name) is not None:
            problems.append(f"{where}: agent {name} = {getattr(cfg.agent, name)} (timeouts may not be changed)")
    for name in ("override_timeout_sec", "max_timeout_sec"):
        if getattr(cfg.verifier, name) is not None:
            problems.append(f"{where}: verifier {name} = {getattr(cfg.verifier, name)} (timeouts may not be changed)")
    if cfg.verifier.disable:
        problems.append(f"{where}: the verifier was disabled")
    for name in ENV_OVERRIDES:
        if getattr(cfg.environment, name) is not None:
            problems.append(f"{where}: environment {name} = {getattr(cfg.environment, name)} (no resource overrides)")
    for scope, env in (("environment", cfg.environment.env), ("agent", cfg.agent.env), ("verifier", cfg.verifier.env)):
        set_by_job = sorted(k for k in env if k.startswith("MKB_"))
        if set_by_job:
            problems.append(f"{where}: the job sets {', '.join(set_by_job)} in the {scope} (judge settings are fixed)")

    task_dir = reference_tasks / task_dir_name
    if not task_dir.is_dir():
        return [*problems, f"{where}: task {task_dir_name} is not in the reference tasks folder"]
    task = Task(task_dir)
    with warnings.catch_warnings():  # TrialResult still records this checksum in Harbor 0.25
        warnings.simplefilter("ignore", DeprecationWarning)
        checksum = task.checksum
    if result.task_checksum != checksum:
        problems.append(f"{where}: task {task_dir_name} differs from the published task (checksum)")
    timing = result.agent_execution
    limit = task.config.agent.timeout_sec
    if timing and timing.started_at and timing.finished_at and limit:
        spent = (timing.finished_at - timing.started_at).total_seconds()
        if spent > limit + 60:  # Harbor's own stop takes a moment after the deadline
            problems.append(f"{where}: the agent ran {spent:.0f} s, over the {limit:.0f} s budget")
    return problems + _grade_problems(result, TrialPaths(trial_dir), where)


def _grade_problems(result: TrialResult, paths: TrialPaths, where: str) -> list[str]:
    reward_path, grade_path = paths.verifier_dir / "reward.json", paths.verifier_dir / "grade.json"
    if not reward_path.is_file():
        return [f"{where}: no verifier/reward.json"]
    reward = json.loads(reward_path.read_text())
    recorded = result.verifier_result.rewards if result.verifier_result else None
    problems = []
    if recorded != reward:
        problems.append(f"{where}: verifier/reward.json is not what Harbor recorded in result.json")
    if reward.get("infra_error", 0):
        return problems  # never scored: nothing to verify beyond the record itself
    if not grade_path.is_file():
        return [*problems, f"{where}: no verifier/grade.json (the reward cannot be checked)"]
    try:
        grade = GradeView.model_validate_json(grade_path.read_text())
    except ValidationError:
        return [*problems, f"{where}: verifier/grade.json is not a grade"]
    passed = grade.passed and grade.status == "PASSED"
    expected = min(grade.speedup or 0.0, SPEEDUP_CAP) if passed else 0.0
    if abs(float(reward.get("reward", -1)) - expected) > 1e-9 * max(1.0, expected):
        problems.append(f"{where}: reward {reward.get('reward')} does not follow from grade.json "
                        f"({grade.status}, speedup {grade.speedup})")
    if passed and not (grade.kernel_ms and grade.eager_ms
                       and abs(grade.eager_ms / grade.kernel_ms - (grade.speedup or 0)) <= 1e-6 * (grade.speedup or 1)):
        problems.append(f"{where}: grade.json's speedup is not eager_ms / kernel_ms")
    return problems


def check_submission(job_dirs: list[Path], reference_tasks: Path) -> SubmissionReport:
    """Every departure from the protocol in ``job_dirs`` (job folders), judged against ``reference_tasks``."""
    problems: list[str] = []
    arms: Counter[str] = Counter()
    per_arm_tasks: dict[str, Counter[str]] = defaultdict(Counter)
    agents: dict[str, str] = {}
    n_trials = 0
    for job_dir in job_dirs:
        if not job_dir.is_dir():
            problems.append(f"{job_dir}: not a folder")
            continue
        problems += _job_problems(job_dir)
        for trial_dir in iter_trial_dirs(job_dir, depth=1):
            try:
                result = TrialResult.model_validate_json(TrialPaths(trial_dir).result_path.read_text())
            except (OSError, ValidationError) as exc:
                problems.append(f"{trial_dir}: not a Harbor TrialResult ({type(exc).__name__})")
                continue
            if result.finished_at is None:
                problems.append(f"{trial_dir.name}: not finished")
                continue
            n_trials += 1
            task_dir_name = result.task_name.rpartition("/")[2]
            try:
                _problem, dsl = parse_task_name(task_dir_name)
                arm = arm_name(result, dsl)
            except (ValueError, TrialReadError) as exc:
                problems.append(f"{trial_dir.name}: {exc}")
                continue
            arms[arm] += 1
            per_arm_tasks[arm][task_dir_name] += 1
            agents.setdefault(_agent_signature(result), trial_dir.name)
            problems += _trial_problems(result, trial_dir, reference_tasks, task_dir_name)
    if len(agents) > 1:
        problems.append(f"{len(agents)} different agent configurations (one per arm set is required): "
                        + ", ".join(sorted(agents.values())))
    expected = {dsl: sorted(p.name for p in reference_tasks.iterdir()
                            if (p / "task.toml").is_file() and p.name.endswith(f"_{dsl}"))
                for dsl in DSLS}
    for arm in ARMS:
        want = expected[arm.rpartition("_")[2] if arm.startswith("solo_") else arm.split("2")[1]]
        have = per_arm_tasks.get(arm, Counter())
        if not have:
            problems.append(f"arm {arm}: no trials")
            continue
        missing = [t for t in want if t not in have]
        repeated = sorted(t for t, n in have.items() if n > 1)
        if missing:
            problems.append(f"arm {arm}: {len(missing)} task(s) without a trial, e.g. {missing[0]}")
        if repeated:
            problems.append(f"arm {arm}: {len(repeated)} task(s) with more than one trial, e.g. {repeated[0]}")
    agent = json.loads(next(iter(agents))) if len(agents) == 1 else None
    label = f"{agent['name']} {agent.get('model_name') or ''}".strip() if agent else None
    return SubmissionReport(trials=n_trials, arms=dict(sorted(arms.items())), agent=label, problems=problems)


def dataset_version(reference_tasks: Path) -> str | None:
    """The version in ``reference_tasks/dataset.toml`` (printed with the verdict)."""
    manifest = reference_tasks / "dataset.toml"
    return tomllib.loads(manifest.read_text())["dataset"].get("version") if manifest.is_file() else None
