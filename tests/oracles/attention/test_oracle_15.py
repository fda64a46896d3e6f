"""Problem 15 (causal absorbed-MLA paged prefill, 16 heads, latent 512 + RoPE 64, page size 1): the
oracles compile for sm_90a with the instructions their design relies on; on a GPU they match the reference."""

import pytest
import torch
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources, load

from metakernelbench.problems import find_problem

STEM = "15_mla_paged_prefill_causal_h16_ckv512_kpe64_ps1_bf16"


def test_cutedsl_compiles(tmp_path):
    # tensor-core QK^T and PV (mma.sync bf16, ldmatrix, ldmatrix.trans for V), 16-byte cp.async row
    # gathers, base-2 softmax (ex2), quad shuffles for row max/sum, IEEE reciprocal of the row sum,
    # bf16 output staged through shared memory and stored 16 bytes at a time
    check_cutedsl_compiles(STEM, ["mla_paged_prefill_kernel"],
                           ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                            "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                            "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                            "cp.async.cg.shared.global", "cp.async.wait_group", "ex2.approx",
                            "shfl.sync.bfly.b32", "rcp.rn.f32", "cvt.rn.bf16", "st.global.v4", "bar.sync"], tmp_path)


def test_tirx_sources():
    # 16-byte loads of q_nope/q_pe rows and of ckv/kpe rows gathered through kv_indices, float4
    # shared-memory reads of the SIMT S and PV loops, 16-lane xor shuffles for row max/sum, base-2
    # softmax, 32 KB of shared memory
    sources = check_tirx_sources(STEM, ["mkb_mla_paged_prefill_kernel"],
                                 ["*(uint4*)(q_nope_ptr", "*(uint4*)(q_pe_ptr", "*(uint4*)(ckv_ptr",
                                  "*(uint4*)(kpe_ptr", "kv_indices_ptr[",
                                  "*(float4*)(af_ptr + 0) = *(float4*)(pool_ptr",
                                  "*(float4*)(bf_ptr + 0) = *(float4*)(pool_ptr", "__shfl_xor_sync((uint)4294967295",
                                  "exp2f(", "log2f(", "__launch_bounds__(256)",
                                  "__shared__ alignas(64) float pool_ptr[4096]",
                                  "__shared__ alignas(64) float p_s_ptr[4096]"])
    (source,) = sources.values()
    assert "expf(" not in source


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)


def test_the_compile_checks_use_the_graded_token_counts():
    # the CuTe compile checks fix the query and KV token counts of the captured profile (not workload keys)
    pytest.importorskip("cutlass.cute")
    q_nope, _, _, _, _, _, kv_indices, _ = find_problem(STEM).make_inputs(torch.device("meta"), torch.Generator())
    assert (q_nope.shape[0], kv_indices.shape[0]) == load(STEM, "cutedsl")._GRADED_TOKENS
