"""Problem 03 (paged GQA decode, 32 query heads on 8 KV heads, page size 64, split-K): both oracles
compile for sm_90a (a split kernel and a merge kernel each) with the instructions their design
relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "03_gqa_paged_decode_h32_kv8_d128_ps64_bf16"


def test_cutedsl_compiles(tmp_path):
    # split: warp shuffles for q.k, ex2 for the base-2 softmax, shared-memory merge of the warps,
    # 8-byte vector loads of K/V rows; merge: IEEE division and one bf16 rounding of the output
    check_cutedsl_compiles(STEM, ["gqa_decode_split_kernel", "gqa_decode_merge_kernel"],
                           ["shfl.sync.bfly.b32", "bar.sync", "ex2.approx", "st.shared", "ld.shared",
                            "ld.global.v4.b16", "cvt.rn.bf16.f32", "div.rn.f32", ".reqntid 256, 1, 1",
                            ".reqntid 128, 1, 1"], tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(STEM, ["mkb_gqa_decode_split_kernel", "mkb_gqa_decode_merge_kernel"],
                                 ["tvm_builtin_cuda_warp_reduce_sum_32(", "*(nv_bfloat164*)(k_raw_ptr",
                                  "*(nv_bfloat164*)(v_raw_ptr", "kv_indices_ptr[", "log2f(", "0x1.62e4p-1f",
                                  "__launch_bounds__(256)", "__launch_bounds__(128)",
                                  "__shared__ alignas(64) float acc_part_ptr[4096]",  # 8 warps x 4 heads x 128
                                  "& 63)", ">> 6)", ">> 10)"])  # slot, page and chunk (1024 tokens) arithmetic
    for source in sources.values():
        assert "expf(" not in source and "exp2f(" not in source  # exp is the precise polynomial


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
