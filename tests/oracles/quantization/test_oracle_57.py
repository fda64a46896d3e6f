"""Problem 57 (NVFP4 attention block: q/k/v projections, RoPE, causal GQA, o_proj, Nova-70B): both oracles
compile for sm_90a with the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources, load

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


def test_tirx_sources():
    sources = check_tirx_sources(STEM, ["mkb_nvfp4_amax_bf16_kernel", "mkb_nvfp4_global_scale_kernel",
                                        "mkb_nvfp4_act_quant_bf16_kernel", "mkb_nvfp4_weight_decode_kernel",
                                        "mkb_nvfp4_gemm_kernel", "mkb_attn_core_kernel", "mkb_nvfp4_amax_kernel",
                                        "mkb_nvfp4_act_quant_kernel", "mkb_nvfp4_gemm_bf16_kernel"],
                                 ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "div.rn.f32",
                                  "cvt.rn.satfinite.e4m3x2.f32", "__launch_bounds__(128)", "float q_s_ptr[2064]",
                                  "float kv_s_ptr[4128]", "float s_s_ptr[2048]", "exp2f(", "__shfl_xor_sync("])
    attn = sources["mkb_attn_core_kernel"]
    assert "((((int)blockIdx.x) >> 1) + 1)" in attn  # causal: 32-key chunks up to the tile's last query


def test_tirx_builds_the_small_shape():
    """The small workload (10 tokens, hidden 256, 2 heads on 1 KV head, 5-token sequences) builds too."""
    sources = load(STEM, "tirx").kernel_sources("sm_90a", batch=2, seq=5, hidden=256, heads=2, kv_heads=1)
    assert "mkb_attn_core_kernel" in sources and "float s_s_ptr[512]" in sources["mkb_attn_core_kernel"]


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
