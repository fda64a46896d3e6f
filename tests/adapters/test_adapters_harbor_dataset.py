"""The dataset as Harbor's own commands see it: one name, ``harbor run --dataset`` from any folder,
``harbor sync`` and ``harbor publish`` finding every task, hand-made task folders rejected."""

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from adapters_support import ORACLES
from harbor.cli.publish import _resolve_paths
from harbor.cli.sync import sync_dataset
from harbor.models.dataset.manifest import DatasetManifest
from typer.testing import CliRunner

from metakernelbench.adapters import config
from metakernelbench.adapters.build import ForeignTaskError, build, check
from metakernelbench.cli import app
from metakernelbench.problems import REPO_ROOT, problem_paths

TASKS = REPO_ROOT / "tasks"
HARBOR = Path(sys.executable).parent / "harbor"
LOCAL_ENV = "metakernelbench.harbor_env:LocalEnvironment"


def _n_tasks() -> int:
    return 2 * len(problem_paths(REPO_ROOT / "problems"))


def test_one_dataset_name_in_the_manifest_and_the_registry():
    manifest = DatasetManifest.from_toml_file(TASKS / "dataset.toml")
    registry = json.loads((REPO_ROOT / "registry.json").read_text())
    assert [entry["name"] for entry in registry] == [config.DATASET_NAME] == ["metakernelbench"]
    assert manifest.dataset.name == f"{config.ORG}/{registry[0]['name']}"
    assert manifest.dataset.version == registry[0]["version"]
    in_registry = sorted(t["name"] for t in registry[0]["tasks"])
    assert sorted(t.name for t in manifest.tasks) == in_registry and len(in_registry) == _n_tasks()
    assert {t.split("/")[0] for t in in_registry} == {config.ORG}
    # the design card's top-level manifest is the one Harbor reads beside the tasks: a link, not a copy
    top = REPO_ROOT / "dataset.toml"
    assert top.is_symlink() and top.resolve() == (TASKS / "dataset.toml").resolve()


@pytest.mark.slow
def test_harbor_run_dataset_dry_run_from_another_folder(tmp_path, monkeypatch):
    """The documented offline command resolves every task from a folder outside the checkout
    (``mkb registry`` run there too, with no ``--tasks``)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    registry = tmp_path / "registry.json"
    made = CliRunner().invoke(app, ["registry", "--out", str(registry)])
    assert made.exit_code == 0, made.output
    assert str(registry.resolve()) in made.output
    run = subprocess.run([str(HARBOR), "run", "--dataset", "metakernelbench", "--registry-path", str(registry),
                          "-a", "oracle", "-e", LOCAL_ENV, "--dry-run"],
                         capture_output=True, text=True, cwd=elsewhere, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert f"Dry run OK — {_n_tasks()} trial(s)" in run.stdout


def test_the_committed_registry_only_works_from_the_checkout(tmp_path):
    """Why ``mkb registry`` exists: relative task paths fail from another folder."""
    run = subprocess.run([str(HARBOR), "run", "--dataset", "metakernelbench", "--registry-path",
                          str(REPO_ROOT / "registry.json"), "-a", "oracle", "-e", LOCAL_ENV, "--dry-run"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode != 0 and "No such file or directory" in run.stdout + run.stderr


def test_git_registry_pins_every_task(tmp_path):
    registry = tmp_path / "git.json"
    sha = "0123456789abcdef0123456789abcdef01234567"
    args = ["registry", "--out", str(registry), "--tasks", str(TASKS), "--git-url",
            "https://github.com/example/metakernelbench.git"]
    assert CliRunner().invoke(app, [*args, "--commit", sha]).exit_code == 0
    tasks = json.loads(registry.read_text())[0]["tasks"]
    assert len(tasks) == _n_tasks()
    assert {(t["git_commit_id"], t["path"].split("/")[0]) for t in tasks} == {(sha, "tasks")}
    bad = CliRunner().invoke(app, [*args, "--commit", "main"])
    assert bad.exit_code == 2 and "full 40-character commit id" in bad.output


def test_harbor_sync_sees_every_task_and_changes_nothing(tmp_path):
    copy = tmp_path / "tasks"
    shutil.copytree(TASKS, copy)
    changes = sync_dataset(copy)
    tasks = [c for c in changes if not c.name.startswith("\\[file]")]
    assert len(tasks) == _n_tasks()
    assert {c.source for c in changes} == {"unchanged"}
    assert (copy / "dataset.toml").read_text() == (TASKS / "dataset.toml").read_text()


def test_harbor_publish_finds_the_dataset_and_every_task():
    """``harbor publish tasks`` up to its authentication step: what it would upload."""
    task_dirs, dataset_dirs, _, _ = _resolve_paths([TASKS])
    assert dataset_dirs == [TASKS.resolve()]
    assert len(task_dirs) == _n_tasks()
    manifest = tomllib.loads((TASKS / "dataset.toml").read_text())
    assert [f["path"] for f in manifest["files"]] == ["metric.py"]


def _hand_made_task(out: Path) -> Path:
    run = subprocess.run([str(HARBOR), "task", "init", "my-kernel-task", "-p", str(out), "--org", config.ORG],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return out / "my-kernel-task"


def test_a_hand_made_task_folder_is_rejected(workspace, monkeypatch):
    problems, out, _ = workspace
    manifest = out / "dataset.toml"
    build(problems, out, manifest, ORACLES)
    assert (_hand_made_task(out) / "task.toml").is_file()
    diffs = check(problems, out, manifest, ORACLES)
    assert any(d.startswith("foreign  tasks/my-kernel-task/ (not generated from a problem") for d in diffs)
    assert "changed  dataset.toml" in diffs  # harbor task init also added it to the manifest
    with pytest.raises(ForeignTaskError, match="tasks/my-kernel-task/ is not generated from a problem"):
        build(problems, out, manifest, ORACLES)

    monkeypatch.chdir(problems.parent)
    args = ["build", "--problems", "problems", "--out", "tasks", "--oracles", str(ORACLES)]
    checked = CliRunner().invoke(app, [*args, "--check"])
    assert checked.exit_code == 1 and "foreign task folders" in checked.output
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "error: tasks/my-kernel-task/ is not generated" in refused.output
