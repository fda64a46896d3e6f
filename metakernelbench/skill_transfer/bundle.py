"""``mkb submission``: check finished job folders against the protocol, then write the bundle a
submitter uploads.

``mkb check-submission`` says whether job folders followed the leaderboard protocol; a submitter
then still has to gather the folders, work out the row's figures and find Harbor's upload and
leaderboard commands. This does all of it in one step, and only for an accepted submission:

- ``jobs/<job>/``: a copy of each checked job folder, exactly what ``harbor upload`` takes (a job
  folder with its ``config.json`` and ``result.json``);
- ``leaderboard-row.yaml``: the row for ``harbor hub leaderboard row create``, validated with
  Harbor's own ``LeaderboardRowsCreateConfig``: the agent and model as metadata, the dataset metric
  (``tasks/metric.py``: score, pass rate, geomean speedup, INFRA_ERROR excluded) over every trial
  and per arm as metrics, and every trial's id, so the row links to the uploaded trials;
- ``submission.json``: the same figures and the check's verdict (``Submission``);
- ``UPLOAD.md``: the exact commands, in order, and what each one sends.

The row's columns and ranking are ``configs/leaderboard.yaml`` (ranked by ``metrics.score``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from uuid import UUID

import yaml
from harbor.hub.leaderboards import LeaderboardRowsCreateConfig
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import TrialResult
from pydantic import BaseModel

from metakernelbench.adapters import config
from metakernelbench.adapters.dataset_metric import dataset_metric

from .families import parse_task_name
from .submission import ARMS, arm_name, check_submission, dataset_version
from .trials import iter_trial_dirs

__all__ = ["LEADERBOARD", "RejectedSubmission", "Submission", "figures", "write_bundle"]

LEADERBOARD = f"{config.HUB_DATASET_NAME}/main"  # org/package/name of the committed leaderboard config


class Submission(BaseModel):
    """What the bundle holds: the verdict, the figures and the trials they come from."""

    dataset: str
    dataset_version: str | None
    agent: str
    model: str | None
    trials: int
    jobs: list[str]
    metrics: dict[str, float | int]
    trial_ids: list[UUID]


class RejectedSubmission(ValueError):
    """The job folders departed from the protocol; ``problems`` names each departure."""

    def __init__(self, problems: list[str]):
        super().__init__(f"{len(problems)} departure(s) from the protocol")
        self.problems = problems


def _trials(job_dirs: list[Path]) -> list[tuple[TrialResult, Path]]:
    found = []
    for job_dir in job_dirs:
        for trial_dir in iter_trial_dirs(job_dir, depth=1):
            found.append((TrialResult.model_validate_json(TrialPaths(trial_dir).result_path.read_text()), trial_dir))
    return found


def _reward(trial_dir: Path) -> dict | None:
    path = TrialPaths(trial_dir).verifier_dir / "reward.json"
    return json.loads(path.read_text()) if path.is_file() else None


def figures(job_dirs: list[Path]) -> tuple[dict[str, float | int], list[UUID], TrialResult]:
    """The dataset metric over every trial and per arm (``<figure>_<arm>``), and the trial ids."""
    trials = _trials(job_dirs)
    rewards = [_reward(d) for _, d in trials]
    metrics: dict[str, float | int] = dict(dataset_metric(rewards))
    for arm in ARMS:
        in_arm = [_reward(d) for r, d in trials
                  if arm_name(r, parse_task_name(r.task_name.rpartition("/")[2])[1]) == arm]
        for key, value in dataset_metric(in_arm).items():
            if key in ("score", "pass_rate", "geomean_speedup"):
                metrics[f"{key}_{arm}"] = value
    return metrics, [r.id for r, _ in trials], trials[0][0]


def _upload_md(jobs: list[str]) -> str:
    uploads = "\n".join(f"harbor upload jobs/{name} --share {config.ORG}" for name in jobs)
    return f"""# Uploading this submission

Checked and accepted by `mkb submission` against the leaderboard protocol (docs/running.md,
"Leaderboard"). From this folder:

```bash
harbor auth login                       # GitHub sign-in; Harbor keeps the token
{uploads}
```

`harbor upload` sends each job folder's `config.json`, `result.json` and every trial folder (its
config, result, agent logs and trajectory, verifier output with `reward.json` and `grade.json`, and
the collected `artifacts/app/kernel.py` and `artifacts/app/SKILL.md`) to Harbor Hub, private to you
and shared with the `{config.ORG}` organisation.

The organisation's owners re-check the uploaded jobs (`mkb submission` on them) and add the row:

```bash
harbor hub leaderboard row create {LEADERBOARD} --config leaderboard-row.yaml
```

which sends the row's metadata, its metrics (the dataset metric over all trials and per arm) and
the ids of the trials it links to.
"""


def write_bundle(job_dirs: list[Path], reference_tasks: Path, out: Path) -> Submission:
    """Check ``job_dirs`` and, if accepted, write the bundle under ``out`` (which must not exist)."""
    report = check_submission(job_dirs, reference_tasks)
    if not report.accepted:
        raise RejectedSubmission(report.problems)
    metrics, trial_ids, first = figures(job_dirs)
    agent = first.config.agent
    submission = Submission(
        dataset=config.DATASET_NAME, dataset_version=dataset_version(reference_tasks), agent=agent.name or "",
        model=agent.model_name, trials=report.trials, jobs=[d.name for d in job_dirs], metrics=metrics,
        trial_ids=trial_ids,
    )
    row = LeaderboardRowsCreateConfig.model_validate({"rows": [{
        "metadata": {"agent": submission.agent, "model": submission.model or "",
                     "dataset_version": submission.dataset_version or ""},
        "metrics": metrics,
        "trial_ids": [str(t) for t in trial_ids],
    }]})
    out.mkdir(parents=True)
    for job_dir in job_dirs:
        shutil.copytree(job_dir, out / "jobs" / job_dir.name)
    (out / "leaderboard-row.yaml").write_text(yaml.safe_dump(row.model_dump(mode="json"), sort_keys=False))
    (out / "submission.json").write_text(submission.model_dump_json(indent=2) + "\n")
    (out / "UPLOAD.md").write_text(_upload_md(submission.jobs))
    return submission
