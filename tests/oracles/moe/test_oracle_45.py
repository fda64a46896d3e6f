"""Oracles for problem 45 (capacity-limited MoE expert execution, SwiGLU experts, bf16): compile
checks on the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "45_capacity_factor_expert_dispatch_qwen3_coder_480b_bf16"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["moe_tc_gemm_kernel", "moe_tc_gemm_kernel", "moe_combine_kernel", "moe_swiglu_kernel",
               "moe_gemm_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "cp.async.cg.shared.global", "cp.async.wait_group",
         "bar.sync", "fma.rn.f32", "div.rn.f32", "cvt.rn.bf16.f32"],
        tmp_path)
    assert ptx.count("mma.sync.aligned") >= 32 + 16  # both tensor-core GEMMs' K steps unrolled (gate + up, down)
    assert ptx.count("fma.rn.f32") >= 2 * 32 * 32  # the SIMT GEMMs' inner K step fully unrolled


def test_tirx_sources():
    check_tirx_sources(
        STEM, ["swiglu_kernel", "down_kernel", "combine_kernel",
               "tc_glu_kernel", "tc_down_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "__shared__ alignas(64) uint b_s_ptr[5120]",
         "tvm_builtin_cuda_cta_sync();", "__shared__ alignas(64) float a_s_ptr[2080]", "(nv_bfloat16)"])


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")
