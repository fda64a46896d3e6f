"""Synthetic Harbor job folders, for tests and for the documented sample report.

Nothing here is a measurement. The folders are laid out the way Harbor 0.25 lays out a job
(``harbor.job.Job`` and ``harbor.trial.trial.Trial``): the job's ``config.json`` (``JobConfig``,
defaults excluded) and ``result.json`` (``JobResult`` without trial results), and per trial
``config.json`` (``TrialConfig``, defaults excluded), ``result.json`` (``TrialResult``),
``trial.log``, ``agent/``, ``verifier/{reward.json, grade.json, test-stdout.txt}`` and
``artifacts/{manifest.json, logs/artifacts/, app/SKILL.md, app/kernel.py}``, all written through
Harbor's own models and path helpers so that a change in Harbor's formats shows up as a failure
here. The layout was checked against a real ``harbor run`` of the oracle agent (the opt-in test
``tests/skill_transfer/test_st_harbor_e2e.py``); the ``lock.json`` files Harbor also writes are
left out (nothing here reads them).

``python tests/skill_transfer/st_synthetic.py OUT`` writes a seeded two-model study (the
sample report in ``docs/skill-transfer.md`` is made from it).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harbor.models.agent.context import AgentContext
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult, JobStats
from harbor.models.task.id import LocalTaskId
from harbor.models.trial.artifact_manifest import ArtifactManifest, ArtifactManifestEntry
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import (
    AgentInfo,
    ExceptionInfo,
    ModelInfo,
    TimingInfo,
    TrialResult,
)
from harbor.models.verifier.result import VerifierResult

from metakernelbench.skill_transfer.arms import DEFAULT_ARTIFACTS, model_slug, solo_job_name, transfer_job_name
from metakernelbench.skill_transfer.families import FAMILY_ID_RANGES
from metakernelbench.skill_transfer.models import direction_of
from metakernelbench.skill_transfer.skill import render_attachment
from metakernelbench.verifier.result import SPEEDUP_CAP, GradeResult, Status

EPOCH = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@dataclass
class FakeAttempt:
    """One synthetic attempt: what the grader and the agent would have left behind."""

    problem: str
    dsl: str
    status: str = "PASSED"
    kernel_ms: float | None = 1.0
    eager_ms: float = 4.0
    skill: str | None = "Splitting the reduction across warps paid off once rows exceeded 4096.\n"
    exception: str | None = None  # a Harbor exception type, e.g. "EnvironmentStartTimeoutError"
    grade_json: bool = True  # False: only Harbor's flat rewards (reward.json) exist
    rewards: bool = True  # False: the verifier left nothing at all
    finished: bool = True
    trajectory: list[dict] | None = None  # ATIF steps for agent/trajectory.json (else an empty object)
    details: dict[str, str] | None = None  # the grade's details (e.g. eager_baseline)

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"

    @property
    def task(self) -> str:
        return f"{self.problem}_{self.dsl}"


def _short_id(*parts: object) -> str:
    alphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:7])


def _grade(a: FakeAttempt) -> GradeResult:
    """The grader's verdict, built with the grader's own model (so its validator applies)."""
    if a.passed:
        speedup = a.eager_ms / a.kernel_ms
        return GradeResult(status=Status.PASSED, passed=True, problem=a.problem, dsl=a.dsl,
                           message="synthetic", kernel_ms=a.kernel_ms, eager_ms=a.eager_ms,
                           speedup=speedup, score_speedup=min(speedup, SPEEDUP_CAP), details=a.details or {})
    return GradeResult(status=Status(a.status), passed=False, problem=a.problem, dsl=a.dsl,
                       message="synthetic", eager_ms=a.eager_ms)


def write_job(
    job_dir: Path,
    model: str,
    attempts: list[FakeAttempt],
    tasks_dir: Path = Path("tasks"),
    extra_instruction_paths: dict[str, Path] | None = None,
    agent: str = "terminus-2",
    start: datetime = EPOCH,
    job_config: JobConfig | None = None,
    trial_agent: AgentConfig | None = None,
) -> list[Path]:
    """Write one Harbor job folder holding ``attempts``; returns the trial folders.

    ``extra_instruction_paths`` maps a task name to its skill attachment (transfer jobs).
    ``job_config`` is the config the job was started with (as ``harbor run -c`` would record it);
    by default one is made from the other arguments. Trial configs are derived from it the way
    ``harbor.job_plan.JobPlan.build_trial_configs`` does, except that ``trial_agent`` (if given)
    replaces the agent, to fake a trial that ran with other settings.
    """
    extra_instruction_paths = extra_instruction_paths or {}
    if job_config is None:
        job_config = JobConfig(
            job_name=job_dir.name,
            jobs_dir=job_dir.parent,
            agents=[AgentConfig(name=agent, model_name=model)],
            tasks=[TaskConfig(path=tasks_dir / a.task) for a in attempts],
            artifacts=list(DEFAULT_ARTIFACTS),
        )
    job_id = job_config_uuid(job_dir.name)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "config.json").write_text(job_config.model_dump_json(indent=4, exclude_defaults=True))
    (job_dir / "job.log").write_text("")
    agent_config = trial_agent or job_config.agents[0]
    provider, _, name = (agent_config.model_name or model).rpartition("/")
    results: list[TrialResult] = []
    trial_dirs: list[Path] = []
    for i, a in enumerate(attempts):
        started = start + timedelta(minutes=45 * i)
        extra = [extra_instruction_paths[a.task]] if a.task in extra_instruction_paths else []
        trial_config = TrialConfig(
            task=TaskConfig(path=tasks_dir / a.task),
            trial_name=f"{a.task[:32].rstrip('_-')}__{_short_id(job_dir.name, a.task, i)}",
            trials_dir=job_dir,
            agent=agent_config,
            timeout_multiplier=job_config.timeout_multiplier,
            agent_timeout_multiplier=job_config.agent_timeout_multiplier,
            verifier_timeout_multiplier=job_config.verifier_timeout_multiplier,
            agent_setup_timeout_multiplier=job_config.agent_setup_timeout_multiplier,
            environment_build_timeout_multiplier=job_config.environment_build_timeout_multiplier,
            environment=job_config.environment,
            verifier=job_config.verifier,
            artifacts=job_config.artifacts,
            extra_instruction_paths=[*job_config.extra_instruction_paths, *extra],
            job_id=job_id,
        )
        paths = TrialPaths(job_dir / trial_config.trial_name)
        paths.mkdir()
        paths.config_path.write_text(trial_config.model_dump_json(indent=4, exclude_defaults=True))
        paths.log_path.write_text("")
        steps = {"schema_version": "ATIF-v1.5", "session_id": trial_config.trial_name,
                 "agent": {"name": agent_config.name or "custom", "version": "2.0"}, "steps": a.trajectory}
        (paths.agent_dir / "trajectory.json").write_text(json.dumps(steps) if a.trajectory else "{}")
        # Harbor always collects the convention folder /logs/artifacts first, then each declared
        # artifact; destinations are relative to the trial folder.
        (paths.artifacts_dir / "logs" / "artifacts").mkdir(parents=True, exist_ok=True)
        manifest = ArtifactManifest(entries=[ArtifactManifestEntry(
            source="/logs/artifacts", destination="artifacts/logs/artifacts", type="directory",
            status="ok", exclude=[])])
        for source in DEFAULT_ARTIFACTS:
            target = paths.artifacts_dir / source.lstrip("/")
            content = a.skill if source.endswith("SKILL.md") else "def solve(*inputs): ...\n"
            if content is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
            manifest.entries.append(ArtifactManifestEntry(
                source=source, destination=f"artifacts/{source.lstrip('/')}", type="file",
                status="failed" if content is None else "ok", exclude=[]))
        paths.artifacts_manifest_path.write_text(json.dumps(manifest.to_json_data(), indent=4))
        verifier = None
        if a.rewards:
            grade = _grade(a)
            paths.test_stdout_path.write_text("synthetic grading log\n")
            grade.write(paths.verifier_dir)  # grade.json and reward.json, as `mkb grade` writes them
            if not a.grade_json:
                (paths.verifier_dir / "grade.json").unlink()
            verifier = VerifierResult(rewards=grade.reward())
        exception = None
        if a.exception:
            exception = ExceptionInfo(
                exception_type=a.exception,
                exception_message="synthetic failure",
                exception_traceback="Traceback (most recent call last):\n  synthetic\n",
                occurred_at=started + timedelta(minutes=30),
            )
        result = TrialResult(
            task_name=f"metakernelbench/{a.task}",
            trial_name=trial_config.trial_name,
            trial_uri=paths.trial_dir.resolve().as_uri(),
            task_id=LocalTaskId(path=tasks_dir / a.task),
            task_checksum=hashlib.sha256(a.task.encode()).hexdigest(),
            config=trial_config,
            agent_info=AgentInfo(
                name=agent_config.name or "custom",
                version="2.0",
                model_info=ModelInfo(name=name, provider=provider or None),
            ),
            agent_result=AgentContext(n_input_tokens=1000, n_output_tokens=200, cost_usd=0.01),
            verifier_result=verifier,
            exception_info=exception,
            started_at=started,
            finished_at=started + timedelta(minutes=41) if a.finished else None,
            agent_execution=TimingInfo(started_at=started, finished_at=started + timedelta(minutes=40)),
            verifier=TimingInfo(started_at=started + timedelta(minutes=40),
                                finished_at=started + timedelta(minutes=41)),
        )
        paths.result_path.write_text(result.model_dump_json(indent=4))
        results.append(result)
        trial_dirs.append(paths.trial_dir)
    done = [r for r in results if r.finished_at is not None]
    job_result = JobResult(
        id=job_id,
        started_at=start,
        updated_at=start + timedelta(minutes=45 * len(attempts)),
        finished_at=start + timedelta(minutes=45 * len(attempts)) if len(done) == len(results) else None,
        n_total_trials=len(attempts),
        stats=JobStats.from_trial_results(done, n_total_trials=len(attempts)),
    )
    (job_dir / "result.json").write_text(
        job_result.model_dump_json(indent=4, exclude={"trial_results"})
    )
    return trial_dirs


def job_config_uuid(name: str):
    """A stable UUID per job name, so synthetic folders are reproducible byte for byte."""
    import uuid

    return uuid.uuid5(uuid.NAMESPACE_URL, f"mkb-synthetic:{name}")


def write_task(tasks_dir: Path, task: str, timeout_sec: float = 2400.0) -> Path:
    """A minimal valid Harbor task folder (enough for ``mkb arms`` and ``harbor run --dry-run``)."""
    path = tasks_dir / task
    (path / "environment").mkdir(parents=True, exist_ok=True)
    (path / "tests").mkdir(exist_ok=True)
    (path / "solution").mkdir(exist_ok=True)
    (path / "instruction.md").write_text(f"Synthetic task {task}.\n")
    (path / "environment" / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\n")
    (path / "tests" / "test.sh").write_text("#!/bin/bash\necho '{\"reward\": 0}' > /logs/verifier/reward.json\n")
    (path / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    (path / "task.toml").write_text(
        'schema_version = "1.4"\n'
        'artifacts = ["/app/kernel.py", "/app/SKILL.md"]\n\n'
        f'[task]\nname = "metakernelbench/{task}"\n\n'
        f"[agent]\ntimeout_sec = {timeout_sec}\n\n"
        "[environment]\ncpus = 2\nmemory_mb = 8192\ngpus = 0\n"
    )
    return path


# ---- a seeded synthetic study -------------------------------------------------------------------

_SKILL_LINES = (
    "Fusing the elementwise epilogue into the main kernel removed one full pass over the output.",
    "Keeping the reduction in fp32 was necessary; bf16 accumulation failed the anchor check.",
    "Launch overhead dominated below about 64 rows, so small batches stayed in eager PyTorch.",
    "A persistent grid sized to the SM count beat one block per row by roughly 1.3x.",
    "Vectorised 16-byte loads only helped once the innermost dimension was contiguous.",
    "Open question: whether splitting the KV sequence pays off for the shortest sequences.",
)
_LEAKY_LINES = (
    "Use `cute.make_layout((128, 64), stride=(64, 1))` for the shared tile.",
    "```python\nbuf = T.alloc_buffer((128,), 'float32')\n```",
    "$ python bench.py --iters 50",
)


def synthetic_study(
    out: Path, models: tuple[str, ...] = ("synthetic/model-a", "synthetic/model-b"), seed: int = 7
) -> list[Path]:
    """Write solo and transfer job folders for a made-up study; returns the job folders.

    Each model attempts 24 problems (four per family) in both DSLs, then both transfer arms; the
    transfer effects are drawn from a per-model, per-direction distribution, so the sample report
    shows differences that mean nothing about any real model.
    """
    rng = random.Random(seed)
    problems = [f"{lo + k:02d}_synthetic_{family}_{k}" for lo, _hi, family in FAMILY_ID_RANGES
                for k in range(4)]
    tasks_dir = out / "tasks"
    jobs_dir = out / "jobs"
    job_dirs: list[Path] = []
    for m_index, model in enumerate(models):
        slug = model_slug(model)
        solo: dict[tuple[str, str], FakeAttempt] = {}
        for dsl, pass_p in (("cutedsl", 0.55 + 0.1 * m_index), ("tirx", 0.45 + 0.1 * m_index)):
            for problem in problems:
                passed = rng.random() < pass_p
                skill_lines = rng.sample(_SKILL_LINES, k=rng.randint(2, 4))
                if rng.random() < 0.25 + 0.15 * m_index:
                    skill_lines.append(rng.choice(_LEAKY_LINES))
                skill = "# Findings\n\n" + "\n".join(f"- {s}" for s in skill_lines) + "\n"
                if rng.random() < 0.06:
                    skill = None
                infra = rng.random() < 0.03
                solo[(problem, dsl)] = FakeAttempt(
                    problem=problem,
                    dsl=dsl,
                    status="PASSED" if passed else rng.choice(("INCORRECT", "COMPILE_ERROR", "TIMEOUT")),
                    kernel_ms=round(rng.uniform(0.05, 2.0), 4) if passed else None,
                    eager_ms=2.5,
                    skill=skill,
                    exception="EnvironmentStartTimeoutError" if infra else None,
                    rewards=not infra,
                )
            job_dir = jobs_dir / solo_job_name(slug, dsl)
            write_job(job_dir, model, [a for (p, d), a in solo.items() if d == dsl], tasks_dir)
            job_dirs.append(job_dir)
        for source_dsl, target_dsl in (("cutedsl", "tirx"), ("tirx", "cutedsl")):
            direction = direction_of(source_dsl, target_dsl)
            effect = rng.gauss(0.15 if m_index == 0 else -0.05, 0.05)
            for problem in problems:
                src, base = solo[(problem, source_dsl)], solo[(problem, target_dsl)]
                if src.skill is None or src.exception:
                    continue
                attachment = out / "runs" / slug / "skills" / direction / f"{problem}_{target_dsl}.md"
                attachment.parent.mkdir(parents=True, exist_ok=True)
                attachment.write_text(render_attachment(src.skill))
                p_pass = min(0.95, max(0.05, (0.5 if base.passed else 0.2) + effect
                                       + (0.15 if src.passed else -0.05)))
                passed = rng.random() < p_pass
                ms = None
                if passed:
                    ref = base.kernel_ms if base.kernel_ms else rng.uniform(0.05, 2.0)
                    ms = round(ref / max(0.3, rng.lognormvariate(effect, 0.35)), 4)
                attempt = FakeAttempt(
                    problem=problem,
                    dsl=target_dsl,
                    status="PASSED" if passed else rng.choice(("INCORRECT", "RUNTIME_ERROR")),
                    kernel_ms=ms,
                    eager_ms=2.5,
                    skill="# Findings\n\n- " + rng.choice(_SKILL_LINES) + "\n",
                    exception="ApiConnectionError" if rng.random() < 0.02 else None,
                )
                job_dir = jobs_dir / transfer_job_name(slug, direction, problem)
                write_job(job_dir, model, [attempt], tasks_dir,
                          extra_instruction_paths={attempt.task: attachment})
                job_dirs.append(job_dir)
    return job_dirs


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python tests/skill_transfer/st_synthetic.py OUT_DIR")
    out = Path(args[0])
    jobs = synthetic_study(out)
    print(f"wrote {len(jobs)} synthetic Harbor job folders under {out / 'jobs'}")


if __name__ == "__main__":
    main()
