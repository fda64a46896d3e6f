"""NVFP4 SwiGLU MLP (Qwen3-8B: 4096 -> 12288 -> 4096) with NVFP4 activations quantised in the call.

x [B, S, 4096] (bf16) is quantised to NVFP4 once (one global scale) and shared by the gate and up
GEMMs, each a dequantised fp32 GEMM with its pre-quantised NVFP4 weight, rounded to bf16.
h = silu(gate) * up in bf16 (silu rounded, then the product rounded); h is re-quantised to NVFP4 with
its own global scale and multiplied by the NVFP4 down weight; the output [B, S, 4096] is bf16.
Weights carry a leading batch dimension of 1. The graded batch is 32 sequences of 512 tokens, so
each global scale is taken over all 16384 tokens.

NVFP4, all in fp32: g = amax(x) / (448 * 6); per 16-element block along K, s = e4m3(amax(block) / 6 / g)
(two fp32 divisions, nearest-even e4m3); x / (s * g), clipped to +-6, rounds to the nearest E2M1 value
(0, 0.5, 1, 1.5, 2, 3, 4, 6; ties to the even code); a block whose scale is 0 decodes to 0. Weight
codes are packed two per byte (low nibble = even element, bit 3 = sign). Values decode to code * s * g.

Grading: the float64 anchor keeps every quantisation step but not the bf16 roundings of gate, up and
h, so it re-quantises the unrounded h; fp32 intermediates up to that quantiser track it best.
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-8B (NVFP4 checkpoint)",
    upstream="nvidia/SOL-ExecBench Quant/029_nvfp4_fused_mlp_silu_gating, workload index 13",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full: 32 sequences of 512 tokens (16384 tokens), 4096 -> 12288 -> "
    "4096; the global scales of x and h span all 16384 tokens, as upstream. Every input is synthetic, "
    "as in upstream (x and the weights before their NVFP4 quantisation drawn per draw). Packed E2M1 "
    "pairs are stored as uint8. Quantisation runs "
    "in fp32 in the float64 anchor too; h's codes can differ between the runs because the anchor's h "
    "is unrounded.",
)
INPUTS = ("x", "gate_weight_fp4", "gate_scale", "gate_global_decode_scale", "up_weight_fp4", "up_scale",
          "up_global_decode_scale", "down_weight_fp4", "down_scale", "down_global_decode_scale")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, seq=3, hidden=64, intermediate=96)
BLOCK = 16
E4M3_MAX = 448.0  # the largest finite e4m3 value
E2M1_MAX = 6.0  # the largest E2M1 magnitude
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _bf16(t):
    """A bf16 rounding the eager model performs; the float64 anchor lifts it."""
    return acc(to_output(t, torch.bfloat16))


def nvfp4_round(x):
    """NVFP4-quantise x [..., K] in fp32: E2M1 values [..., K/16, 16], block scales [..., K/16, 1], g."""
    x32 = x.to(torch.float32)  # the quantisation step is defined in fp32, in both runs
    mag = x32.abs()
    g = mag.amax() / (E4M3_MAX * E2M1_MAX)
    scale = (mag.reshape(*x32.shape[:-1], -1, BLOCK).amax(dim=-1, keepdim=True) / 6.0 / g)
    scale = scale.to(torch.float8_e4m3fn).to(torch.float32)
    unit = scale * g
    r = (x32.reshape(*x32.shape[:-1], -1, BLOCK) / torch.where(unit > 0, unit, 1.0)).clamp(-6.0, 6.0)
    a = r.abs()
    step = torch.where(a < 2.0, 0.5, torch.where(a < 4.0, 1.0, 2.0))  # E2M1 spacing around |r|
    return torch.round(r / step) * step, scale, g  # round() breaks ties to even multiples = even codes


def nvfp4_dequant(values, scale, g):
    """code * s * g in the working precision, flattened back to [..., K]."""
    return (acc(values) * acc(scale) * acc(g)).flatten(-2)


def encode_nvfp4(x):
    """Packed codes [..., K/2] (uint8), e4m3 block scales [..., K/16] and g (float) of x."""
    values, scale, g = nvfp4_round(x)
    grid = torch.tensor(E2M1_VALUES, device=x.device)
    code = torch.searchsorted(grid, values.abs().contiguous()) | (torch.signbit(values).long() << 3)
    code = code.flatten(-2).to(torch.uint8)
    return code[..., 0::2] | (code[..., 1::2] << 4), scale.squeeze(-1).to(torch.float8_e4m3fn), float(g)


def decode_nvfp4(packed, scale, g):
    """Values of packed codes with their e4m3 block scales and global scale, in the working precision."""
    grid = torch.tensor(E2M1_VALUES, dtype=acc(scale).dtype, device=packed.device)
    signed = torch.cat([grid, -grid])
    byte = torch.arange(256, device=packed.device)
    pairs = torch.stack([signed[byte & 0xF], signed[byte >> 4]], dim=-1)  # low nibble first
    values = pairs[packed.long()].flatten(-2)
    return (values.unflatten(-1, (-1, BLOCK)) * acc(scale).unsqueeze(-1) * g).flatten(-2)


def text_values(*, batch, seq, **_):
    """The token count each activation's global scale spans."""
    return {"tokens": batch * seq}


def make_inputs(device, generator, *, batch=32, seq=512, hidden=4096, intermediate=12288):
    def weight(rows, cols):
        packed, scale, g = encode_nvfp4(0.02 * torch.randn(rows, cols, device=device, generator=generator))
        return packed.unsqueeze(0), scale.unsqueeze(0), g

    x = torch.randn(batch, seq, hidden, device=device, generator=generator).to(torch.bfloat16)
    return (x, *weight(intermediate, hidden), *weight(intermediate, hidden), *weight(hidden, intermediate))


def reference(x, gate_weight_fp4, gate_scale, gate_global_decode_scale, up_weight_fp4, up_scale,
              up_global_decode_scale, down_weight_fp4, down_scale, down_global_decode_scale):
    xq = nvfp4_dequant(*nvfp4_round(x))
    gate = _bf16(xq @ decode_nvfp4(gate_weight_fp4[0], gate_scale[0], gate_global_decode_scale).T)
    up = _bf16(xq @ decode_nvfp4(up_weight_fp4[0], up_scale[0], up_global_decode_scale).T)
    h = _bf16(_bf16(F.silu(gate)) * up)
    down = decode_nvfp4(down_weight_fp4[0], down_scale[0], down_global_decode_scale)
    return to_output(nvfp4_dequant(*nvfp4_round(h)) @ down.T, torch.bfloat16)


def physical_floor(*, batch, seq, hidden, intermediate):
    tokens = batch * seq
    weight_bytes = 3 * intermediate * (hidden // 2 + hidden // BLOCK)
    return {"bytes": 2 * tokens * hidden * 2 + weight_bytes, "flops": 3 * 2 * tokens * hidden * intermediate,
            "math": "fp4"}
