"""Harbor's adapter and task conventions: the adapter's files and every task's standard metadata."""

import json
import tomllib
from pathlib import Path

import harbor

from metakernelbench.problems import REPO_ROOT

ADAPTER = REPO_ROOT / "adapters"
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
    for task_toml in sorted((REPO_ROOT / "tasks").glob("*/task.toml")):
        data = tomllib.loads(task_toml.read_text())
        assert data["task"]["authors"] and data["task"]["keywords"], task_toml
        meta = data["metadata"]
        assert meta["difficulty"] in {"easy", "medium", "hard", "unknown"}, task_toml
        assert meta["category"] and meta["tags"] and meta["source"] and meta["license"], task_toml
        assert meta["dsl"] in meta["tags"] and meta["family"] in meta["tags"], task_toml
