"""Problem 11 (variable-length vision attention with RoPE, Qwen-Image-Edit, bf16): the oracles compile
for sm_90a with the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

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


def test_tirx_sources():
    # hand-placed mma.sync fragments for the projections and both attention products, 16-byte row
    # loads, the transposed V block, quad xor shuffles for row max/sum, base-2 softmax, bf16-pair stores
    sources = check_tirx_sources(STEM, ["mkb_bias_gemm_kernel", "mkb_rope_pack_kernel", "mkb_varlen_attention_kernel"],
                                 ["tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(",
                                  "*(uint4*)(raw_ptr + 0) = *(uint4*)(packed_ptr", "*(uint4*)(k_s_ptr",
                                  "vt_s_ptr[", "__shfl_xor_sync((uint)4294967295", "exp2f(", "indptr_ptr[",
                                  "*(nv_bfloat162*)(out_ptr", "__launch_bounds__(128)", "__launch_bounds__(256)",
                                  "__shared__ alignas(64) uint q_s_ptr[2816]",
                                  "__shared__ alignas(64) uint vt_s_ptr[2880]"])
    source = sources["mkb_varlen_attention_kernel"]
    assert "expf(" not in source and source.count("tvm_builtin_cuda_cta_sync();") == 2


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
