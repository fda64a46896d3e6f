"""The four arms of a model as Harbor job configs (``mkb arms``).

Arms (design.md §1): solo CuTe, solo TIRx, CuTe→TIRx (a TIRx attempt given the CuTe attempt's
skill) and TIRx→CuTe. Each solo arm is one Harbor job over the model's tasks in one DSL. Harbor
appends extra instruction files to *every* task of a job, so each transfer attempt is its own
one-task job whose ``extra_instruction_paths`` names the skill attachment for that task.

The command is meant to be run again as the solo jobs progress (it is idempotent):

1. it writes the two solo configs (deterministic, so ``harbor run -c`` resumes the same job);
2. it reads the solo job folders; for every finished source attempt it writes the attachment
   (the source's ``SKILL.md`` verbatim under a neutral header, ``skill.render_attachment``) and
   the one-task transfer config; a source that left no usable skill is recorded as a skipped
   treatment; a source that has not finished (or ended in an infrastructure error) is waiting;
3. the transfer configs copy the agent, environment, verifier, timeout multipliers, artifacts,
   attempts and retry settings from the target DSL's solo arm *as Harbor recorded it*, and the
   copy is checked against the recorded configs of both solo trials of the pair and against the
   pair's task budgets (``[agent]`` and environment resources in ``task.toml``). Any difference
   stops the command: the comparison is only fair when everything but the skill is equal.

Attachments live at ``<out>/skills/<direction>/<target task>.md``; ``collect`` recognises a
transfer trial by that folder name in the trial's recorded config.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from harbor.models.job.config import JobConfig
from harbor.models.task.config import TaskConfig as TaskDefinition
from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TrialConfig
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import TrialResult
from pydantic import BaseModel, ConfigDict

from metakernelbench.contract import DSLS

from .families import parse_task_name
from .models import DIRECTIONS, STATUS_INFRA, split_direction
from .skill import render_attachment
from .trials import TrialOutcome, TrialReadError, is_trial_dir, read_trial

__all__ = [
    "ArmEntry", "ArmsError", "ArmsManifest", "ArmsOptions", "BUDGET_FIELDS", "DEFAULT_ARTIFACTS", "JOB_FIELDS",
    "budget_view", "check_pair_budgets", "discover_tasks", "dump_config", "finished_trials", "model_slug",
    "plan_arms", "recorded_job_config", "solo_config", "solo_job_name", "task_budget", "transfer_config",
    "transfer_job_name", "write_config",
]

DEFAULT_ARTIFACTS = ("/app/SKILL.md", "/app/kernel.py")
# Everything a trial's behaviour depends on apart from its task and its instruction attachments.
BUDGET_FIELDS = (
    "agent",
    "environment",
    "verifier",
    "artifacts",
    "timeout_multiplier",
    "agent_timeout_multiplier",
    "verifier_timeout_multiplier",
    "agent_setup_timeout_multiplier",
    "environment_build_timeout_multiplier",
)
# Job-level settings copied from the solo arm as well (they shape attempts, not single trials).
JOB_FIELDS = ("n_attempts", "retry", "n_concurrent_trials", "quiet", "debug", "metrics")


class ArmsError(ValueError):
    """The arms cannot be written without making the comparison unfair or ambiguous."""


class ArmsOptions(BaseModel):
    """What ``mkb arms`` was asked for."""

    model_config = ConfigDict(extra="forbid")

    model: str
    tasks_dir: Path = Path("tasks")
    jobs_dir: Path = Path("jobs")
    out: Path | None = None
    agent: str | None = None
    agent_kwargs: dict[str, Any] = {}
    env: str | None = None
    n_concurrent: int | None = None
    problems: list[str] | None = None
    base_config: Path | None = None

    @property
    def slug(self) -> str:
        return model_slug(self.model)

    @property
    def out_dir(self) -> Path:
        return self.out if self.out is not None else Path("runs") / self.slug


class ArmEntry(BaseModel):
    """One planned attempt of one arm, and where it stands."""

    model_config = ConfigDict(extra="forbid")

    arm: str
    problem: str
    task: str
    state: Literal["planned", "ready", "done", "skipped", "waiting"]
    config: str | None = None
    attachment: str | None = None
    source_trial: str | None = None
    skill_chars: int | None = None
    skill_sha256: str | None = None
    reason: str | None = None


class ArmsManifest(BaseModel):
    """``<out>/arms.json``: every attempt of the four arms of one model."""

    model_config = ConfigDict(extra="forbid")

    model: str
    jobs_dir: str
    solo_configs: dict[str, str]
    entries: list[ArmEntry]

    def count(self, arm: str, state: str) -> int:
        return sum(e.arm == arm and e.state == state for e in self.entries)


def model_slug(model: str) -> str:
    """A file-name-safe form of a model name (``anthropic/claude-x`` -> ``anthropic-claude-x``)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-.")
    if not slug:
        raise ArmsError(f"model name {model!r} has no usable characters")
    return slug


