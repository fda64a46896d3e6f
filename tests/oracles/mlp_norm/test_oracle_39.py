"""Oracle checks for problem 39 (FLUX final layer: adaptive LayerNorm modulated by the timestep
embedding, then proj_out, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "39_adaln_modulation_output_projection_flux_kontext_fp32"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["mod_gemm_kernel", "ln_proj_kernel"],
        ["fma.rn.f32", "ld.global.v4", "ld.shared.v4", "st.shared.b32", "bar.sync", "st.global.v4",
         "shfl.sync.bfly", "rsqrt.approx", "ex2.approx", "div.rn.f32"],
        tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_mod_gemm_kernel", "mkb_ln_proj_kernel"],
        ["__shared__ alignas(64) float a_s_ptr[1024]", "__shared__ alignas(64) float mean_s_ptr[64]",
         "__shfl_xor_sync((uint)4294967295, s_ptr[0], 16, 32)", "rsqrtf(", "floorf(",
         "*(float4*)(hv_ptr + 0) = *(float4*)(H_ptr", "*(float4*)(rsc_ptr + 0) = *(float4*)(M_ptr",
         "*(float4*)(ra_ptr + 0) = *(float4*)(A_ptr", "tvm_builtin_cuda_cta_sync()", "*(float4*)(C_ptr"])
    for name in ("mkb_mod_gemm_kernel", "mkb_ln_proj_kernel"):  # K = 3072: 24 chunks of 4 slices of 32
        assert "for (int kc = 0; kc < 24; ++kc)" in sources[name]
        assert "for (int ks = 0; ks < 4; ++ks)" in sources[name]
    assert "expf(" not in sources["mkb_mod_gemm_kernel"]  # fast-math would make it approximate


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
