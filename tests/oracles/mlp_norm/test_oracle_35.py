"""Oracle checks for problem 35 (residual + LayerNorm + tanh-GELU FFN backward of Kokoro-82M, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu

STEM = "35_residual_layernorm_gelu_ffn_backward_kokoro_fp32"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["row_kernel", "gemm_kernel", "gemm_kernel", "gemm_kernel", "gemm_kernel", "colsum_kernel",
               "colsum_kernel", "colsum_kernel", "reduce_kernel", "reduce_kernel", "reduce_kernel"],
        ["shfl.sync.bfly.b32", "sqrt.rn.f32", "rcp.rn.f32", "ld.global.v4.b32", "st.global.v4.b32",
         "ld.shared.v4.b32", "fma.rn.f32", "add.f64", "bar.sync"],
        tmp_path)
    assert ptx.count("fma.rn.f32") >= 4 * 16 * 64  # every GEMM build's 16-deep K slice of 8 x 8 FMAs unrolled


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
