"""Harbor's adapter and task conventions: the adapter's files and every task's standard metadata."""

import json
import tomllib
from pathlib import Path

import harbor

from metakernelbench.adapters import config
from metakernelbench.problems import REPO_ROOT, problem_paths

ADAPTER = REPO_ROOT / "adapters" / "metakernelbench"  # Harbor's layout: adapters/<adapter id>/
TEMPLATE = Path(harbor.__file__).parent / "cli" / "template-adapter"


def _keys(value) -> set[str]:
    return set(value[0]) if isinstance(value, list) else set(value)


def test_adapter_metadata_has_harbors_fields():
    ours, theirs = (json.loads((d / "adapter_metadata.json").read_text()) for d in (ADAPTER, TEMPLATE))
    assert _keys(ours) == _keys(theirs)
    for section in ("original_benchmark", "harbor_adapter"):
        assert _keys(ours[0][section]) == _keys(theirs[0][section])
    n_tasks = sum(1 for p in (REPO_ROOT / "tasks").iterdir() if (p / "task.toml").is_file())
    assert ours[0]["harbor_adapter"][0]["adapted_benchmark_size"] == n_tasks


def test_parity_file_holds_no_unmeasured_figures():
    entry = json.loads((ADAPTER / "parity_experiment.json").read_text())[0]
    template = json.loads((TEMPLATE / "parity_experiment.json").read_text())[0]
    assert set(template) <= set(entry)
    if entry["status"] == "not yet measured":
        assert entry["metrics"] == [] and entry["number_of_runs"] is None and entry["date"] is None


def test_adapter_readme_has_harbors_sections():
    headings = {line for line in (ADAPTER / "README.md").read_text().splitlines() if line.startswith("## ")}
    for needed in ("## Overview", "## Generated Task Structure", "## Run Evaluation / Harness",
                   "## Comparison with Original Benchmark (Parity)", "## Citation"):
        assert needed in headings


def test_every_task_carries_the_standard_metadata():
    task_tomls = sorted((REPO_ROOT / "tasks").glob("*/task.toml"))
    assert len(task_tomls) == 2 * len(problem_paths(REPO_ROOT / "problems"))
    for task_toml in task_tomls:
        data = tomllib.loads(task_toml.read_text())
        assert data["task"]["authors"] and data["task"]["keywords"], task_toml
        assert data["task"]["version"] == config.DATASET_VERSION, task_toml
        assert (task_toml.parent / "README.md").is_file(), task_toml
        meta = data["metadata"]
        # the difficulty rule needs an oracle kernel; every task that ships one has the full set
        if (task_toml.parent / "solution" / "kernel.py").is_file():
            assert meta["difficulty"] in {"easy", "medium", "hard"}, task_toml
            assert 0 < meta["expert_time_estimate_min"] < meta["junior_time_estimate_min"], task_toml
            assert meta["oracle_code_lines"] > 0, task_toml
        else:
            assert meta["difficulty"] == "unknown" and "expert_time_estimate_min" not in meta, task_toml
        assert meta["category"] and meta["tags"] and meta["source"] and meta["license"], task_toml
        assert meta["dsl"] in meta["tags"] and meta["family"] in meta["tags"], task_toml


def test_the_published_tasks_all_have_derived_difficulty():
    """Every task of a published problem (the catalogue's) ships an oracle, so none is "unknown"."""
    published = {p["id"] for p in tomllib.loads((REPO_ROOT / "problems" / "catalog.toml").read_text())["problem"]}
    for task_toml in sorted((REPO_ROOT / "tasks").glob("*/task.toml")):
        if task_toml.parent.name[:2] in published:
            assert tomllib.loads(task_toml.read_text())["metadata"]["difficulty"] != "unknown", task_toml
