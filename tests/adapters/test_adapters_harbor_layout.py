"""The adapter in Harbor's layout (``adapters/metakernelbench/``): Harbor's files, Harbor's flags, and
the same task folders ``mkb build`` writes."""

import sys
import tomllib

import pytest
import yaml
from harbor.models.job.config import JobConfig

from metakernelbench.adapters.build import _compare_trees
from metakernelbench.problems import REPO_ROOT

ADAPTER = REPO_ROOT / "adapters" / "metakernelbench"
sys.path.insert(0, str(ADAPTER / "src"))

from metakernelbench_adapter.adapter import MetaKernelBenchAdapter  # noqa: E402
from metakernelbench_adapter.main import main  # noqa: E402

T28 = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"


def test_harbors_adapter_files_are_there():
    for rel in ("README.md", "adapter_metadata.json", "parity_experiment.json", "pyproject.toml",
                "run_metakernelbench.yaml", "src/metakernelbench_adapter/__init__.py",
                "src/metakernelbench_adapter/adapter.py", "src/metakernelbench_adapter/main.py",
                "src/metakernelbench_adapter/task-template/task.toml"):
        assert (ADAPTER / rel).is_file(), rel
    project = tomllib.loads((ADAPTER / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"metakernelbench": "metakernelbench_adapter.main:main"}
    job = JobConfig.model_validate(yaml.safe_load((ADAPTER / "run_metakernelbench.yaml").read_text()))
    assert [a.name for a in job.agents] == ["oracle"] and job.metrics[0].type == "uv-script"


def test_harbors_flags_write_what_mkb_build_committed(tmp_path, capsys):
    assert main(["--output-dir", str(tmp_path), "--task-ids", "28"]) == 0
    assert "wrote 2 task folder(s)" in capsys.readouterr().out
    for dsl in ("cutedsl", "tirx"):
        name = f"{T28}_{dsl}"
        assert _compare_trees(name, REPO_ROOT / "tasks" / name, tmp_path / name) == []
    assert (tmp_path / "dataset.toml").is_file() and (tmp_path / "metric.py").is_file()


def test_limit_and_overwrite(tmp_path):
    first = MetaKernelBenchAdapter(tmp_path, limit=1, task_ids=["28"]).run()
    assert first == [f"{T28}_cutedsl"]
    assert MetaKernelBenchAdapter(tmp_path, limit=1, task_ids=["28"]).run() == []  # kept without --overwrite
    assert MetaKernelBenchAdapter(tmp_path, limit=1, overwrite=True, task_ids=[f"{T28}_cutedsl"]).run() == first


def test_an_unknown_task_id_is_an_error(tmp_path, capsys):
    assert main(["--output-dir", str(tmp_path), "--task-ids", "77"]) == 2
    assert "--task-ids names no task: 77" in capsys.readouterr().err
    with pytest.raises(ValueError):
        MetaKernelBenchAdapter(tmp_path, task_ids=["nope"]).selected()
