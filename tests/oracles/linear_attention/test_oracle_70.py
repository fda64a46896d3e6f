"""Problem 70 (RetNet multi-scale retention, parallel form): the oracles build for sm_90a on the CPU
with the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu

STEM = "70_multiscale_retention_retnet_bf16"


def test_cutedsl_compiles(tmp_path):
    # tensor-core Q K^T and P V (mma.sync bf16, ldmatrix, ldmatrix.trans for V), 16-byte cp.async row
    # copies, exp2f of the fp32 decay exponent, P split into bf16 hi + lo, bf16 output staged through
    # shared memory and stored 16 bytes at a time
    ptx = check_cutedsl_compiles(STEM, ["retention_kernel"],
                                 ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                                  "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                                  "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                                  "cp.async.cg.shared.global", "cp.async.wait_group", "ex2.approx.f32 ",
                                  "cvt.rn.bf16", "st.global.v4", "bar.sync"], tmp_path)
    # per 64-key block and warp: 8 x 16 tiles of Q K^T (key 256), 16 x 4 x 2 (hi, lo) of P V (slice 128)
    assert ptx.count("mma.sync.aligned.m16n8k16") == 128 + 128
    assert "ex2.approx.ftz" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
