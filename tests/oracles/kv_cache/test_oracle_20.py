"""Oracle checks for problem 20 (MLA q_b projection + NeoX RoPE + compressed latent-cache write)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "20_mla_rope_compressed_cache_update_bf16"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["mla_q_gemm_kernel", "mla_rope_cache_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global", "cp.async.wait_group", "cvt.rn.bf16x2.f32", "cvt.rn.bf16.f32"],
        tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_mla_q_gemm_kernel", "mkb_mla_rope_cache_kernel"],
        ["__shared__ alignas(64) uint a_s_ptr[2560]", "*(uint4*)(ra_ptr + 8) = *(uint4*)(A_ptr",
         "*(uint4*)(a_s_ptr + ", "= *(uint4*)(((uint*)ra_ptr) + 4)", "tvm_builtin_cuda_cta_sync()",
         "tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(acc_ptr[60]",
         "*(nv_bfloat162*)(C_ptr", "prod_ptr[0] = ((nv_bfloat16)(",
         "if ((int64_t)0 <= slot)"])
    gemm = sources["mkb_mla_q_gemm_kernel"]
    assert "for (int kt = 0; kt < 48; ++kt)" in gemm  # K = 1536 in slices of 32


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
