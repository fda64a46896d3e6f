"""Oracles for problem 51 (gpt-oss sparse MoE dispatch and combine, clamped GLU with biases, fp32):
compile checks on the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "51_sparse_expert_dispatch_combine_gptoss_fp32"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["moe_glu_kernel", "moe_down_kernel", "moe_combine_kernel"],
        ["bar.sync", "fma.rn.f32", "rcp.rn.f32", "ex2.approx"],
        tmp_path)
    assert ptx.count("fma.rn.f32") >= 2 * 32 * 32  # both GEMMs' inner K step fully unrolled


def test_tirx_sources():
    check_tirx_sources(
        STEM, ["glu_kernel", "down_kernel", "combine_kernel"],
        ["tvm_builtin_cuda_cta_sync();", "__shared__ alignas(64) float a_s_ptr[2080]",
         "__shared__ alignas(64) float b_s_ptr[4128]"])


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")
