"""Oracle checks for problem 37 (backward of a tanh-GELU MLP from saved activations, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources, load

STEM = "37_gelu_mlp_backward_step1x_fp32"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["bwd_gemm_kernel"] * 4 + ["colsum_kernel"] * 2,
        ["fma.rn.f32", "ld.global.v4", "ld.shared.v4", "st.shared.v4", "st.shared.b32", "bar.sync",
         "st.global.v4", "ex2.approx.ftz.f32"],
        tmp_path)
    assert "tanh.approx" not in ptx  # the precise tanhf algorithm, not the 2^-11 instruction


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_bwd_gemm_kernel", "mkb_colsum_kernel"],
        ["__shared__ alignas(64) float a_s_ptr[2048]", "*(float4*)(ra_ptr + 4) = *(float4*)(A_ptr",
         "*(float4*)(rb_ptr + 4) = *(float4*)(B_ptr", "*(float4*)(zv_ptr + 0) = *(float4*)(Z_ptr",
         "tvm_builtin_cuda_cta_sync()", "*(float4*)(C_ptr", "floorf(", "red_ptr[", "float ka = max(k, ("])
    source = sources["mkb_bwd_gemm_kernel"]
    assert "for (int kc = 0; kc < 16; ++kc)" in source  # dZ: K = 2048, 16 chunks of 8 slices of 16
    assert "tanhf(" not in source and "expf(" not in source  # fast-math would make these approximate


def test_tirx_transposed_a_source():
    source = load(STEM, "tirx").kernel_sources("sm_90a", ("dw2",))["mkb_bwd_gemm_kernel"]
    assert "for (int kc = 0; kc < 64; ++kc)" in source  # dW2: K = tokens = 8192
    assert "*(float4*)(a_s_ptr + (((int)threadIdx.x) * 8)) = *(float4*)(ra_ptr + 0);" in source


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
