"""Multimodal input embedding with an NVFP4 vision projection (Qwen3-VL-32B, hidden 8192).

Text embeddings are rows of the bf16 table [151936, 8192] picked by text_input_ids [32, 1024]. The
fp32 vision features [32, 384, 3584] are quantised to NVFP4 in the call (one global scale for the
whole tensor), multiplied by the pre-quantised NVFP4 weight [8192, 3584] in fp32 and rounded to bf16;
the bf16 bias is then added (a bf16 sum). For each batch row the 384 projected vision tokens replace
the text embeddings at the positions where vision_token_mask is True, in ascending position order.

NVFP4, all in fp32: g = amax(x) / (448 * 6); per 16-element block along K, s = e4m3(amax(block) / 6 / g)
(two fp32 divisions, nearest-even e4m3); x / (s * g), clipped to +-6, rounds to the nearest E2M1 value
(0, 0.5, 1, 1.5, 2, 3, 4, 6; ties to the even code); a block whose scale is 0 decodes to 0. Weight
codes are packed two per byte (low nibble = even element, bit 3 = sign). Values decode to code * s * g.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-VL-32B (NVFP4 checkpoint; hidden 8192, vision 3584)",
    upstream="nvidia/SOL-ExecBench Quant/008_nvfp4_multimodal_embedding_projection, workload index 10",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Packed E2M1 pairs are stored as uint8 (the bytes torch.float4_e2m1fn_x2 would hold). The "
    "vision features' quantisation runs in fp32 in the float64 anchor too, so both runs use the same "
    "codes. The source scatters the vision rows with a per-row loop; one masked assignment does the "
    "same here.",
)
INPUTS = ("text_input_ids", "text_embedding_weight", "vision_features", "vision_proj_weight_fp4",
          "vision_proj_weight_scale", "vision_proj_weight_global_scale", "vision_proj_bias",
          "vision_token_mask")
OUTPUTS = ("merged_embeddings",)
SMALL_WORKLOAD = dict(batch=2, seq=12, vision_tokens=5, vocab=50, hidden=32, vision_dim=64)
BLOCK = 16
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _bf16(t):
    """A bf16 rounding the eager model performs; the float64 anchor lifts it."""
    return acc(to_output(t, torch.bfloat16))


def nvfp4_round(x):
    """NVFP4-quantise x [..., K] in fp32: E2M1 values [..., K/16, 16], block scales [..., K/16, 1], g."""
    x32 = x.to(torch.float32)  # the quantisation step is defined in fp32, in both runs
    mag = x32.abs()
    g = mag.amax() / (448.0 * 6.0)
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


def make_inputs(device, generator, *, batch=32, seq=1024, vision_tokens=384, vocab=151936, hidden=8192,
                vision_dim=3584):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    ids = torch.randint(0, vocab, (batch, seq), device=device, generator=generator)
    table = randn(vocab, hidden).to(torch.bfloat16)
    features = randn(batch, vision_tokens, vision_dim)
    packed, scale, g = encode_nvfp4(randn(hidden, vision_dim) / vision_dim ** 0.5)
    bias = randn(hidden).to(torch.bfloat16)
    chosen = torch.rand(batch, seq, device=device, generator=generator).argsort(dim=-1)[:, :vision_tokens]
    mask = torch.zeros(batch, seq, dtype=torch.bool, device=device).scatter_(1, chosen, True)
    return ids, table, features, packed.unsqueeze(0), scale.unsqueeze(0), g, bias, mask


def reference(text_input_ids, text_embedding_weight, vision_features, vision_proj_weight_fp4,
              vision_proj_weight_scale, vision_proj_weight_global_scale, vision_proj_bias,
              vision_token_mask):
    merged = text_embedding_weight[text_input_ids]
    x = nvfp4_dequant(*nvfp4_round(vision_features))
    w = decode_nvfp4(vision_proj_weight_fp4[0], vision_proj_weight_scale[0], vision_proj_weight_global_scale)
    vision = _bf16(_bf16(x @ w.T) + acc(vision_proj_bias))
    merged[vision_token_mask] = vision.flatten(0, 1).to(merged.dtype)
    return to_output(merged, torch.bfloat16)


def physical_floor(*, batch, seq, vision_tokens, vocab, hidden, vision_dim):
    text_rows = batch * (seq - vision_tokens)
    weight_bytes = hidden * (vision_dim // 2 + vision_dim // BLOCK) + hidden * 2
    reads = batch * seq * (8 + 1) + text_rows * hidden * 2 + batch * vision_tokens * vision_dim * 4
    return {"bytes": reads + weight_bytes + batch * seq * hidden * 2,
            "flops": 2 * batch * vision_tokens * vision_dim * hidden, "math": "fp4"}
