"""Oracle checks for problem 32 (Parakeet SwiGLU MLP with a fused gate/up weight, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "32_swiglu_mlp_parakeet_fp32"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["mlp_gemm_kernel", "mlp_gemm_kernel"],
        ["fma.rn.f32", "ld.global.v4.b32", "ld.shared.v4.b32", "st.shared.b32", "bar.sync", "st.global.v4.b32",
         "ex2.approx.f32", "div.rn.f32"],
        tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_mlp_gemm_kernel"],
        ["__shared__ alignas(64) float a_s_ptr[2048]", "*(float4*)(ra_ptr + 4) = *(float4*)(A_ptr",
         "*(float4*)(af_ptr + 4) = *(float4*)(a_s_ptr", "tvm_builtin_cuda_cta_sync()", "*(float4*)(C_ptr",
         "((((int)threadIdx.x) >> 7) * 4128768)", "floorf(", "condval_1 = (q + ((g - (den * q)) * rcp));"])
    source = sources["mkb_mlp_gemm_kernel"]
    assert "for (int kc = 0; kc < 8; ++kc)" in source  # K = 1024: 8 chunks of 8 slices of 16
    assert "for (int ks = 0; ks < 8; ++ks)" in source
    assert "expf(" not in source  # fast-math would make it approximate


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
