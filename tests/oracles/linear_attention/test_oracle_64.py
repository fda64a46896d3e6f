"""Problem 64 (Mamba-2 SSD chunked scan with a carried state, Granite): the oracles build for sm_90a on
the CPU with the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "64_mamba_chunk_scan_segsum_granite_bf16"


def test_cutedsl_compiles(tmp_path):
    # state pass on the CUDA cores (fp32 fma, accurate expf, the fp32 state scratch and the bf16 final
    # state); output pass on the tensor cores (mma.sync bf16, ldmatrix, ldmatrix.trans for x, 16-byte
    # cp.async, bf16 output stored 16 bytes at a time)
    ptx = check_cutedsl_compiles(STEM, ["ssd_states_kernel", "ssd_output_kernel"],
                                 ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                                  "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                                  "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global",
                                  "0f32A57060", "ex2.approx.ftz.f32", "fma.rn.f32", "st.global.b32",
                                  "st.global.b16", "st.global.v4", "bar.sync"], tmp_path)
    # per warp: C B^T (8 x 16 tiles, state 256), P x (8 x 4 x hi/lo), C state^T (2 parts x 8 x 16)
    assert ptx.count("mma.sync.aligned.m16n8k16") == 128 + 64 + 256


def test_tirx_sources():
    # state pass: the state entering each chunk written as float4, exponentials in fp64; output pass:
    # hand-placed mma.sync fragments, 16-byte C/B/x loads, hi/lo bf16 splits of P and of the state
    sources = check_tirx_sources(STEM, ["mkb_ssd_states_kernel", "mkb_ssd_output_kernel"], [
        "*(float4*)(hs_ptr + ", "exp(((double)", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "*(uint4*)(raw_ptr + 0) = *(uint4*)(q_ptr", "*(uint4*)(raw_ptr + 0) = *(uint4*)(k_ptr",
        "*(uint4*)(raw_ptr + 0) = *(uint4*)(v_ptr", "*(float4*)(fv_ptr + 0) = *(float4*)(hs_ptr",
        "pair_ptr[0] = ((nv_bfloat16)(acc_s_ptr[0] - ((float)((nv_bfloat16)acc_s_ptr[0]))));",
        "raw_ptr[0] = ((nv_bfloat16)(fv_ptr[0] - ((float)((nv_bfloat16)fv_ptr[0]))));",
        "__launch_bounds__(256)", "__launch_bounds__(128)"])
    out = sources["mkb_ssd_output_kernel"]
    calls = out.count("tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(acc_")
    # C B^T (4 k16 steps x 8 tiles per slice), P x (4 x 8 x hi/lo), C state^T (2 parts x 4 x 8)
    assert calls == 32 + 64 + 64


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
