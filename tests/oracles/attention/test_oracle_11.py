"""Problem 11 (variable-length vision attention with RoPE, Qwen-Image-Edit, bf16): the oracles compile
for sm_90a with the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu

STEM = "11_varlen_vision_attention_qwen_image_edit_bf16"


def test_cutedsl_compiles(tmp_path):
    # tensor-core projections and attention (mma.sync bf16, ldmatrix, ldmatrix.trans for V), 16-byte
    # cp.async copies, base-2 softmax (ex2), quad shuffles for row max/sum, IEEE reciprocal of the row
    # sum, bf16 roundings, 16-byte output stores
    check_cutedsl_compiles(STEM, ["bias_gemm_kernel", "rope_pack_kernel", "varlen_attention_kernel",
                                  "bias_gemm_kernel"],
                           ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                            "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                            "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                            "cp.async.cg.shared.global", "cp.async.wait_group", "ex2.approx",
                            "shfl.sync.bfly.b32", "rcp.rn.f32", "cvt.rn.bf16", "st.global.v4", "bar.sync"], tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
