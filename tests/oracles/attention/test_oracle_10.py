"""Oracle checks for problem 10 (Gemma-3 q/k-norm RoPE soft-capped GQA attention backward, fp32)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu

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


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
