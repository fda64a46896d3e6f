"""``demo.study``'s two setups without running a study: what the scripted model writes and how the
judge grades, on a CPU-only machine and with ``--gpu`` on a GPU host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from demo.study import BANNER, GPU_BANNER, StudyConfig, base_config, kernel_table  # noqa: E402


def test_cpu_setup_writes_cpu_tirx_kernels_and_grades_small_on_the_cpu(tmp_path):
    config = StudyConfig(out=tmp_path, problems=["28"])
    table = kernel_table(config)
    assert table["28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx"].parent.name == "kernels"
    assert table["28_fused_add_rmsnorm_h4096_llama31_8b_bf16_cutedsl"].parent.parent.name == "oracles"
    judge = yaml.safe_load(base_config(config, "http://127.0.0.1:1").read_text())["environment"]["kwargs"]
    assert "--devices cpu" in judge["judge_args"] and "--small" in judge["judge_args"]
    assert config.banner == BANNER


def test_gpu_setup_writes_the_oracles_of_both_dsls_and_grades_on_the_gpu(tmp_path):
    config = StudyConfig(out=tmp_path, problems=["28", "25"], gpu=True)
    table = kernel_table(config)
    assert len(table) == 4 and all(path.parent.parent.name == "oracles" for path in table.values())
    assert all(path.name == f"{task}.py" for task, path in table.items())
    judge = yaml.safe_load(base_config(config, "http://127.0.0.1:1").read_text())["environment"]["kwargs"]
    assert "--devices cuda:0" in judge["judge_args"] and "--small" not in judge["judge_args"]
    assert config.banner == GPU_BANNER


def test_gpu_setup_needs_an_oracle_in_each_dsl(tmp_path):
    only_tirx = tmp_path / "oracles" / "mlp_norm"
    only_tirx.mkdir(parents=True)
    (only_tirx / "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_tirx.py").write_text("")
    with pytest.raises(SystemExit, match="no cutedsl oracle"):
        kernel_table(StudyConfig(out=tmp_path, problems=["28"], gpu=True, oracles_dir=tmp_path / "oracles"))
