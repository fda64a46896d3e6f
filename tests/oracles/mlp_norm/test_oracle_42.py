"""Oracle checks for problem 42 (MTP shifted embedding, dual RMSNorm and the eh_proj GEMM)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "42_shifted_embedding_dual_rmsnorm_ling_mtp_bf16"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["mtp_dual_rmsnorm_kernel", "eh_proj_gemm_kernel"],
        ["ld.global.v4.b32", "shfl.sync.bfly.b32", "bar.sync", "rsqrt.approx.f32", "cvt.rn.bf16x2.f32",
         "st.global.v4.b32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "cp.async.cg.shared.global", "cp.async.wait_group"],
        tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_mtp_dual_rmsnorm_kernel", "mkb_eh_proj_gemm_kernel"],
        ["row_id_ptr[0] = ((int)ids_ptr[", "tvm_builtin_cuda_cta_reduce_sum_8(", "normed_ptr[0] = ((nv_bfloat16)(",
         "__shared__ alignas(64) uint a_s_ptr[2560]", "*(uint4*)(ra_ptr + 8) = *(uint4*)(A_ptr",
         "*(uint4*)(a_s_ptr + ", "= *(uint4*)(((uint*)ra_ptr) + 4)", "tvm_builtin_cuda_cta_sync()",
         "tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(acc_ptr[60]",
         "*(nv_bfloat162*)(C_ptr"])
    assert "for (int kt = 0; kt < 256; ++kt)" in sources["mkb_eh_proj_gemm_kernel"]  # K = 8192 in slices of 32


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