def solo_job_name(slug: str, dsl: str) -> str:
    return f"{slug}__solo_{dsl}"


def transfer_job_name(slug: str, direction: str, problem: str) -> str:
    return f"{slug}__{direction}__{problem}"


# ---- tasks ------------------------------------------------------------------------------------


def discover_tasks(tasks_dir: Path, problems: list[str] | None = None) -> dict[str, dict[str, Path]]:
    """``{problem: {dsl: task dir}}`` for every problem with both DSL variants under tasks_dir."""
    found: dict[str, dict[str, Path]] = {}
    if not tasks_dir.is_dir():
        raise ArmsError(f"tasks folder {tasks_dir} does not exist")
    for path in sorted(tasks_dir.iterdir()):
        if not (path / "task.toml").is_file():
            continue
        try:
            problem, dsl = parse_task_name(path.name)
        except ValueError:
            continue
        found.setdefault(problem, {})[dsl] = path
    if problems:
        wanted = set(problems)
        found = {p: v for p, v in found.items() if p in wanted or p[:2] in wanted}
        missing = wanted - {p for p in found} - {p[:2] for p in found}
        if missing:
            raise ArmsError(f"no tasks for problem(s) {sorted(missing)} under {tasks_dir}")
    half = sorted(p for p, v in found.items() if set(v) != set(DSLS))
    if half:
        raise ArmsError(f"problem(s) {half} have only one DSL variant under {tasks_dir}")
    if not found:
        raise ArmsError(f"no MetaKernelBench tasks (NN_slug_cutedsl|tirx) under {tasks_dir}")
    return found


def task_budget(task_dir: Path) -> dict[str, Any]:
    """The per-attempt budget a task declares: its ``[agent]`` section and sandbox resources."""
    task = TaskDefinition.model_validate_toml((task_dir / "task.toml").read_text())
    env = task.environment
    return {
        "agent": task.agent.model_dump(mode="json"),
        "environment": {
            "cpus": env.cpus,
            "memory_mb": env.memory_mb,
            "storage_mb": env.storage_mb,
            "gpus": env.gpus,
        },
    }


def check_pair_budgets(tasks: dict[str, dict[str, Path]]) -> None:
    """Both DSL variants of a problem must give the attempt the same budget."""
    for problem, variants in sorted(tasks.items()):
        budgets = {dsl: task_budget(path) for dsl, path in variants.items()}
        if budgets["cutedsl"] != budgets["tirx"]:
            raise ArmsError(
                f"{problem}: the CuTe and TIRx tasks declare different budgets: "
                f"{budgets['cutedsl']} vs {budgets['tirx']}"
            )


# ---- configs ----------------------------------------------------------------------------------


def _load_mapping(path: Path) -> dict[str, Any]:
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ArmsError(f"{path}: a job config must be a mapping")
    return data


def _agent(opts: ArmsOptions, base: dict[str, Any]) -> AgentConfig:
    agents = base.get("agents") or []
    if len(agents) > 1:
        raise ArmsError("the base config names several agents; an arm runs exactly one")
    data = dict(agents[0]) if agents else {}
    if opts.agent is not None or not data:
        data.pop("import_path", None)
        name = opts.agent or "terminus-2"
        data["name" if ":" not in name else "import_path"] = name
    data["model_name"] = opts.model
    data["kwargs"] = {**data.get("kwargs", {}), **opts.agent_kwargs}
    return AgentConfig.model_validate(data)


def _environment(opts: ArmsOptions, base: dict[str, Any]) -> EnvironmentConfig:
    data = dict(base.get("environment") or {})
    if opts.env is not None:
        data.pop("type", None)
        data.pop("import_path", None)
        data["import_path" if ":" in opts.env else "type"] = opts.env
    return EnvironmentConfig.model_validate(data)


def solo_config(opts: ArmsOptions, dsl: str, tasks: dict[str, dict[str, Path]]) -> JobConfig:
    """The solo arm of one DSL: one job over every selected task of that DSL."""
    base = _load_mapping(opts.base_config) if opts.base_config else {}
    for key in ("job_name", "jobs_dir", "tasks", "datasets", "extra_instruction_paths",
                "extra_instructions", "source_jobs"):
        base.pop(key, None)
    artifacts = list(base.pop("artifacts", []))
    artifacts += [a for a in DEFAULT_ARTIFACTS if a not in artifacts]
    data = {
        **base,
        "job_name": solo_job_name(opts.slug, dsl),
        "jobs_dir": str(opts.jobs_dir),
        "agents": [_agent(opts, base).model_dump(mode="json", exclude_defaults=True)],
        "environment": _environment(opts, base).model_dump(mode="json", exclude_defaults=True),
        "tasks": [{"path": str(tasks[p][dsl])} for p in sorted(tasks)],
        "artifacts": artifacts,
    }
    if opts.n_concurrent is not None:
        data["n_concurrent_trials"] = opts.n_concurrent
    return JobConfig.model_validate(data)


