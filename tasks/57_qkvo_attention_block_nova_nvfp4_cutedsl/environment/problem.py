"""NVFP4 attention block (Nova-70B, Llama-3-70B architecture): q/k/v projections, RoPE, GQA, o_proj.

hidden [B, S, 8192] (bf16). Each of the q, k and v projections quantises the bf16 activation to NVFP4
in the call (one global scale over all B * S tokens) and multiplies it by its pre-quantised NVFP4
weight in fp32, rounded to bf16: q has 64 heads, k and v 8 heads of 128. Rotate-half RoPE with the
given cos / sin [B, S, 128] in bf16 arithmetic: x * cos + rotate_half(x) * sin, rotate_half(x) =
[-x2, x1]. GQA: query head h uses KV head h // 8. Scores q k^T (bf16) times 128^-0.5 (bf16), future
keys masked with -inf, softmax in fp32 rounded to bf16, probabilities @ v rounded to bf16. The context
[B, S, 8192] is re-quantised to NVFP4 (its own global scale) and projected by the NVFP4 o_proj; the
output is bf16. The graded batch is 64 sequences of 128 tokens, so each activation's global scale is
taken over all 8192 tokens.

NVFP4, all in fp32: g = amax(x) / (448 * 6); per 16-element block along K, s = e4m3(amax(block) / 6 / g)
(two fp32 divisions, nearest-even e4m3); x / (s * g), clipped to +-6, rounds to the nearest E2M1 value
(0, 0.5, 1, 1.5, 2, 3, 4, 6; ties to the even code); a block whose scale is 0 decodes to 0. Weight
codes are packed two per byte (low nibble = even element, bit 3 = sign). Values decode to code * s * g.

Grading: the float64 anchor keeps every quantisation step but not the bf16 roundings in between, so
it re-quantises the unrounded context; fp32 intermediates up to that quantiser track it best.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Nova-70B (Llama-3-70B architecture, NVFP4 checkpoint)",
    upstream="nvidia/SOL-ExecBench Quant/019_nvfp4_grouped_query_attention, workload index 15",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full: 64 sequences of 128 tokens (8192 tokens), hidden 8192, 64 query "
    "and 8 KV heads; each activation's global scale is taken over all 8192 tokens, as upstream. Every "
    "input is synthetic, as in upstream (hidden states, cos/sin and the weights before their NVFP4 "
    "quantisation drawn per draw). Packed E2M1 pairs are stored as "
    "uint8. Quantisation runs in fp32 in the float64 anchor too; the context's codes can differ "
    "between the runs because the anchor's context is unrounded.",
)
INPUTS = ("hidden_states", "cos", "sin", "q_weight_fp4", "q_scale", "q_global_decode_scale",
          "k_weight_fp4", "k_scale", "k_global_decode_scale", "v_weight_fp4", "v_scale",
          "v_global_decode_scale", "o_weight_fp4", "o_scale", "o_global_decode_scale")
OUTPUTS = ("attn_output",)
SMALL_WORKLOAD = dict(batch=2, seq=5, hidden=256, heads=2, kv_heads=1)
BLOCK = 16
E4M3_MAX = 448.0  # the largest finite e4m3 value
E2M1_MAX = 6.0  # the largest E2M1 magnitude
HEAD_DIM = 128
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


def nvfp4_linear(x, packed, scale, g):
    """bf16(NVFP4(x) @ NVFP4 weight^T): x quantised in the call with one global scale."""
    return _bf16(nvfp4_dequant(*nvfp4_round(x)) @ decode_nvfp4(packed, scale, g).T)


def _rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return _bf16(_bf16(x * cos) + _bf16(torch.cat([-x2, x1], dim=-1) * sin))


def text_values(*, batch, seq, **_):
    """The token count each activation's global scale spans."""
    return {"tokens": batch * seq}


def make_inputs(device, generator, *, batch=64, seq=128, hidden=8192, heads=64, kv_heads=8):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    def weight(rows):
        return encode_nvfp4(randn(rows, hidden) / hidden ** 0.5)

    def bf16(t):
        return t.to(torch.bfloat16)

    return (bf16(randn(batch, seq, hidden)), bf16(randn(batch, seq, HEAD_DIM)),
            bf16(randn(batch, seq, HEAD_DIM)), *weight(heads * HEAD_DIM), *weight(kv_heads * HEAD_DIM),
            *weight(kv_heads * HEAD_DIM), *weight(hidden))


def reference(hidden_states, cos, sin, q_weight_fp4, q_scale, q_global_decode_scale, k_weight_fp4, k_scale,
              k_global_decode_scale, v_weight_fp4, v_scale, v_global_decode_scale, o_weight_fp4, o_scale,
              o_global_decode_scale):
    batch, seq, _ = hidden_states.shape

    def heads_of(t):
        return t.view(batch, seq, -1, HEAD_DIM).transpose(1, 2)

    q = heads_of(nvfp4_linear(hidden_states, q_weight_fp4, q_scale, q_global_decode_scale))
    k = heads_of(nvfp4_linear(hidden_states, k_weight_fp4, k_scale, k_global_decode_scale))
    v = heads_of(nvfp4_linear(hidden_states, v_weight_fp4, v_scale, v_global_decode_scale))
    cos, sin = acc(cos).unsqueeze(1), acc(sin).unsqueeze(1)
    q, k = _rope(q, cos, sin), _rope(k, cos, sin)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = _bf16(_bf16(q @ k.transpose(-1, -2)) * HEAD_DIM ** -0.5)
    future = torch.ones(seq, seq, dtype=torch.bool, device=scores.device).triu(1)
    probs = _bf16(torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1))
    context = _bf16(probs @ v).transpose(1, 2).reshape(batch, seq, -1)
    return to_output(nvfp4_linear(context, o_weight_fp4, o_scale, o_global_decode_scale), torch.bfloat16)


def physical_floor(*, batch, seq, hidden, heads, kv_heads):
    tokens = batch * seq
    rows = heads * HEAD_DIM + 2 * kv_heads * HEAD_DIM + hidden
    weight_bytes = rows * (hidden // 2 + hidden // BLOCK)
    attention_flops = 4 * batch * heads * seq * seq * HEAD_DIM // 2  # causal half of QK^T and PV
    return {"bytes": tokens * hidden * 2 * 2 + tokens * HEAD_DIM * 2 * 2 + weight_bytes,
            "flops": 2 * tokens * hidden * rows + attention_flops, "math": "fp4"}
