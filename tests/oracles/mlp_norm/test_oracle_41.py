"""Oracle checks for problem 41 (fp32 Q/K/V projections with per-head RMSNorm on Q and K)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "41_qkv_per_head_rmsnorm_gemma3n_e4b_audio_fp32"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["qkv_proj_norm_kernel", "qkv_proj_norm_kernel"],
        ["fma.rn.f32", "ld.global.v4.b32", "ld.shared.v4.b32", "st.shared.b32", "bar.sync", "shfl.sync.bfly.b32",
         "rsqrt.approx.f32", "st.global.v4.b32"],
        tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_qkv_proj_norm_kernel"],
        ["__shared__ alignas(64) float a_s_ptr[2048]", "*(float4*)(ra_ptr + 4) = *(float4*)(A_ptr",
         "*(float4*)(af_ptr + 4) = *(float4*)(a_s_ptr", "tvm_builtin_cuda_cta_sync()", "*(float4*)(C_ptr",
         "__shfl_xor_sync((uint)4294967295, s_lo_ptr[0], 8, 32)", "rsqrtf("])
    assert "for (int kt = 0; kt < 64; ++kt)" in sources["mkb_qkv_proj_norm_kernel"]  # K = 1024 in slices of 16


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