def budget_view(config: JobConfig | TrialConfig) -> dict[str, Any]:
    """The fields that must be equal between arms, in comparable (JSON) form."""
    dumped = config.model_dump(mode="json")
    if isinstance(config, JobConfig):
        if len(dumped["agents"]) != 1:
            raise ArmsError(f"job {config.job_name} runs {len(dumped['agents'])} agents; an arm runs one")
        dumped["agent"] = dumped["agents"][0]
    return {name: dumped[name] for name in BUDGET_FIELDS}


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [k for k in a if a[k] != b.get(k)]


def transfer_config(
    solo: JobConfig, job_name: str, task_dir: Path, attachment: Path
) -> JobConfig:
    """A one-task job that copies the solo arm's settings and attaches one skill."""
    dumped = solo.model_dump(mode="json")
    data = {name: dumped[name] for name in (*BUDGET_FIELDS, *JOB_FIELDS) if name != "agent"}
    data["agents"] = dumped["agents"]
    data.update(
        job_name=job_name,
        jobs_dir=dumped["jobs_dir"],
        tasks=[{"path": str(task_dir)}],
        extra_instruction_paths=[str(attachment)],
    )
    config = JobConfig.model_validate(data)
    diff = _differences(budget_view(solo), budget_view(config))
    if diff:
        raise ArmsError(f"{job_name}: fields {diff} differ from the solo arm after copying")
    return config


def dump_config(config: JobConfig) -> str:
    """YAML for ``harbor run -c`` (defaults left out; Harbor fills them back in identically)."""
    data = config.model_dump(mode="json", exclude_defaults=True)
    data["job_name"] = config.job_name
    return yaml.safe_dump(data, sort_keys=False)


def write_config(path: Path, config: JobConfig) -> None:
    """Write a config, then check that Harbor reads back exactly the same job."""
    text = dump_config(config)
    # extra="forbid" is how `harbor run --dry-run` validates a config file.
    again = JobConfig.model_validate(yaml.safe_load(text), extra="forbid")
    if again != config or again.job_name != config.job_name:
        raise ArmsError(f"{path}: the written config does not read back as the same JobConfig")
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


# ---- reading the solo jobs --------------------------------------------------------------------


def recorded_job_config(jobs_dir: Path, job_name: str) -> JobConfig | None:
    """The JobConfig Harbor wrote when the job started (None if it has not started)."""
    path = jobs_dir / job_name / "config.json"
    if not path.is_file():
        return None
    return JobConfig.model_validate_json(path.read_text())


def finished_trials(job_dir: Path) -> dict[str, tuple[TrialOutcome, TrialConfig]]:
    """``{problem: (outcome, recorded trial config)}`` for the finished trials of a job.

    When a problem was attempted more than once (retries, resumed jobs), the latest finished
    attempt that is not an infrastructure error wins; an infrastructure error is kept only when
    nothing else finished.
    """
    best: dict[str, tuple[TrialOutcome, TrialConfig]] = {}
    if not job_dir.is_dir():
        return best
    for trial_dir in sorted(p for p in job_dir.iterdir() if p.is_dir()):
        if not is_trial_dir(trial_dir):
            continue
        outcome = read_trial(trial_dir)
        if outcome is None:
            continue
        config = TrialResult.model_validate_json(TrialPaths(trial_dir).result_path.read_text()).config
        rank = (outcome.status != STATUS_INFRA, outcome.finished_at)
        held = best.get(outcome.problem)
        if held is None or rank > (held[0].status != STATUS_INFRA, held[0].finished_at):
            best[outcome.problem] = (outcome, config)
    return best


def _check_recorded(job_name: str, solo: JobConfig, recorded: JobConfig | None) -> None:
    if recorded is None:
        return
    recorded = recorded.model_copy(update={"jobs_dir": solo.jobs_dir, "job_name": solo.job_name})
    if recorded != solo:
        diff = _differences(recorded.model_dump(mode="json"), solo.model_dump(mode="json"))
        raise ArmsError(
            f"job {job_name} already ran with a different config (fields {diff}); rerun `mkb arms` "
            "with the options it was started with, or move that job folder away"
        )


# ---- the plan ---------------------------------------------------------------------------------


