"""Oracles for problem 52 (Qwen3-VL FP8 block-quantised attention output projection with bias): compile
checks on the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "52_attention_output_projection_qwen3vl_fp8"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["fp8_act_quant_kernel", "fp8_weight_quant_kernel", "fp8_block_gemm_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global", "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.f16x2.e4m3x2", "div.rn.f32",
         "shfl.sync.bfly.b32"],
        tmp_path)
    assert ptx.count("mma.sync.aligned.m16n8k16") == 128  # one 128-wide K block unrolled


def test_tirx_sources():
    check_tirx_sources(
        STEM, ["mkb_fp8_act_quant_kernel", "mkb_fp8_weight_quant_kernel", "mkb_fp8_block_gemm_kernel"],
        ["__shfl_xor_sync", "tvm_builtin_cuda_cta_sync();", "cvt.rn.satfinite.e4m3x2.f32", "div.rn.f32 ",
         "__shared__ alignas(64) int a_s_ptr[5120]",
         "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "BIAS_ptr"])


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")
