"""Oracles for problem 47 (ERNIE-4.5 MoE: correction-bias softmax router, top-8 of 64 experts, shared
expert, bf16): compile checks on the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "47_correction_bias_shared_expert_ernie_bf16"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["moe_router_kernel", "moe_route_kernel", "moe_swiglu_kernel", "moe_gemm_kernel", "moe_swiglu_kernel",
               "moe_gemm_kernel", "moe_combine_kernel"],
        ["shfl.sync.bfly.b32", "bar.sync", "fma.rn.f32", "div.rn.f32", "cvt.rn.bf16.f32"],
        tmp_path)
    assert ptx.count("fma.rn.f32") >= 5 * 32 * 32  # every GEMM's inner K step fully unrolled


def test_tirx_sources():
    check_tirx_sources(
        STEM, ["router_kernel", "route_kernel", "swiglu_kernel", "down_kernel",
               "combine_kernel", "swiglu_shared_kernel", "down_shared_kernel"],
        ["__shfl_xor_sync", "tvm_builtin_cuda_cta_sync();", "__shared__ alignas(64) float a_s_ptr[2080]",
         "(nv_bfloat16)"])


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")
