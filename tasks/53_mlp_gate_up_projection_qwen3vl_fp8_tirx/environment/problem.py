"""FP8 gate/up projection with SiLU gating on pre-quantised operands (Qwen3-VL, 3584 -> 18944).

x is float8 e4m3fn [8704, 3584] (8704 tokens) with fp32 scales per (row, 128-column block); the gate
and up weights are e4m3 [18944, 3584] with fp32 scales per 128 x 128 block. Each operand dequantises
to q * scale; gate = x_dq @ Wg_dq^T and up = x_dq @ Wu_dq^T are kept in fp32, and
output = silu(gate) * up is rounded to bf16.
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output, true_divisor

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-VL (FP8 checkpoint; dims 3584 -> 18944)",
    upstream="nvidia/SOL-ExecBench Quant/003_fp8_mlp_gate_up_projection, workload index 2",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full: 8704 tokens, 3584 -> 18944. Every input is synthetic, as in "
    "upstream (x and both weights drawn per draw, then quantised with the recipe). As in the catalogue's "
    "adaptation, gate and up stay in fp32 and only silu(gate) * up is rounded to bf16 (the source "
    "rounds each GEMM output to bf16 first).",
)
INPUTS = ("x", "scale_x", "gate_proj_weight", "scale_gate", "up_proj_weight", "scale_up")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(tokens=5, hidden=256, intermediate=384)
BLOCK = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12



def quantize_fp8_blocks(x, block_rows):
    """e4m3 codes of fp32 x [R, K] and fp32 scales [R / block_rows, K / 128] (block_rows x 128 blocks)."""
    rows, cols = x.shape
    blocks = x.view(rows // block_rows, block_rows, cols // BLOCK, BLOCK)
    scale = torch.clamp(blocks.abs().amax(dim=(1, 3), keepdim=True) / true_divisor(FP8_MAX, blocks), min=MIN_SCALE)
    q = (blocks / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(rows, cols), scale.view(rows // block_rows, cols // BLOCK)


def dequantize(q, scale):
    """q * scale in the working precision; the block height follows from the scale's row count."""
    rows, cols = q.shape
    block_rows = rows // scale.shape[0]
    blocks = acc(q).view(scale.shape[0], block_rows, scale.shape[1], BLOCK)
    return (blocks * acc(scale)[:, None, :, None]).view(rows, cols)


def make_inputs(device, generator, *, tokens=8704, hidden=3584, intermediate=18944):
    def weight():
        gain = 0.5 + 1.5 * torch.rand(intermediate // BLOCK, hidden // BLOCK, device=device,
                                      generator=generator)
        gain = gain.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)
        w = torch.randn(intermediate, hidden, device=device, generator=generator) / hidden ** 0.5
        return quantize_fp8_blocks(w * gain, BLOCK)

    x, scale_x = quantize_fp8_blocks(torch.randn(tokens, hidden, device=device, generator=generator), 1)
    return (x, scale_x, *weight(), *weight())


def reference(x, scale_x, gate_proj_weight, scale_gate, up_proj_weight, scale_up):
    a = dequantize(x, scale_x)
    gate = a @ dequantize(gate_proj_weight, scale_gate).T
    up = a @ dequantize(up_proj_weight, scale_up).T
    return to_output(F.silu(gate) * up, torch.bfloat16)


def physical_floor(*, tokens, hidden, intermediate):
    operands = tokens * hidden + 2 * intermediate * hidden
    scales = tokens * (hidden // BLOCK) * 4 + 2 * (intermediate // BLOCK) * (hidden // BLOCK) * 4
    return {"bytes": operands + scales + tokens * intermediate * 2,
            "flops": 2 * 2 * tokens * hidden * intermediate, "math": "fp8"}
