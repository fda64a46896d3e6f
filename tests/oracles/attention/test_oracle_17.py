"""Problem 17 (DeepSeek sparse attention, absorbed MLA, 16 heads, latent 512 + RoPE 64, up to 2048 selected
slots per query token, split-K): both oracles compile for sm_90a (a split kernel and a merge kernel each)
with the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources, load

STEM = "17_dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64_bf16"


def test_cutedsl_compiles(tmp_path):
    # split: 16-byte latent loads and 4-byte RoPE loads per lane, warp shuffles for the logits and the
    # chunk's last valid entry, ex2 for the base-2 softmax, 16-byte stores of the fp32 partials; merge:
    # IEEE division, one bf16 rounding of the output; 8 warps (2 heads each) per split CTA, one thread
    # per latent dim in the merge
    check_cutedsl_compiles(STEM, ["dsa_sparse_split_kernel", "dsa_sparse_merge_kernel"],
                           ["ld.global.v4.b32", "ld.global.v2.b16", "shfl.sync.bfly.b32", "ex2.approx",
                            "st.global.v4.b32", "cvt.rn.bf16.f32", "div.rn.f32", "max.s32", ".reqntid 256, 1, 1",
                            ".reqntid 512, 1, 1"], tmp_path)


def test_cutedsl_compiles_the_small_shape():
    """The small workload's shape (2 heads, latent 16, RoPE 8: one dim per lane, top_k 16) traces too."""
    split, merge = load(STEM, "cutedsl")._compile(4, 2, 16, 8, 128, 16, arch="sm_90a")
    assert len(split.kernel_info) == len(merge.kernel_info) == 1


def test_tirx_sources():
    sources = check_tirx_sources(STEM, ["mkb_dsa_sparse_split_kernel", "mkb_dsa_sparse_merge_kernel"],
                                 ["tvm_builtin_cuda_warp_reduce_sum_32(", "*(uint4*)(c_raw_ptr + 8)",
                                  "*(nv_bfloat162*)(k_raw_ptr", "*(float4*)(part_o_ptr", "sparse_ptr[",
                                  "__shfl_xor_sync(", "log2f(", "0x1.62e4p-1f", "__launch_bounds__(256)",
                                  "__launch_bounds__(512)"])
    for source in sources.values():
        assert "expf(" not in source and "exp2f(" not in source  # exp is the precise polynomial
    small = load(STEM, "tirx").kernel_sources("sm_90a", heads=2, rank=16, rope=8, top_k=16)
    assert "if (((int)threadIdx.x) < 16) {" in small["mkb_dsa_sparse_split_kernel"]  # latent dim of lanes 0..15


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
