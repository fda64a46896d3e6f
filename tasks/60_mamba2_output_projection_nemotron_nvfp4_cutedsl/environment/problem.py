"""NVFP4 x NVFP4 GEMM from pre-quantised operands (Mamba-2 output projection, Nemotron-3-Nano).

Both operands arrive as E2M1 codes packed two per byte (low nibble = even element), one e4m3 scale
per 16-element block along K, and one fp32 global decode scale per tensor. Each value decodes to
code * block_scale * global_scale; output = A_dec @ B_dec^T in fp32, shape [1, 8192, 1920].
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="NVIDIA-Nemotron-3-Nano-30B-A3B (NVFP4; dims 1920 x 1920)",
    upstream="nvidia/SOL-ExecBench Quant/026_nvfp4_mamba2_out_projection, workload index 11",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Packed E2M1 pairs are stored as uint8 (the bytes torch.float4_e2m1fn_x2 would hold).",
)
INPUTS = ("hidden_states", "hidden_states_scale", "global_decode_scale_input", "weight",
          "weight_scale", "global_decode_scale_weight")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(tokens=8, features=64)
BLOCK = 16
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def quantize_nvfp4(x):
    """NVFP4-quantise a [..., K] fp32 tensor: packed codes, e4m3 block scales, global decode scale."""
    g = x.abs().amax() / (448.0 * 6.0)
    blocks = x.view(*x.shape[:-1], -1, BLOCK)
    scale = (blocks.abs().amax(dim=-1) / 6.0 / g).to(torch.float8_e4m3fn)
    scaled = (blocks / (scale.float().unsqueeze(-1) * g)).clamp(-6.0, 6.0)
    mag = scaled.abs()
    bounds = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=x.device)
    code = torch.bucketize(mag, bounds)  # ties go to the lower value; fix the ones that round up
    code += ((mag == 0.75) | (mag == 1.75) | (mag == 3.5)).to(code.dtype)
    code = (code | ((scaled < 0).to(code.dtype) << 3)).view(*x.shape).to(torch.uint8)
    packed = code[..., 0::2] | (code[..., 1::2] << 4)
    return packed, scale, float(g)


def dequantize_nvfp4(packed, scale, g):
    """Decode packed E2M1 codes with their block scales, in the working precision."""
    table = torch.tensor(E2M1_VALUES, device=packed.device, dtype=acc(scale).dtype)
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2).long()
    values = table[codes & 0x7] * (1 - 2 * (codes >> 3))
    blocks = values.view(*values.shape[:-1], -1, BLOCK) * acc(scale).unsqueeze(-1) * g
    return blocks.flatten(-2)


def make_inputs(device, generator, *, tokens=8192, features=1920):
    x = torch.randn(1, tokens, features, device=device, generator=generator)
    w = torch.randn(1, features, features, device=device, generator=generator) / features ** 0.5
    a_codes, a_scale, a_g = quantize_nvfp4(x)
    b_codes, b_scale, b_g = quantize_nvfp4(w)
    return a_codes, a_scale, a_g, b_codes, b_scale, b_g


def reference(hidden_states, hidden_states_scale, global_decode_scale_input, weight, weight_scale,
              global_decode_scale_weight):
    a = dequantize_nvfp4(hidden_states, hidden_states_scale, global_decode_scale_input)
    b = dequantize_nvfp4(weight, weight_scale, global_decode_scale_weight)
    return to_output(a @ b.transpose(-1, -2), torch.float32)


def physical_floor(*, tokens, features):
    operand_bytes = (tokens + features) * (features // 2 + features // BLOCK)
    return {"bytes": operand_bytes + tokens * features * 4, "flops": 2 * tokens * features * features,
            "math": "fp8"}
