"""Problem 12 (Gemma-3n audio local attention with relative positions and soft-capping, fp32): the
oracles compile for sm_90a with the instructions their design relies on; on a GPU they match the
reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu

STEM = "12_relative_position_local_attention_gemma3n_audio_fp32"


def test_cutedsl_compiles(tmp_path):
    # fp32 FMAs (no tensor cores), 16-byte GEMM loads/stores, shared-memory tiles, indexed and xor
    # warp shuffles (relative shift, row max/sum), IEEE division
    ptx = check_cutedsl_compiles(STEM, ["gemm_kernel", "gemm_kernel", "sinusoid_kernel", "gemm_kernel",
                                        "local_attention_kernel"],
                                 ["fma.rn.f32", "ld.global.v4.b32", "st.global.v4.b32", "ld.shared.v4.b32",
                                  "shfl.sync.idx.b32", "shfl.sync.bfly.b32", "div.rn.f32", "bar.sync"], tmp_path)
    assert "mma.sync" not in ptx and "tf32" not in ptx and "tanh.approx" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
