"""Harbor shows the dataset metric of an arm's job by name: its job summary and `harbor view`.

An arm's job config (``configs/jobs/``) names ``tasks/metric.py``. Here Harbor resolves the metrics
from that config (``Job._resolve_metrics``), runs the script with ``uv`` through its own
``_refresh_metrics_for_eval`` on the rewards of a synthetic job folder, and then its summary table
(``print_job_results_tables``, what ``harbor run`` prints at the end) and its viewer's API (what
``harbor view`` shows) are read back. Only the job loop that would have run the trials is skipped.
"""

import asyncio
import json
import os
import shutil
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from fastapi.testclient import TestClient
from harbor.cli import jobs as harbor_jobs
from harbor.job import Job
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult, JobStats
from harbor.models.trial.result import TrialResult
from harbor.viewer.server import create_app
from st_synthetic import FakeAttempt, job_config_uuid, write_job

from metakernelbench.problems import REPO_ROOT

UV = shutil.which("uv") or (str(Path(sys.executable).parent / "uv") if (Path(sys.executable).parent / "uv").is_file()
                            else None)
NAMES = ["score", "pass_rate", "geomean_speedup", "scored", "infra_errors", "no_reward"]
T = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"


def _attempts() -> list[FakeAttempt]:
    return [
        FakeAttempt(problem=T, dsl="tirx", kernel_ms=1.0, eager_ms=4.0),  # speedup 4
        FakeAttempt(problem="25_kv_copy", dsl="tirx", kernel_ms=0.25, eager_ms=4.0),  # speedup 16
        FakeAttempt(problem="01_decode", dsl="tirx", status="INCORRECT", kernel_ms=None),
        FakeAttempt(problem="02_decode", dsl="tirx", status="INFRA_ERROR", kernel_ms=None),  # excluded, counted
        FakeAttempt(problem="03_decode", dsl="tirx", rewards=False, exception="EnvironmentStartTimeoutError"),
    ]


@pytest.mark.skipif(UV is None, reason="uv is not installed (pip install -e '.[dev]' installs it)")
def test_summary_and_viewer_show_the_named_metrics(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the configs are run from the repository root (script_path is relative)
    monkeypatch.setenv("PATH", f"{Path(UV).parent}:{os.environ['PATH']}")
    data = yaml.safe_load((REPO_ROOT / "configs" / "jobs" / "solo_tirx.yaml").read_text())
    data.update(jobs_dir=str(tmp_path / "jobs"), agents=[{"name": "terminus-2", "model_name": "synthetic/model"}])
    config = JobConfig.model_validate(data)
    metrics, _ = asyncio.run(Job._resolve_metrics(config, []))

    job_dir = tmp_path / "jobs" / config.job_name
    trial_dirs = write_job(job_dir, "synthetic/model", _attempts(), job_config=config)
    results = []
    for trial_dir in trial_dirs:  # trials of `-c configs/jobs/...` come from the dataset folder `tasks`
        result = TrialResult.model_validate_json((trial_dir / "result.json").read_text())
        result.source = "tasks"
        (trial_dir / "result.json").write_text(result.model_dump_json(indent=4))
        results.append(result)

    job = SimpleNamespace(_metrics=metrics, _live_rewards=defaultdict(dict), _job_result=JobResult(
        id=job_config_uuid(config.job_name), started_at=results[0].started_at, finished_at=results[-1].finished_at,
        n_total_trials=len(results), stats=JobStats.from_trial_results(results, n_total_trials=len(results))))
    for result in results:
        key, dataset = Job._evals_key_for_result(result)
        job._live_rewards[key][result.trial_name] = result.verifier_result.rewards if result.verifier_result else None
    Job._refresh_metrics_for_eval(job, key, dataset)
    (job_dir / "result.json").write_text(job._job_result.model_dump_json(indent=4, exclude={"trial_results"}))

    figures = job._job_result.stats.evals[key].metrics
    assert len(figures) == 1 and list(figures[0]) == NAMES  # one metric: the dataset's, not Harbor's mean
    assert figures[0]["scored"] == 3 and figures[0]["infra_errors"] == 1 and figures[0]["no_reward"] == 1
    assert figures[0]["score"] == pytest.approx(20 / 3) and figures[0]["geomean_speedup"] == pytest.approx(8.0)

    monkeypatch.setattr(harbor_jobs.console, "width", 300)
    with harbor_jobs.console.capture() as captured:
        harbor_jobs.print_job_results_tables(job._job_result)
    table = captured.get()
    header = next(line for line in table.splitlines() if "Trials" in line)
    assert [c.strip() for c in header.strip("│┃ ").split("┃")][2:] == [n.title() for n in NAMES]
    assert "6.667" in table and "8.000" in table and "Eager_Ms" not in table

    client = TestClient(create_app(tmp_path / "jobs"))
    listed = client.get("/api/jobs").json()["items"]
    assert [list(e["metrics"][0]) for e in listed[0]["evals"].values()] == [NAMES]
    detail = client.get(f"/api/jobs/{config.job_name}").json()
    assert json.dumps(detail["stats"]["evals"][key]["metrics"][0]) == json.dumps(figures[0])
