"""The dataset metric (``tasks/metric.py``): headline score first, INFRA_ERROR excluded and counted,
and Harbor running it as the dataset's first metric."""

import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from harbor.job import Job
from harbor.metrics.uv_script import UvScript
from harbor.models.job.config import DatasetConfig, JobConfig

from metakernelbench.adapters.dataset_metric import dataset_metric
from metakernelbench.adapters.registry import local_registry_json
from metakernelbench.problems import REPO_ROOT

METRIC = REPO_ROOT / "tasks" / "metric.py"
UV = shutil.which("uv") or (str(Path(sys.executable).parent / "uv") if (Path(sys.executable).parent / "uv").is_file()
                            else None)


def _reward(speedup: float, passed: bool = True, infra: bool = False) -> dict:
    return {"reward": speedup if passed else 0.0, "passed": float(passed), "speedup": speedup,
            "kernel_ms": 1.0, "eager_ms": speedup, "infra_error": float(infra)}


REWARDS = [_reward(2.0), _reward(8.0), _reward(0.5, passed=False), _reward(0.0, passed=False, infra=True), None]


def test_figures_exclude_and_count_infra_errors():
    figures = dataset_metric(REWARDS)
    assert list(figures) == ["score", "pass_rate", "geomean_speedup", "scored", "infra_errors", "no_reward"]
    assert figures["scored"] == 3 and figures["infra_errors"] == 1 and figures["no_reward"] == 1
    assert figures["score"] == pytest.approx(10.0 / 3)  # (2 + 8 + 0) / 3: INFRA_ERROR and no reward left out
    assert figures["pass_rate"] == pytest.approx(2 / 3)
    assert figures["geomean_speedup"] == pytest.approx(4.0)  # sqrt(2 * 8): passed trials only


def test_nothing_scored_gives_zeros_not_nan():
    figures = dataset_metric([_reward(0.0, passed=False, infra=True)])
    assert figures["scored"] == 0 and figures["infra_errors"] == 1
    assert all(math.isfinite(v) for v in figures.values()) and figures["score"] == 0.0


def _rewards_file(tmp_path: Path) -> Path:
    path = tmp_path / "rewards.jsonl"
    path.write_text("".join(("null" if r is None else json.dumps(r)) + "\n" for r in REWARDS))
    return path


def test_the_shipped_file_runs_as_a_script(tmp_path):
    out = tmp_path / "metric.json"
    run = subprocess.run([sys.executable, str(METRIC), "-i", str(_rewards_file(tmp_path)), "-o", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text()) == dataset_metric(REWARDS)


@pytest.mark.skipif(UV is None, reason="uv is not installed (pip install -e '.[dev]' installs it)")
def test_harbor_runs_it_as_a_uv_script(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(UV).parent}:{os.environ['PATH']}")
    assert UvScript(script_path=METRIC).compute(REWARDS) == dataset_metric(REWARDS)


def test_local_registry_makes_it_the_first_metric(tmp_path):
    tasks = REPO_ROOT / "tasks"
    registry = tmp_path / "registry.json"
    registry.write_text(local_registry_json(tasks, sorted(p for p in tasks.iterdir() if p.is_dir()), True))
    metrics: dict = defaultdict(list)
    dataset = DatasetConfig(name="metakernelbench", registry_path=registry)
    asyncio.run(Job._resolve_dataset_metrics(dataset, metrics, []))
    first = metrics["metakernelbench"][0]
    assert isinstance(first, UvScript) and Path(first._script_path) == METRIC.resolve()


def _metrics_of(config: dict) -> dict:
    """The metrics Harbor resolves per dataset for a job config (``Job._resolve_metrics``)."""
    job = JobConfig.model_validate(config)

    async def resolve():
        task_configs = [t for d in job.datasets for t in await d.get_task_configs()]
        return await Job._resolve_metrics(job, task_configs)

    return asyncio.run(resolve())[0]


def test_the_metric_layer_is_the_only_metric_of_a_path_run(monkeypatch):
    """``harbor run -p tasks -c configs/metric.yaml``: the dataset metric, and no mean over reward keys."""
    monkeypatch.chdir(REPO_ROOT)
    layer = yaml.safe_load((REPO_ROOT / "configs" / "metric.yaml").read_text())
    bare = _metrics_of({"datasets": [{"path": "tasks", "task_names": ["28_*"]}]})
    assert [type(m).__name__ for m in bare["tasks"]] == ["Mean"]  # what a bare -p run shows
    with_layer = _metrics_of({**layer, "datasets": [{"path": "tasks", "task_names": ["28_*"]}]})
    assert [type(m) for m in with_layer["tasks"]] == [UvScript]


def test_the_committed_registry_declares_no_mean(monkeypatch):
    """``--repo``/``--registry-path registry.json``: no declared mean, so the metric layer is the only metric."""
    monkeypatch.chdir(REPO_ROOT)
    layer = yaml.safe_load((REPO_ROOT / "configs" / "metric.yaml").read_text())
    dataset = {"name": "metakernelbench", "registry_path": str(REPO_ROOT / "registry.json"),
               "task_names": ["28_*"]}
    assert json.loads((REPO_ROOT / "registry.json").read_text())[0]["metrics"] == []
    metrics = _metrics_of({**layer, "datasets": [dataset]})
    assert [type(m) for m in metrics["metakernelbench"]] == [UvScript]
