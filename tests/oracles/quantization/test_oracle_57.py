"""Problem 57 (NVFP4 attention block: q/k/v projections, RoPE, causal GQA, o_proj, Nova-70B): the oracle
compiles for sm_90a with the instructions its design relies on; on a GPU it matches the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, load

STEM = "57_qkvo_attention_block_nova_nvfp4"


def test_cutedsl_compiles(tmp_path):
    # quantisers: IEEE divisions, nearest-even e4m3 scales; GEMMs: mma.sync m16n8k16 bf16 fed by cp.async
    # and ldmatrix, bf16 packing of the o_proj output; attention core: 128-thread CTAs, base-2 exp,
    # warp shuffles for the row max and sum
    check_cutedsl_compiles(STEM, ["nvfp4_amax_kernel", "nvfp4_global_scale_kernel", "nvfp4_act_quant_kernel",
                                  "nvfp4_weight_decode_kernel", "nvfp4_weight_decode_kernel", "nvfp4_gemm_kernel",
                                  "nvfp4_gemm_kernel", "attn_core_kernel", "nvfp4_amax_kernel",
                                  "nvfp4_act_quant_kernel", "nvfp4_gemm_kernel"],
                           ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "cp.async.cg.shared.global",
                            "ldmatrix.sync.aligned", "cvt.rn.satfinite.e4m3x2.f32", "div.rn.f32", "ex2.approx",
                            "cvt.rn.bf16x2.f32", "shfl.sync.bfly.b32", ".reqntid 128, 1, 1"], tmp_path)


def test_cutedsl_compiles_the_small_shape():
    """The small workload (10 tokens padded to a 128-row tile, hidden 256, 2 heads on 1 KV head) builds too."""
    module = load(STEM, "cutedsl")
    plan = dict.fromkeys(module._plan(batch=2, seq=5, hidden=256, heads=2, kv_heads=1))
    for kind, shape in plan:
        assert len(module._compile(kind, shape, arch="sm_90a").kernel_info) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
