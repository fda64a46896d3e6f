"""``mkb check-submission``: a protocol-following set of job folders is accepted; each departure is named."""

import json
import shutil

import pytest
from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths
from st_synthetic import FakeAttempt, write_job
from typer.testing import CliRunner

from metakernelbench.adapters.build import build
from metakernelbench.cli import app
from metakernelbench.problems import REPO_ROOT, problems_dir
from metakernelbench.skill_transfer.skill import render_attachment
from metakernelbench.skill_transfer.submission import check_submission

PROBLEMS = ("28_fused_add_rmsnorm_h4096_llama31_8b_bf16", "25_batched_kv_cache_block_copy_remap_uint8")
MODEL = "provider/model-x"
FILES = ("mlp_norm/28_fused_add_rmsnorm_h4096_llama31_8b_bf16.py",
         "kv_cache/25_batched_kv_cache_block_copy_remap_uint8.py")


def _copy_problems(root):
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(problems_dir() / rel, root / rel)
    return root


def _study(root):
    """Reference tasks (problems 28 and 25) and four arm jobs over them, as Harbor would write them."""
    tasks = root / "tasks"
    build(_copy_problems(root / "problems"), tasks, tasks / "dataset.toml", REPO_ROOT / "oracles")
    jobs = root / "jobs"
    dirs = []
    for dsl in ("cutedsl", "tirx"):
        dirs.append(jobs / f"solo_{dsl}")
        write_job(dirs[-1], MODEL, [FakeAttempt(problem=p, dsl=dsl) for p in PROBLEMS], tasks)
    for source, target in (("cutedsl", "tirx"), ("tirx", "cutedsl")):
        direction = f"{source}2{target}"
        attachments = {}
        for p in PROBLEMS:
            path = root / "runs" / "skills" / direction / f"{p}_{target}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render_attachment("A finding.\n"))
            attachments[f"{p}_{target}"] = path
        dirs.append(jobs / direction)
        write_job(dirs[-1], MODEL, [FakeAttempt(problem=p, dsl=target) for p in PROBLEMS], tasks,
                  extra_instruction_paths=attachments)
    for trial in jobs.glob("*/*/result.json"):  # Harbor records the task's checksum; the fake does not
        data = json.loads(trial.read_text())
        with pytest.warns(DeprecationWarning):
            data["task_checksum"] = Task(tasks / data["task_name"].rpartition("/")[2]).checksum
        trial.write_text(json.dumps(data))
    return tasks, dirs


def test_a_protocol_following_submission_is_accepted(tmp_path):
    tasks, jobs = _study(tmp_path)
    report = check_submission(jobs, tasks)
    assert report.problems == [] and report.trials == 8
    assert report.arms == {"cutedsl2tirx": 2, "solo_cutedsl": 2, "solo_tirx": 2, "tirx2cutedsl": 2}
    result = CliRunner().invoke(app, ["check-submission", *map(str, jobs), "--tasks", str(tasks)])
    assert result.exit_code == 0 and "accepted" in result.output


def test_every_departure_is_named(tmp_path):
    tasks, jobs = _study(tmp_path)
    trial = sorted(p for p in jobs[2].iterdir() if p.is_dir())[0]
    paths = TrialPaths(trial)
    result = json.loads(paths.result_path.read_text())
    result["config"]["agent"]["override_timeout_sec"] = 9999.0
    result["config"]["agent"]["kwargs"] = {"temperature": 0.2}
    paths.result_path.write_text(json.dumps(result))
    reward = json.loads((paths.verifier_dir / "reward.json").read_text())
    (paths.verifier_dir / "reward.json").write_text(json.dumps({**reward, "reward": 50.0}))
    config = json.loads((jobs[0] / "config.json").read_text())
    (jobs[0] / "config.json").write_text(json.dumps({**config, "timeout_multiplier": 2.0}))
    edited = tasks / f"{PROBLEMS[0]}_tirx" / "instruction.md"
    edited.write_text(edited.read_text() + "a hint\n")

    problems = check_submission(jobs[:3], tasks).problems
    text = "\n".join(problems)
    assert "solo_cutedsl: timeout_multiplier = 2.0" in text
    assert "agent override_timeout_sec = 9999.0" in text
    assert "verifier/reward.json is not what Harbor recorded" in text
    assert "reward 50.0 does not follow from grade.json" in text
    assert "2 different agent configurations" in text
    assert f"task {PROBLEMS[0]}_tirx differs from the published task" in text
    assert "arm tirx2cutedsl: no trials" in text
    result = CliRunner().invoke(app, ["check-submission", *map(str, jobs), "--tasks", str(tasks)])
    assert result.exit_code == 1 and "rejected" in result.output
