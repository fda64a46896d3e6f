"""Problem 18 (DSA lightning-indexer top-2048 over an FP8 paged index-key cache): both oracles compile
for sm_90a (a score kernel and a select kernel each) with the instructions their design relies on;
on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "18_dsa_topk_indexer_h64_d128_topk2048_ps64_fp8"


def test_cutedsl_compiles(tmp_path):
    # scores: 16-byte key/q loads, hardware e4m3 decode, 16-byte warp-broadcast q loads from shared
    # memory, 256 threads; select: 1024 threads, block counts by butterfly shuffles, block scans by
    # shuffle-up, signed key compares, the flip of negative scores' low 31 bits (arithmetic shift)
    check_cutedsl_compiles(STEM, ["dsa_index_scores_kernel", "dsa_topk_select_kernel"],
                           ["ld.global.v4", "cvt.rn.f16x2.e4m3x2", "ld.shared.v4.b32", "bar.sync",
                            ".reqntid 256, 1, 1", ".reqntid 1024, 1, 1", "shfl.sync.bfly.b32",
                            "shfl.sync.up.b32", "setp.ge.s32", "shr.s32"], tmp_path)


def test_cutedsl_compiles_the_small_shape():
    """A small shape (4 heads, dim 16: one head per quarter, one 16-byte chunk; 33 pages) traces too."""
    from oracle_support import load

    score, select = load(STEM, "cutedsl")._compile(4, 4, 16, 64, 64, 33, arch="sm_90a")
    assert len(score.kernel_info) == len(select.kernel_info) == 1


def test_tirx_sources():
    sources = check_tirx_sources(STEM, ["mkb_dsa_index_scores_kernel", "mkb_dsa_topk_select_kernel"],
                                 ["*(int4*)(wr_ptr + 0) = *(int4*)(cache_ptr", "*(float4*)(qr_ptr + 0)",
                                  "__launch_bounds__(256)", "__launch_bounds__(1024)", "__shfl_up_sync(",
                                  "__shfl_xor_sync(", "tvm_builtin_cuda_cta_sync()", "float q_s_ptr[8192]",
                                  "for (int step = 0; step < 33; ++step)", "(uint)2147483648 <= bits"])
    select = sources["mkb_dsa_topk_select_kernel"]
    assert "uint keys_ptr[3]" in select  # 2752 positions over 1024 threads


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
