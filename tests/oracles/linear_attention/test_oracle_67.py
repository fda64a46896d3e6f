"""Oracle checks for problem 67 (order-2 Hyena block with a long causal convolution, Hyena-small, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "67_hyena_fft_conv_block_hyena_small_fp32"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["ln_kernel", "gemm_kernel", "filter_kernel", "conv_kernel", "gemm_kernel", "gemm_kernel",
               "gemm_kernel"],
        ["shfl.sync.bfly.b32", "sqrt.rn.f32", "rcp.rn.f32", "cvt.rmi.f32.f32", "ld.global.v4.b32",
         "st.global.v4.b32", "ld.shared.v4.b32", "fma.rn.f32", "bar.sync"],
        tmp_path)
    assert ptx.count("fma.rn.f32") >= 4 * 16 * 64  # every GEMM build's 16-deep K slice of 8 x 8 FMAs unrolled
    assert "sin.approx" not in ptx and "cos.approx" not in ptx  # the filter's sines are range-reduced polynomials


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["ln_kernel", "in_proj_kernel", "filter_kernel", "conv_kernel", "out_proj_kernel",
               "fc1_kernel", "fc2_kernel"],
        ["__shfl_xor_sync", "tvm_builtin_cuda_cta_sync()", "__shared__ alignas(64) float a_s_ptr[2048]",
         "*(float4*)(af_ptr + 4)", "floorf("])
    assert "for (int s = 0; s < 256; ++s)" in sources["conv_kernel"]  # the direct causal convolution, L = 256


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
