"""Oracles for problem 61 (NVFP4 SwiGLU MLP, Qwen3-8B, activations quantised in the call): compile checks
on the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "61_mlp_silu_gating_qwen3_8b_nvfp4"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["nvfp4_amax_kernel", "nvfp4_global_scale_kernel", "nvfp4_act_quant_kernel",
               "nvfp4_weight_decode_kernel", "nvfp4_gemm_kernel", "swiglu_kernel", "nvfp4_amax_kernel",
               "nvfp4_act_quant_kernel", "nvfp4_weight_decode_kernel", "nvfp4_gemm_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global", "cvt.rn.satfinite.e4m3x2.f32", "div.rn.f32", "shfl.sync.bfly.b32"],
        tmp_path)
    assert ptx.count("cvt.rn.satfinite.e4m3x2.f32") == 2  # the two activation quantisers
    assert ptx.count("mma.sync.aligned.m16n8k16") == 2 * 32  # the fp32- and bf16-output GEMMs


def test_tirx_sources():
    check_tirx_sources(
        STEM, ["mkb_nvfp4_amax_bf16_kernel", "mkb_nvfp4_global_scale_kernel", "mkb_nvfp4_act_quant_bf16_kernel",
               "mkb_nvfp4_weight_decode_k4096_kernel", "mkb_nvfp4_gemm_kernel", "mkb_swiglu_kernel",
               "mkb_nvfp4_amax_kernel", "mkb_nvfp4_act_quant_kernel", "mkb_nvfp4_weight_decode_k12288_kernel",
               "mkb_nvfp4_gemm_bf16_kernel"],
        ["__shfl_xor_sync", "cvt.rn.satfinite.e4m3x2.f32", "div.rn.f32 ", "floorf(",
         "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}"])


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")
