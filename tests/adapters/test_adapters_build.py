"""``mkb build``: Harbor validity and lint, determinism, stale folders, ``--check``, the manifest."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from adapters_support import LINT_RULES, ORACLES, T25, T28, compose_available
from harbor.lint import lint_task
from harbor.lint.models import LintRule
from harbor.models.dataset.manifest import DatasetManifest
from harbor.models.task.config import TaskConfig
from harbor.models.task.task import Task
from harbor.publisher.packager import Packager
from typer.testing import CliRunner

from metakernelbench.adapters.build import build, check
from metakernelbench.cli import app

ALL_TASKS = sorted(f"{stem}_{dsl}" for stem in (T28, T25) for dsl in ("cutedsl", "tirx"))


def _task_dirs(out):
    return sorted(p for p in out.iterdir() if p.is_dir())


def test_every_task_is_a_valid_harbor_task(built):
    out, _ = built
    assert [p.name for p in _task_dirs(out)] == ALL_TASKS
    for task_dir in _task_dirs(out):
        config = TaskConfig.model_validate_toml((task_dir / "task.toml").read_text())
        assert config.task.name == f"metakernelbench/{task_dir.name}"
        assert Task.is_valid_dir(task_dir)
        task = Task(task_dir)
        assert task.name == config.task.name and task.instruction.strip()


def test_harbor_lint_is_clean(built):
    out, _ = built
    for task_dir in _task_dirs(out):
        assert lint_task(task_dir, selected_rules=LINT_RULES) == []
        if compose_available():
            # Beyond the defaults, only the image digest and the root agent user are reported.
            extra = {f.rule for f in lint_task(task_dir)}
            assert extra <= {LintRule.UNPINNED_IMAGE, LintRule.ROOT_AGENT}


def test_harbor_lint_cli_is_clean(built):
    out, _ = built
    harbor = Path(sys.executable).parent / "harbor"
    harbor = harbor if harbor.is_file() else shutil.which("harbor")
    assert harbor, "the harbor CLI is installed with the project"
    select = [] if compose_available() else [arg for rule in sorted(LINT_RULES) for arg in ("--select", rule)]
    run = subprocess.run([str(harbor), "lint", *select, *map(str, _task_dirs(out))], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_lint_catches_a_leak_into_the_agent_image(built, tmp_path):
    out, _ = built
    task = tmp_path / "leaky"
    shutil.copytree(out / f"{T28}_cutedsl", task)
    dockerfile = task / "environment/Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "COPY tests/test.sh /app/\n")
    rules = {f.rule for f in lint_task(task, selected_rules=LINT_RULES)}
    assert LintRule.AGENT_IMAGE_TEST_LEAK in rules


def _snapshot(root):
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_two_renders_are_byte_identical(workspace, tmp_path):
    problems, _, _ = workspace
    a, b = tmp_path / "a", tmp_path / "b"
    build(problems, a / "tasks", a / "dataset.toml", ORACLES)
    build(problems, b / "tasks", b / "dataset.toml", ORACLES)
    assert _snapshot(a) == _snapshot(b)


def test_stale_folders_are_removed(workspace):
    problems, out, manifest = workspace
    build(problems, out, manifest, ORACLES)
    (out / "notes").mkdir()  # not a task folder: left alone
    (problems / "kv_cache" / f"{T25}.py").unlink()
    report = build(problems, out, manifest, ORACLES)
    assert sorted(report.removed) == [f"{T25}_cutedsl", f"{T25}_tirx"]
    assert sorted(p.name for p in _task_dirs(out)) == [f"{T28}_cutedsl", f"{T28}_tirx", "notes"]
    names = [t.name for t in DatasetManifest.from_toml_file(manifest).tasks]
    assert names == [f"metakernelbench/{T28}_cutedsl", f"metakernelbench/{T28}_tirx"]


def test_check_detects_every_kind_of_difference(workspace):
    problems, out, manifest = workspace
    build(problems, out, manifest, ORACLES)
    assert check(problems, out, manifest, ORACLES) == []

    task = out / f"{T28}_tirx"
    (task / "instruction.md").write_text((task / "instruction.md").read_text() + "hand edit\n")
    (task / "environment/notes.txt").write_text("extra\n")
    (out / f"{T25}_cutedsl/tests/grading.json").unlink()
    (task / "tests/test.sh").chmod(0o644)
    shutil.copytree(task, out / "99_gone_tirx")
    diffs = check(problems, out, manifest, ORACLES)
    assert f"changed  tasks/{T28}_tirx/instruction.md" in diffs
    assert f"extra    tasks/{T28}_tirx/environment/notes.txt" in diffs
    assert f"missing  tasks/{T25}_cutedsl/tests/grading.json" in diffs
    assert f"mode     tasks/{T28}_tirx/tests/test.sh (executable bit)" in diffs
    assert "stale    tasks/99_gone_tirx/ (no such problem)" in diffs
    assert "changed  dataset.toml" not in diffs  # the manifest itself was not edited ...
    build(problems, out, manifest, ORACLES)
    manifest.write_text(manifest.read_text().replace("sha256:", "sha256:0", 1)[:-1])
    assert check(problems, out, manifest, ORACLES) == ["changed  dataset.toml"]  # ... now it is


def test_build_check_cli_exit_codes(workspace, monkeypatch):
    problems, out, manifest = workspace
    monkeypatch.chdir(problems.parent)
    runner = CliRunner()
    args = ["build", "--problems", "problems", "--out", "tasks", "--manifest", "dataset.toml",
            "--oracles", str(ORACLES)]
    assert runner.invoke(app, args).exit_code == 0
    assert runner.invoke(app, [*args, "--check"]).exit_code == 0
    edited = out / f"{T25}_tirx/task.toml"
    edited.write_text(edited.read_text().replace("timeout_sec = 2400.0", "timeout_sec = 9999.0"))
    result = runner.invoke(app, [*args, "--check"])
    assert result.exit_code == 1
    assert f"changed  tasks/{T25}_tirx/task.toml" in result.output
    only = runner.invoke(app, [*args, "--check", "--only", "28"])
    assert only.exit_code == 0  # the edit is in problem 25's folder
    bad = runner.invoke(app, [*args, "--only", "77"])
    assert bad.exit_code == 2 and "--only names no problem: 77" in bad.output


def test_manifest_pins_harbor_digests(built):
    out, manifest = built
    parsed = DatasetManifest.from_toml_file(manifest)
    assert parsed.dataset.name == "metakernelbench/metakernelbench"
    assert parsed.dataset.version == "0.1.0"
    assert [t.name for t in parsed.tasks] == [f"metakernelbench/{n}" for n in ALL_TASKS]
    for ref in parsed.tasks:
        content_hash, _ = Packager.compute_content_hash(out / ref.short_name)
        assert ref.digest == f"sha256:{content_hash}"


def test_grading_config_has_no_oracle(built):
    out, _ = built
    data = json.loads((out / f"{T28}_cutedsl/tests/grading.json").read_text())
    assert data["problem"] == T28 and data["dsl"] == "cutedsl"
    assert data["problem_file"] == f"problems/mlp_norm/{T28}.py"
    assert data["contract"]["correctness_draws"] == 5 and data["contract"]["speedup_cap"] == 100
    tests_dir = out / f"{T28}_cutedsl/tests"
    oracle = (ORACLES / "mlp_norm" / f"{T28}_cutedsl.py").read_bytes()
    assert not any(p.read_bytes() == oracle for p in tests_dir.rglob("*") if p.is_file())
