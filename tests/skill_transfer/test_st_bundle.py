"""``mkb submission``: an accepted study becomes an upload bundle; a rejected one writes nothing.

The job folders are fabricated the way Harbor writes them (``st_synthetic``, via the study of
``test_st_submission``): four arms over problems 28 and 25, every attempt PASSED at 4x.
"""

import json
import tomllib

import jsonschema
import yaml
from harbor.cli.hub_leaderboards import _load_config
from harbor.hub.leaderboards import LeaderboardCreateConfig, LeaderboardRowsCreateConfig
from harbor.models.job.config import JobConfig
from harbor.models.trial.paths import TrialPaths
from test_st_submission import _study
from typer.testing import CliRunner

from metakernelbench.cli import app
from metakernelbench.problems import REPO_ROOT
from metakernelbench.skill_transfer.bundle import Submission

LEADERBOARD = REPO_ROOT / "configs" / "leaderboard.yaml"


def test_an_accepted_study_becomes_a_bundle(tmp_path):
    tasks, jobs = _study(tmp_path)
    out = tmp_path / "bundle"
    result = CliRunner().invoke(app, ["submission", *map(str, jobs), "--tasks", str(tasks), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "accepted: 8 trial(s)" in result.output and "score 4.000" in result.output

    submission = Submission.model_validate_json((out / "submission.json").read_text())
    assert submission.trials == 8 and submission.dataset == "metakernelbench"
    assert submission.metrics["score"] == 4.0 and submission.metrics["pass_rate"] == 1.0
    assert submission.metrics["score_solo_tirx"] == 4.0 and submission.metrics["infra_errors"] == 0
    # every job folder is copied whole: what `harbor upload` takes (config.json and result.json at its top)
    for job in jobs:
        copy = out / "jobs" / job.name
        assert (copy / "result.json").is_file()
        JobConfig.model_validate_json((copy / "config.json").read_text())
        assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in job.iterdir())
    # the row is what `harbor hub leaderboard row create --config` reads, linked to every trial
    row = LeaderboardRowsCreateConfig.model_validate(_load_config(out / "leaderboard-row.yaml")).rows[0]
    trial_ids = {str(json.loads(TrialPaths(t).result_path.read_text())["id"])
                 for job in jobs for t in job.iterdir() if t.is_dir()}
    assert {str(t) for t in row.trial_ids} == trial_ids and len(trial_ids) == 8
    assert row.metrics["score"] == 4.0 and row.metadata["agent"] == submission.agent
    board = LeaderboardCreateConfig.model_validate(yaml.safe_load(LEADERBOARD.read_text()))
    jsonschema.validate(row.metrics, board.metrics_schema)  # the row fits the committed leaderboard
    jsonschema.validate(row.metadata, board.metadata_schema)
    upload = (out / "UPLOAD.md").read_text()
    for job in jobs:
        assert f"harbor upload jobs/{job.name} --share metakernelbench" in upload
    assert "harbor hub leaderboard row create metakernelbench/metakernelbench/main" in upload


def test_a_rejected_study_writes_nothing(tmp_path):
    tasks, jobs = _study(tmp_path)
    config = json.loads((jobs[0] / "config.json").read_text())
    (jobs[0] / "config.json").write_text(json.dumps({**config, "timeout_multiplier": 2.0}))
    out = tmp_path / "bundle"
    result = CliRunner().invoke(app, ["submission", *map(str, jobs), "--tasks", str(tasks), "--out", str(out)])
    assert result.exit_code == 1 and "timeout_multiplier = 2.0" in result.output
    assert "rejected" in result.output and not out.exists()


def test_the_leaderboard_config_ranks_by_the_dataset_score():
    board = LeaderboardCreateConfig.model_validate(yaml.safe_load(LEADERBOARD.read_text()))
    assert board.package == "metakernelbench/metakernelbench"
    assert board.rank_by[0].accessor == "metrics.score" and board.rank_by[0].direction == "desc"
    manifest = tomllib.loads((REPO_ROOT / "tasks" / "dataset.toml").read_text())
    assert board.package == manifest["dataset"]["name"]
    # every metric column is a figure the bundle's row carries
    metric = set(board.metrics_schema["properties"])
    assert {c.accessor.split(".", 1)[1] for c in board.columns if c.accessor.startswith("metrics.")} <= metric
    assert set(board.metrics_schema["required"]) <= metric
