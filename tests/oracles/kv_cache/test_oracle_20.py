"""Oracle checks for problem 20 (MLA q_b projection + NeoX RoPE + compressed latent-cache write)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu

STEM = "20_mla_rope_compressed_cache_update_bf16"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["mla_q_gemm_kernel", "mla_rope_cache_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global", "cp.async.wait_group", "cvt.rn.bf16x2.f32", "cvt.rn.bf16.f32"],
        tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
