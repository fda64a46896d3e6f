"""Harbor's legacy registry entries for the dataset (``harbor run --dataset metakernelbench``).

Three forms of one entry, each validated with Harbor's own ``DatasetSpec`` before it is written:

- ``registry.json`` at the repository root (``mkb build``): task paths relative to the repository,
  no git URL. ``harbor run --repo ORG/REPO@REF --dataset metakernelbench`` reads it from a clone
  (Harbor fills in the repository's URL), and from the repository root it works with
  ``--registry-path registry.json``.
- a local registry (``mkb registry``): absolute task paths, so ``harbor run --dataset
  metakernelbench --registry-path FILE`` works from any folder and offline.
- a git registry (``mkb registry --git-url URL --commit SHA``): every task pinned to a commit of a
  public repository, the form a published registry (Harbor's own ``registry.json``) holds.

Every task is listed under its Harbor name, ``metakernelbench/<NN>_<slug>_<dsl>`` (the ``[task] name``
of its task.toml and of ``dataset.toml``): one name per task everywhere. Harbor uses a registry
entry's name only as a label; ``-i``/``-x`` filters match the task's folder name on every route.

The dataset metric (``tasks/metric.py``, a ``uv-script`` metric) needs a path Harbor can open where
the job runs, so only the local form can name it. The others declare no metric (Harbor's default for
a registry entry): a job config's metric (``-c configs/metric.yaml``) is then the job's only one,
while a declared ``mean`` would come first and average all six reward keys.
"""

from __future__ import annotations

import json
from pathlib import Path

from harbor.models.dataset.paths import DatasetPaths
from harbor.models.registry import DatasetSpec

from . import config

__all__ = ["REGISTRY_NAME", "git_registry_json", "local_registry_json", "registry_json", "task_name"]

REGISTRY_NAME = config.DATASET_NAME


def task_name(task_dir: Path) -> str:
    """The task's Harbor name, ``metakernelbench/<folder>``, as its task.toml and dataset.toml give it."""
    return f"{config.ORG}/{task_dir.name}"


def _spec(tasks: list[dict], metrics: list[dict]) -> str:
    spec = {
        "name": REGISTRY_NAME,
        "version": config.DATASET_VERSION,
        "description": config.DATASET_DESCRIPTION,
        "metrics": metrics,
        "tasks": tasks,
    }
    DatasetSpec.model_validate(spec)
    return json.dumps([spec], indent=2) + "\n"


def registry_json(task_dirs: list[Path]) -> str:
    """The committed registry: paths relative to the repository root (``tasks/<name>``)."""
    tasks = [{"name": task_name(d), "path": f"tasks/{d.name}", "git_url": None, "git_commit_id": None}
             for d in sorted(task_dirs)]
    return _spec(tasks, [])


def local_registry_json(tasks_dir: Path, task_dirs: list[Path], with_metric: bool) -> str:
    """A registry whose task paths are absolute, so it does not depend on the current folder.

    ``with_metric`` names ``tasks_dir/metric.py`` as the dataset's metric (Harbor runs it with
    ``uv``, so only when ``uv`` is installed); otherwise none is declared and Harbor falls back to
    its ``mean`` unless the job config names one.
    """
    root = tasks_dir.resolve()
    tasks = [{"name": task_name(d), "path": str(root / d.name), "git_url": None, "git_commit_id": None}
             for d in sorted(task_dirs)]
    metric = root / DatasetPaths.METRIC_FILENAME
    if with_metric and not metric.is_file():
        raise FileNotFoundError(f"{metric} not found: run `mkb build` first")
    metrics = [{"type": "uv-script", "kwargs": {"script_path": str(metric)}}] if with_metric else []
    return _spec(tasks, metrics)


def git_registry_json(task_dirs: list[Path], git_url: str, commit: str, tasks_subdir: str = "tasks") -> str:
    """A registry pinning every task to ``commit`` of ``git_url`` (what a published registry holds)."""
    if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit.lower()):
        raise ValueError(f"--commit must be a full 40-character commit id, got {commit!r}")
    tasks = [{"name": task_name(d), "path": f"{tasks_subdir}/{d.name}", "git_url": git_url, "git_commit_id": commit}
             for d in sorted(task_dirs)]
    return _spec(tasks, [])
