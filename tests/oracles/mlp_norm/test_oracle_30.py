"""Oracle checks for problem 30 (ConvNeXt-V2 MLP with Global Response Normalization, NHWC, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "30_gelu_grn_mlp_convnextv2_fp32"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["grn_gemm_kernel", "grn_sumsq_kernel", "grn_scale_kernel", "grn_gemm_kernel"],
        ["fma.rn.f32", "ld.global.v4", "ld.shared.v4", "st.global.v4", "bar.sync", "shfl.sync.bfly",
         "sqrt.rn.f32", "div.rn.f32", "ex2.approx.ftz.f32"],
        tmp_path)
    assert "sqrt.approx" not in ptx


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_grn_gemm_kernel", "mkb_grn_sumsq_kernel", "mkb_grn_scale_kernel"],
        ["__shared__ alignas(64) float a_s_ptr[2048]", "*(float4*)(ra_ptr + 4) = *(float4*)(A_ptr",
         "erff((h * ", "tvm_builtin_cuda_cta_sync()", "*(float4*)(C_ptr", "for (int ci = 0; ci < 25; ++ci)",
         "__shfl_xor_sync((uint)4294967295, loc", "sqrtf(", "(q + ((num - (den * q)) * rcp))"])
    source = sources["mkb_grn_gemm_kernel"]  # fc1: K = 128, one chunk of 8 slices (the chunk loop folds away)
    assert "for (int ks = 0; ks < 8; ++ks)" in source and "for (int kc" not in source


def test_tirx_fc2_source():
    from oracle_support import load

    source = load(STEM, "tirx").kernel_sources("sm_90a", fc2=True)["mkb_grn_gemm_kernel"]
    assert "for (int kc = 0; kc < 4; ++kc)" in source  # fc2: K = 512, four chunks of 128
    assert "*(float4*)(rn_ptr + 0) = *(float4*)(Nrm_ptr" in source
    assert "gb_s_ptr[" in source and "erff(" not in source


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
