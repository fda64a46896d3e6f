"""Problem 26 (staged block-table writes for 3 KV-cache groups, then the int64 slot mapping): both oracles."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "26_hybrid_kv_group_block_table_update_slot_mapping_int32_int64"


def test_cutedsl_compiles_for_sm90a(tmp_path):
    """One CTA: the writes, a barrier, then per-token binary search and int64 slots."""
    ptx = check_cutedsl_compiles(
        STEM, ["block_table_slots_kernel"],
        ["bar.sync", "ld.global.b8", "ld.global.b64", "st.global.b32", "st.global.b64", "div.s32"], tmp_path)
    assert ".reqntid 1024, 1, 1" in ptx and ptx.count("bar.sync") == 1
    # the tables are written and then read in one kernel: no read-only (non-coherent) loads anywhere
    assert ".nc" not in ptx


def test_tirx_sources():
    (source,) = check_tirx_sources(
        STEM, ["mkb_block_table_slots_kernel"],
        ["__launch_bounds__(1024)", "tvm_builtin_cuda_cta_sync();", "uchar* __restrict__ overwrite_ptr",
         "int64_t* __restrict__ slots_ptr", "if (overwrite_ptr[w] != (uchar)0) {", "while (1) {"]).values()
    body = source[source.index('extern "C" __global__'):]
    assert body.count("tvm_builtin_cuda_cta_sync();") == 1
    assert "= (block * 2);" in body and "= ((block * 2) + 1);" in body  # group 1 expands each id in two
    # the slot of each group: kernel block sizes 16, 16 and 8
    assert "* (int64_t)16) + (pos & (int64_t)15))" in body and "* (int64_t)8) + (pos & (int64_t)7))" in body
    assert body.count("= (int64_t)-1;") == 3


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_matches_reference_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
