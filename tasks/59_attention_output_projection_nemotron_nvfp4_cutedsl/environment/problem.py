"""NVFP4 attention output projection (Nemotron-3-Nano), fp32 activation quantised in the call.

The fp32 activation [32768, 4096] (32768 tokens) is quantised to NVFP4 on the fly, all in fp32:
global decode scale g = amax(x) / (448 * 6) over the whole activation; per 16-element block along K,
s = e4m3(amax(block) / 6 / g) (two fp32 divisions, then nearest-even e4m3); each element x / (s * g),
clipped to +-6, rounds to the nearest E2M1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6; ties to the even code).
A block whose scale is 0 decodes to 0. The weight arrives pre-quantised: E2M1 codes packed two per
byte (low nibble = even element, bit 3 = sign), e4m3 block scales and a global decode scale. Both
operands decode to code * s * g and are multiplied in fp32: output [32768, 2816] fp32.

Grading: the output is compared at fp32 precision, so the activation's codes must be exactly these:
IEEE fp32 divisions as written (a multiplication by a reciprocal flips a code now and then).
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="NVIDIA-Nemotron-3-Nano-30B-A3B (NVFP4)",
    upstream="nvidia/SOL-ExecBench Quant/024_nvfp4_attention_output_projection, workload index 15",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full: 32768 tokens, 4096 -> 2816 (hidden 2688 padded to 2816); the "
    "activation's global scale spans all 32768 tokens, as upstream. Every input is synthetic, as in "
    "upstream (activation and the weight before its NVFP4 quantisation drawn per draw). Packed E2M1 "
    "pairs are stored as uint8 (the bytes torch.float4_e2m1fn_x2 would hold). The activation's "
    "quantisation runs in fp32 in the float64 anchor too, so both runs use the same codes.",
)
INPUTS = ("hidden_states", "weight_fp4", "weight_scale_fp8", "weight_global_decode_scale")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(tokens=8, in_features=64, out_features=48)
BLOCK = 16
E4M3_MAX = 448.0  # the largest finite e4m3 value
E2M1_MAX = 6.0  # the largest E2M1 magnitude
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


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


def make_inputs(device, generator, *, tokens=32768, in_features=4096, out_features=2816):
    x = torch.randn(tokens, in_features, device=device, generator=generator)
    w = 0.02 * torch.randn(out_features, in_features, device=device, generator=generator)
    return (x, *encode_nvfp4(w))


def reference(hidden_states, weight_fp4, weight_scale_fp8, weight_global_decode_scale):
    x = nvfp4_dequant(*nvfp4_round(hidden_states))
    w = decode_nvfp4(weight_fp4, weight_scale_fp8, weight_global_decode_scale)
    return to_output(x @ w.T, torch.float32)


def physical_floor(*, tokens, in_features, out_features):
    weight_bytes = out_features * (in_features // 2 + in_features // BLOCK)
    return {"bytes": tokens * in_features * 4 + weight_bytes + tokens * out_features * 4,
            "flops": 2 * tokens * in_features * out_features, "math": "fp4"}
