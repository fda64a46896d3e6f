"""Oracle checks for problem 42 (MTP shifted embedding, dual RMSNorm and the eh_proj GEMM)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu

STEM = "42_shifted_embedding_dual_rmsnorm_ling_mtp_bf16"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["mtp_dual_rmsnorm_kernel", "eh_proj_gemm_kernel"],
        ["ld.global.v4.b32", "shfl.sync.bfly.b32", "bar.sync", "rsqrt.approx.f32", "cvt.rn.bf16x2.f32",
         "st.global.v4.b32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "cp.async.cg.shared.global", "cp.async.wait_group"],
        tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
