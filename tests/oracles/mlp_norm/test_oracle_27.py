"""Oracle checks for problem 27 (Qwen3-Omni vision patch merger: LayerNorm, 2x2 shuffle, GELU MLP, bf16)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "27_patch_merger_mlp_qwen3_omni_bf16"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["patch_layernorm_kernel", "bias_gemm_kernel", "bias_gemm_kernel"],
        ["ld.global.v4.b32", "shfl.sync.bfly.b32", "bar.sync", "rsqrt.approx.f32", "div.rn.f32", "cvt.rn.bf16x2.f32",
         "st.global.v4.b32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "cp.async.cg.shared.global", "cp.async.wait_group",
         "cvt.rn.bf16.f32", "ld.global.b16"],
        tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_patch_layernorm_kernel", "mkb_bias_gemm_kernel"],
        ["int token = (dest_ptr[((int)blockIdx.x)] >> 2);", "tvm_builtin_cuda_cta_reduce_sum_8(",
         "X_ptr[(((token * 6144) + (slot * 1536)) + ((int)threadIdx.x))] = ((nv_bfloat16)(",
         "__shared__ alignas(64) uint a_s_ptr[2560]", "tvm_builtin_cuda_cta_sync()",
         "tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(acc_ptr[60]",
         "+ erff((hb * ", "*(nv_bfloat162*)(C_ptr"])
    assert "for (int kt = 0; kt < 192; ++kt)" in sources["mkb_bias_gemm_kernel"]  # K = 6144 in slices of 32


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
