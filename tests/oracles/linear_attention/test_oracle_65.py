"""Problem 65 (Mamba-2 SSD intra-chunk diagonal block): both oracles build for sm_90a on the CPU with
the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "65_mamba2_intra_chunk_diagonal_nemotron_nano_bf16"


def test_cutedsl_compiles(tmp_path):
    # tensor-core C B^T and P x (mma.sync bf16, ldmatrix, ldmatrix.trans for x), 16-byte cp.async row
    # copies, P split into bf16 hi + lo, bf16 output staged through shared memory, 16-byte stores
    ptx = check_cutedsl_compiles(STEM, ["ssd_diag_kernel"],
                                 ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                                  "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                                  "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                                  "cp.async.cg.shared.global", "cp.async.wait_group", "cvt.rn.bf16",
                                  "st.global.v4", "bar.sync"], tmp_path)
    # per 64-key block and warp: 8 x 8 tiles of C B^T (state 128), 16 x 4 x 2 (hi, lo) of P x
    assert ptx.count("mma.sync.aligned.m16n8k16") == 64 + 128


def test_tirx_sources():
    # hand-placed mma.sync fragments from padded word rows, 16-byte C/B/x loads, the in-order cumsum,
    # the decay in the reference's order, hi/lo bf16 split of P, the transposed x words
    sources = check_tirx_sources(STEM, ["mkb_ssd_diag_kernel"], [
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "*(uint4*)(raw_ptr + 0) = *(uint4*)(q_ptr", "*(uint4*)(raw_ptr + 0) = *(uint4*)(k_ptr",
        "*(uint4*)(raw_ptr + 0) = *(uint4*)(v_ptr", "*(uint4*)(raw1_ptr + 0) = *(uint4*)(v_ptr",
        "(acc_s_ptr[0] * expf((s_s_ptr[", "run_ptr[0] = (run_ptr[0] + a_s_ptr[qq]);",
        "pair_ptr[0] = ((nv_bfloat16)(acc_s_ptr[0] - ((float)((nv_bfloat16)acc_s_ptr[0]))));",
        "__shared__ alignas(64) uint vt_s_ptr[4608];", "__launch_bounds__(128)"])
    (source,) = sources.values()
    # 4 k16 steps x 8 tiles of C B^T per state slice, 4 k16 steps x 16 tiles x (hi, lo) of P x
    calls = source.count("tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(acc_")
    assert calls == 8 * 4 + 4 * 16 * 2


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
