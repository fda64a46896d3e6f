"""Oracle checks for problem 35 (residual + LayerNorm + tanh-GELU FFN backward of Kokoro-82M, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "35_residual_layernorm_gelu_ffn_backward_kokoro_fp32"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["row_kernel", "gemm_kernel", "gemm_kernel", "gemm_kernel", "gemm_kernel", "colsum_kernel",
               "colsum_kernel", "colsum_kernel", "reduce_kernel", "reduce_kernel", "reduce_kernel"],
        ["shfl.sync.bfly.b32", "sqrt.rn.f32", "rcp.rn.f32", "ld.global.v4.b32", "st.global.v4.b32",
         "ld.shared.v4.b32", "fma.rn.f32", "add.f64", "bar.sync"],
        tmp_path)
    assert ptx.count("fma.rn.f32") >= 4 * 16 * 64  # every GEMM build's 16-deep K slice of 8 x 8 FMAs unrolled


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["row_kernel", "dgelu_kernel", "dhidden_kernel", "dw2_kernel", "dw1_kernel",
               "colsum_d_kernel", "colsum_dn_kernel", "colsum_f_kernel", "reduce_d_kernel",
               "reduce_f_kernel", "reduce_w_kernel"],
        ["__shfl_xor_sync", "tvm_builtin_cuda_cta_sync()", "__shared__ alignas(64) float a_s_ptr[2048]",
         "*(float4*)(af_ptr + 4)", "(double)"])
    assert "for (int kc = 0; kc < 4; ++kc)" in sources["dgelu_kernel"]  # K = 512: 4 chunks of 128
    assert "for (int kc = 0; kc < 16; ++kc)" in sources["dw1_kernel"]  # 2048-token splits: 16 chunks


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
