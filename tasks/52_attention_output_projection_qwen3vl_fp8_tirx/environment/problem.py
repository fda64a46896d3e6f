"""FP8 block-scaled attention output projection (Qwen3-VL, 7680 -> 7680), quantising both operands.

The activation is 16384 tokens x 7680 features. Both bf16 operands are quantised to float8 e4m3fn
inside the call: the activation in 1 x 128 blocks along K, the weight in 128 x 128 blocks. Per block
scale = max(amax(block) / 448, 1e-12) and q = clamp(x / scale, -448, 448) rounded to e4m3 (nearest
even), all in fp32. The dequantised operands (q * scale) are multiplied in fp32, the bf16 bias is
added in fp32 and the result is rounded to bf16.
"""

import torch

from metakernelbench.problem_kit import acc, to_output, true_divisor

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-VL (FP8 checkpoint; dims 7680 x 7680)",
    upstream="nvidia/SOL-ExecBench Quant/001_fp8_attention_output_projection, workload index 13",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full: 16384 tokens x 7680 features. Every input is synthetic, as in "
    "upstream (activation, weight with per-block gain and bias drawn per draw). The source "
    "tiles the weight's 128 x 128 blocks on its transpose; square blocks hold the same elements either "
    "way. The quantisation runs in fp32 in the float64 anchor too (the operands hold bf16 values, so "
    "the cast is exact), so both runs use the same e4m3 codes.",
)
INPUTS = ("attn_output", "o_proj_weight", "o_proj_bias")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(tokens=5, features=256)
BLOCK = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12



def fp8_block_dequant(x, block_rows):
    """Quantise x [R, K] to e4m3 per block_rows x 128 block (in fp32) and return q * scale."""
    x32 = x.to(torch.float32)  # the quantisation step is defined in fp32, in both runs
    rows, cols = x32.shape
    blocks = x32.view(rows // block_rows, block_rows, cols // BLOCK, BLOCK)
    scale = torch.clamp(blocks.abs().amax(dim=(1, 3), keepdim=True) / true_divisor(FP8_MAX, blocks), min=MIN_SCALE)
    q = (blocks / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return (acc(q) * acc(scale)).view(rows, cols)


def make_inputs(device, generator, *, tokens=16384, features=7680):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    gain = 0.5 + 1.5 * torch.rand(features // BLOCK, features // BLOCK, device=device, generator=generator)
    gain = gain.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)
    weight = (randn(features, features) / features ** 0.5 * gain).to(torch.bfloat16)
    return randn(tokens, features).to(torch.bfloat16), weight, randn(features).to(torch.bfloat16)


def reference(attn_output, o_proj_weight, o_proj_bias):
    a = fp8_block_dequant(attn_output, 1)
    w = fp8_block_dequant(o_proj_weight, BLOCK)
    return to_output(a @ w.T + acc(o_proj_bias), torch.bfloat16)


def physical_floor(*, tokens, features):
    return {"bytes": 2 * tokens * features * 2 + features * features * 2 + features * 2,
            "flops": 2 * tokens * features * features, "math": "fp8"}
