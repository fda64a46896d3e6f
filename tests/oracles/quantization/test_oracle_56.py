"""Oracles for problem 56 (DeepSeek-V3.1 FP8 MLA kv_a / kv_b projections with a mid-chain RMSNorm and
re-quantisation): compile checks on the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu

STEM = "56_mla_kv_compression_requant_deepseekv31_fp8"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["fp8_act_quant_kernel", "fp8_weight_quant_kernel", "fp8_block_gemm_kernel", "rms_requant_kernel",
               "fp8_weight_quant_kernel", "fp8_block_gemm_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global", "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.f16x2.e4m3x2", "div.rn.f32",
         "sqrt.rn.f32", "shfl.sync.bfly.b32"],
        tmp_path)
    assert ptx.count("mma.sync.aligned.m16n8k16") == 2 * 128  # one 128-wide K block unrolled per GEMM


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")
