"""Oracle checks for problem 29 (FLUX feed-forward block: Linear, tanh GELU, Linear, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "29_gelu_feedforward_flux_fp32"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["ff_gemm_kernel", "ff_gemm_kernel"],
        ["fma.rn.f32", "ld.global.v4.b32", "ld.shared.v4.b32", "st.shared.b32", "bar.sync", "st.global.v4.b32",
         "ex2.approx.ftz.f32", "rcp.approx.ftz.f32"],
        tmp_path)
    assert "tanh.approx" not in ptx  # the precise tanhf algorithm, not the 2^-11 instruction


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_ff_gemm_kernel"],
        ["__shared__ alignas(64) float a_s_ptr[2048]", "*(float4*)(ra_ptr + 4) = *(float4*)(A_ptr",
         "*(float4*)(af_ptr + 4) = *(float4*)(a_s_ptr", "tvm_builtin_cuda_cta_sync()", "*(float4*)(C_ptr",
         "*(float4*)(bv_ptr + 4) = *(float4*)(bias_ptr", "floorf(", "out_ptr[0] = (q + ((h - (den * q)) * rcp));"])
    source = sources["mkb_ff_gemm_kernel"]
    assert "for (int kc = 0; kc < 24; ++kc)" in source  # K = 3072: 24 chunks of 8 slices of 16
    assert "for (int ks = 0; ks < 8; ++ks)" in source
    assert "tanhf(" not in source and "expf(" not in source  # fast-math would make these approximate


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
