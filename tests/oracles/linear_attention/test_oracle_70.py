"""Problem 70 (RetNet multi-scale retention, parallel form): the oracles build for sm_90a on the CPU
with the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

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


def test_tirx_sources():
    # hand-placed mma.sync fragments from padded word rows, 16-byte Q/K/V loads, log2 gamma in fp64,
    # hi/lo bf16 split of P, the transposed V words
    sources = check_tirx_sources(STEM, ["mkb_retention_kernel"], [
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "*(uint4*)(raw_ptr + 0) = *(uint4*)(q_ptr", "*(uint4*)(raw_ptr + 0) = *(uint4*)(k_ptr",
        "*(uint4*)(raw_ptr + 0) = *(uint4*)(v_ptr", "*(uint4*)(raw1_ptr + 0) = *(uint4*)(v_ptr",
        "lg_ptr[0] = ((float)log2((1.000000000000000 - (1.000000000000000 / ((double)(1 << ",
        "* 0x1p-4f/*6.250000e-02*/) * exp2f((((float)(",
        "pair_ptr[0] = ((nv_bfloat16)(acc_s_ptr[0] - ((float)((nv_bfloat16)acc_s_ptr[0]))));",
        "__shared__ alignas(64) uint vt_s_ptr[4608];", "__launch_bounds__(128)"])
    (source,) = sources.values()
    # 4 key slices x 4 k16 steps x 8 tiles of Q K^T, 4 k16 steps x 16 tiles x (hi, lo) of P V
    calls = source.count("tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(acc_")
    assert calls == 8 * 4 + 4 * 16 * 2


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
