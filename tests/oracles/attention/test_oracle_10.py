"""Oracle checks for problem 10 (Gemma-3 q/k-norm RoPE soft-capped GQA attention backward, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "10_qk_norm_rope_softcap_attention_backward_gemma3_fp32"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["gemm_kernel"] * 9 + ["normrope_kernel"] * 2 + ["headmajor_kernel", "softmax_kernel",
                                                                 "dsoftmax_kernel"]
        + ["normbwd_kernel"] * 2 + ["colsum_kernel", "colsum_final_kernel"] * 2,
        ["fma.rn.f32", "ld.global.v4", "ld.shared.v4", "st.shared.v4", "st.global.v4", "bar.sync",
         "sqrt.rn.f32", "rcp.rn.f32", "div.rn.f32", "ex2.approx", "shfl.sync.bfly", "add.f64",
         "cvt.rn.f32.f64"],
        tmp_path)
    assert "tanh.approx" not in ptx  # the precise tanhf algorithm, not the 2^-11 instruction


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_gemm_kernel", "mkb_normrope_kernel", "mkb_headmajor_kernel", "mkb_softmax_kernel",
               "mkb_dsoftmax_kernel", "mkb_normbwd_kernel", "mkb_colsum_kernel", "mkb_colsum_final_kernel"],
        ["__shared__ alignas(64) float a_s_ptr[2048]", "*(float4*)(ra_ptr + 4) = *(float4*)(A_ptr",
         "*(float4*)(rb_ptr + 4) = *(float4*)(B_ptr", "tvm_builtin_cuda_cta_sync()", "*(float4*)(C_ptr",
         "__shfl_xor_sync(", "double acc_ptr[1]"])
    # fast math leaves fp64 alone: the transcendental functions and the softmax division run in fp64
    assert "tanh(((double)" in sources["mkb_softmax_kernel"]
    assert "exp(((double)" in sources["mkb_softmax_kernel"]
    assert "/ sqrt(((double)" in sources["mkb_normrope_kernel"]
    gemm = sources["mkb_gemm_kernel"]
    assert "for (int kc = 0; kc < 24; ++kc)" in gemm  # q projection: K = hidden = 3072, 24 chunks of 128
    assert "b_s_ptr[(((((int)threadIdx.x) & 1) * 1024) + (((int)threadIdx.x) >> 1))] = rb_ptr[0];" in gemm


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
