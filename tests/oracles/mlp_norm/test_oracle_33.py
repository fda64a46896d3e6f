"""Oracle checks for problem 33 (residual add, RMSNorm and SwiGLU MLP of Hermes-4-405B, bf16)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "33_residual_rmsnorm_swiglu_mlp_hermes_bf16"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["residual_rmsnorm_kernel", "swiglu_gemm_kernel", "down_gemm_kernel"],
        ["ld.global.v4.b32", "shfl.sync.bfly.b32", "bar.sync", "rsqrt.approx.f32", "cvt.rn.bf16x2.f32",
         "st.global.v4.b32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "cp.async.cg.shared.global", "cp.async.wait_group",
         "div.rn.f32", "cvt.rn.bf16.f32"],
        tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_residual_rmsnorm_kernel", "mkb_swiglu_gemm_kernel", "mkb_down_gemm_kernel"],
        ["tvm_builtin_cuda_cta_reduce_sum_8(", "vals_ptr[0] = ((float)((nv_bfloat16)(((float)res_ptr[",
         "__shared__ alignas(64) uint a_s_ptr[2560]", "*(uint4*)(rb_ptr + 8) = *(uint4*)(U_ptr",
         "*(uint4*)(rb_ptr + 0) = *(uint4*)(G_ptr", "tvm_builtin_cuda_cta_sync()",
         "tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(acc_ptr[60]",
         "*(nv_bfloat162*)(C_ptr"])
    assert "for (int kt = 0; kt < 512; ++kt)" in sources["mkb_swiglu_gemm_kernel"]  # K = 16384 in slices of 32
    assert "for (int kt = 0; kt < 1664; ++kt)" in sources["mkb_down_gemm_kernel"]  # K = 53248 in slices of 32


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
