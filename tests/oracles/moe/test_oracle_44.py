"""Oracles for problem 44 (DeepSeek-V3 FP8 block-scaled MoE, one EP rank): compile checks on the CPU,
grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "44_grouped_routing_block_scale_deepseek_fp8"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["moe_route_kernel", "moe_gate_up_kernel", "moe_down_kernel", "moe_combine_kernel"],
        ["shfl.sync.bfly.b32", "bar.sync", "fma.rn.f32", "div.rn.f32", "cvt.rn.bf16.f32"],
        tmp_path)
    assert ptx.count("fma.rn.f32") >= 2 * 32 * 32  # both GEMM inner steps fully unrolled


def test_tirx_sources():
    check_tirx_sources(
        STEM, ["route_kernel", "gate_up_kernel", "down_kernel", "combine_kernel"],
        ["__shfl_xor_sync", "tvm_builtin_cuda_cta_sync();", "__shared__ alignas(64) float a_s_ptr[2080]",
         "(nv_bfloat16)total"])


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")
