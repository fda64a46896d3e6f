"""Problem 13 (FIBO joint attention block, fp32): the oracles compile for sm_90a with the instructions
their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu

STEM = "13_dual_stream_joint_attention_fibo_fp32"


def test_cutedsl_compiles(tmp_path):
    # fp32 FMAs (no tensor cores), 16-byte loads/stores, shared-memory tiles, warp shuffles for the
    # row reductions, ex2 with the fma-corrected argument, IEEE division, rsqrt for LayerNorm
    ptx = check_cutedsl_compiles(STEM, ["rowprep_kernel", "gemm_kernel", "rowprep_kernel", "gemm_kernel",
                                        "rope_kernel", "rowprep_kernel", "gemm_kernel", "attention_kernel",
                                        "gemm_kernel"],
                                 ["fma.rn.f32", "ld.global.v4.b32", "st.global.v4.b32", "ld.shared.v4.b32",
                                  "shfl.sync.bfly.b32", "ex2.approx", "div.rn.f32", "rsqrt.approx", "bar.sync"],
                                 tmp_path)
    assert "mma.sync" not in ptx and "tf32" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
