"""The task variants and run files: remote-judge tasks, the Terminal-Bench layout, registry.json, job configs."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from adapters_support import ORACLES, T28, copy_problems
from harbor.models.job.config import JobConfig
from harbor.models.task.config import TaskConfig
from harbor.models.task.task import Task
from harbor.registry.client.json import JsonRegistryClient

from metakernelbench.adapters.build import build
from metakernelbench.adapters.dsl import DSLS
from metakernelbench.adapters.registry import registry_json
from metakernelbench.adapters.terminal_bench import build_terminal_bench
from metakernelbench.problems import REPO_ROOT, problem_paths

TB_PYTHON = REPO_ROOT / ".venv-tb" / "bin" / "python"
TB_CHECK = """
import sys
from pathlib import Path
import yaml
from terminal_bench.dataset.dataset import Dataset
from terminal_bench.handlers.trial_handler import Task, TaskPaths
root = Path(sys.argv[1])
names = sorted(p.name for p in root.iterdir())
assert sorted(p.name for p in Dataset(path=root).tasks) == names
for name in names:
    paths = TaskPaths(root / name)
    task = Task.from_yaml(paths.task_config_path)
    assert task.max_agent_timeout_sec == 2400 and task.parser_name.value == "pytest"
    assert task.author_name == "MetaKernelBench contributors" and task.category == "gpu-kernel-optimization"
    assert paths.solution_path.is_file() and paths.run_tests_path.is_file() and paths.test_dir.is_dir()
    compose = yaml.safe_load(paths.docker_compose_path.read_text())
    assert compose["services"]["client"]["image"] == "${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}"
print("validated", len(names))
"""


def test_remote_judge_tasks(tmp_path):
    problems = copy_problems(tmp_path / "problems", ids=("28",))
    out = tmp_path / "remote"
    build(problems, out, out / "dataset.toml", ORACLES, remote_judge="https://judge.example.org:8443")
    for dsl in DSLS:
        task = out / f"{T28}_{dsl}"
        assert Task.is_valid_dir(task)
        assert not list(task.rglob("docker-compose.yaml"))
        cfg = TaskConfig.model_validate_toml((task / "task.toml").read_text())
        for env in (cfg.environment, cfg.verifier.environment):
            assert env.network_mode.value == "allowlist" and env.allowed_hosts == ["judge.example.org"]
        assert cfg.environment.env["MKB_JUDGE_URL"] == "${MKB_JUDGE_URL:-https://judge.example.org:8443}"


def test_registry_json_resolves_every_task(tmp_path, monkeypatch):
    problems = copy_problems(tmp_path / "problems")
    out = tmp_path / "tasks"
    build(problems, out, tmp_path / "dataset.toml", ORACLES, images=tmp_path)
    registry = tmp_path / "registry.json"
    assert registry.read_text() == registry_json(sorted(out.iterdir()))
    monkeypatch.chdir(tmp_path)
    client = JsonRegistryClient(path=registry)
    spec = client.dataset_specs["metakernelbench"]["0.1.0"]
    assert len(spec.tasks) == 4
    for task in spec.tasks:
        assert Task.is_valid_dir(Path(task.to_source_task_id().path))


def test_committed_registry_matches_the_tasks():
    data = json.loads((REPO_ROOT / "registry.json").read_text())
    names = sorted(t["name"] for t in data[0]["tasks"])
    folders = sorted(p.name for p in (REPO_ROOT / "tasks").iterdir() if (p / "task.toml").is_file())
    assert names == [f"metakernelbench/{f}" for f in folders]  # each task's [task] name
    assert sorted(Path(t["path"]).name for t in data[0]["tasks"]) == folders
    assert len(names) == 2 * len(problem_paths(REPO_ROOT / "problems"))  # both DSLs of every problem


def test_job_configs_for_each_arm():
    arms = sorted(p.stem for p in (REPO_ROOT / "configs" / "jobs").glob("*.yaml"))
    assert arms == ["cutedsl2tirx", "solo_cutedsl", "solo_tirx", "tirx2cutedsl"]
    for arm in arms:
        config = JobConfig.model_validate(yaml.safe_load((REPO_ROOT / "configs" / "jobs" / f"{arm}.yaml").read_text()))
        target = arm.split("2")[-1].removeprefix("solo_")
        assert config.datasets[0].task_names == [f"*_{target}"] and config.job_name == arm
        # the dataset metric by name; relative to the repository root, where the configs are run
        assert [(m.type, m.kwargs) for m in config.metrics] == [("uv-script", {"script_path": "tasks/metric.py"})]
        assert (REPO_ROOT / config.metrics[0].kwargs["script_path"]).is_file()
        # extra="forbid" is how `harbor run -c` validates a config file
        JobConfig.model_validate(yaml.safe_load((REPO_ROOT / "configs" / "jobs" / f"{arm}.yaml").read_text()),
                                 extra="forbid")


def test_terminal_bench_layout(tmp_path):
    problems = copy_problems(tmp_path / "problems")
    out = tmp_path / "tb"
    written = build_terminal_bench(problems, out, ORACLES)
    assert len(written) == 4
    task = out / f"{T28}_tirx"
    names = sorted(p.relative_to(task).as_posix() for p in task.rglob("*") if p.is_file())
    for needed in ("task.yaml", "Dockerfile", "docker-compose.yaml", "run-tests.sh", "solution.sh", "problem.py",
                   "submit", "tests/grading.json", "tests/summary.py",
                   "tests/client/metakernelbench/judge/final.py"):
        assert needed in names
    assert os.access(task / "run-tests.sh", os.X_OK) and os.access(task / "solution.sh", os.X_OK)
    data = yaml.safe_load((task / "task.yaml").read_text())
    assert data["instruction"] == (REPO_ROOT / "tasks" / f"{T28}_tirx" / "instruction.md").read_text()
    compose = yaml.safe_load((task / "docker-compose.yaml").read_text())
    assert "--allow-final" in compose["services"]["judge-relay"]["command"]
    assert compose["services"]["client"]["networks"] == ["sandbox"]
    assert "cat > /app/kernel.py" in (task / "solution.sh").read_text()
    if not TB_PYTHON.is_file():
        pytest.skip("terminal-bench is installed into .venv-tb by scripts/setup-dev.sh; not here")
    run = subprocess.run([str(TB_PYTHON), "-c", TB_CHECK, str(out)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "validated 4" in run.stdout
