"""Problem 01 (paged GQA decode, 32 query heads on 8 KV heads, page size 1): both oracles compile
for sm_90a with the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "01_gqa_paged_decode_h32_kv8_d128_ps1_bf16"


def test_cutedsl_compiles(tmp_path):
    # warp shuffles for q.k, ex2 for the base-2 softmax, shared-memory merge of the warps, 8-byte
    # vector loads of K/V rows, IEEE division and one bf16 rounding of the output
    check_cutedsl_compiles(STEM, ["gqa_paged_decode_kernel"],
                           ["shfl.sync.bfly.b32", "bar.sync", "ex2.approx", "st.shared", "ld.shared",
                            "ld.global.v4.b16", "cvt.rn.bf16.f32", "div.rn.f32"], tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(STEM, ["mkb_gqa_paged_decode_h32_kernel"],
                                 ["tvm_builtin_cuda_warp_reduce_sum_32(", "*(nv_bfloat164*)(k_raw_ptr",
                                  "*(nv_bfloat164*)(v_raw_ptr", "kv_indices_ptr[", "log2f(",
                                  "0x1.62e4p-1f", "__launch_bounds__(512)",
                                  "__shared__ alignas(64) float acc_part_ptr[8192]"])  # 16 warps x 4 heads x 128
    (source,) = sources.values()
    assert "expf(" not in source and "exp2f(" not in source  # exp is the precise polynomial


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