def plan_arms(opts: ArmsOptions) -> ArmsManifest:
    """Write the configs and attachments that can be written now; return where every arm stands."""
    out = opts.out_dir
    tasks = discover_tasks(opts.tasks_dir, opts.problems)
    check_pair_budgets(tasks)
    entries: list[ArmEntry] = []
    solos: dict[str, JobConfig] = {}
    solo_paths: dict[str, str] = {}
    finished: dict[str, dict[str, tuple[TrialOutcome, TrialConfig]]] = {}
    for dsl in DSLS:
        config = solo_config(opts, dsl, tasks)
        _check_recorded(config.job_name, config, recorded_job_config(opts.jobs_dir, config.job_name))
        path = out / f"solo_{dsl}.yaml"
        write_config(path, config)
        solos[dsl], solo_paths[dsl] = config, str(path)
        try:
            finished[dsl] = finished_trials(opts.jobs_dir / config.job_name)
        except TrialReadError as exc:
            raise ArmsError(str(exc)) from exc
        for problem in sorted(tasks):
            done = finished[dsl].get(problem)
            entries.append(
                ArmEntry(
                    arm=f"solo_{dsl}",
                    problem=problem,
                    task=tasks[problem][dsl].name,
                    state="done" if done else "planned",
                    config=str(path),
                    source_trial=str(done[0].trial_dir) if done else None,
                    reason=f"status {done[0].status}" if done else None,
                )
            )
    if budget_view(solos["cutedsl"]) != budget_view(solos["tirx"]):
        raise ArmsError("the two solo arms differ in agent or budget settings")

    for direction in DIRECTIONS:
        source_dsl, target_dsl = split_direction(direction)
        for problem in sorted(tasks):
            entries.append(
                _plan_transfer(opts, out, direction, problem, tasks[problem][target_dsl],
                               solos[target_dsl], finished[source_dsl].get(problem),
                               finished[target_dsl].get(problem))
            )
    manifest = ArmsManifest(
        model=opts.model, jobs_dir=str(opts.jobs_dir), solo_configs=solo_paths, entries=entries
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "arms.json").write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest


def _plan_transfer(
    opts: ArmsOptions,
    out: Path,
    direction: str,
    problem: str,
    target_task: Path,
    target_solo_job: JobConfig,
    source: tuple[TrialOutcome, TrialConfig] | None,
    target: tuple[TrialOutcome, TrialConfig] | None,
) -> ArmEntry:
    entry = ArmEntry(arm=direction, problem=problem, task=target_task.name, state="waiting")
    if source is None:
        entry.reason = "the source solo attempt has not finished"
        return entry
    outcome, source_trial_config = source
    entry.source_trial = str(outcome.trial_dir)
    if outcome.status == STATUS_INFRA:
        entry.reason = (
            f"the source solo attempt ended in an infrastructure error ({outcome.note}); delete "
            "its trial folder and resume the solo job"
        )
        return entry
    if outcome.skill is None:
        entry.state, entry.skill_chars = "skipped", 0
        entry.reason = "the source attempt left no usable SKILL.md (skipped treatment)"
        return entry

    # The copy source is the target DSL's solo arm as Harbor recorded it, else as written.
    recorded = recorded_job_config(opts.jobs_dir, target_solo_job.job_name) or target_solo_job
    job_name = transfer_job_name(opts.slug, direction, problem)
    attachment = out / "skills" / direction / f"{target_task.name}.md"
    config = transfer_config(recorded, job_name, target_task, attachment)
    budget = budget_view(config)
    checks = {"source solo trial": source_trial_config}
    if target is not None:
        checks["target solo trial"] = target[1]
    for label, trial_config in checks.items():
        diff = _differences(budget, budget_view(trial_config))
        if diff:
            raise ArmsError(
                f"{job_name}: {label} {trial_config.trial_name} ran with different {diff}; "
                "the transfer would not be a fair comparison"
            )

    text = render_attachment(outcome.skill)
    transfer_dir = opts.jobs_dir / job_name
    if attachment.is_file() and attachment.read_text() != text and transfer_dir.exists():
        raise ArmsError(
            f"{attachment}: the source skill changed after transfer job {job_name} started; "
            "move that job folder away before attaching the new skill"
        )
    attachment.parent.mkdir(parents=True, exist_ok=True)
    if not attachment.is_file() or attachment.read_text() != text:
        attachment.write_text(text)
    path = out / direction / f"{target_task.name}.yaml"
    _check_recorded(job_name, config, recorded_job_config(opts.jobs_dir, job_name))
    write_config(path, config)
    done = any(
        o.arm == "transfer" for o, _ in finished_trials(transfer_dir).values()
    ) if transfer_dir.is_dir() else False
    entry.state = "done" if done else "ready"
    entry.config, entry.attachment = str(path), str(attachment)
    entry.skill_chars = len(outcome.skill)
    entry.skill_sha256 = hashlib.sha256(outcome.skill.encode()).hexdigest()
    return entry
