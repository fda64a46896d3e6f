"""GQA attention core with NVFP4-quantised matmuls (Qwen3-14B: 40 query heads, 8 KV heads of 128).

K and V are repeated to the 40 query heads (head h uses KV head h // 5). Q and K, each viewed as one
[B * 40, S, 128] tensor with a single global scale, are quantised to NVFP4 (blocks along the head
dim) and multiplied in fp32; the scores are rounded to bf16, scaled by 128^-0.5 (bf16), the additive
bf16 causal mask is added (bf16), and the softmax is taken in fp32 and rounded to bf16: these are the
returned attn_weights. The probabilities [B * 40, S, S] and V^T [B * 40, 128, S] are quantised to
NVFP4 (blocks along the keys) and multiplied in fp32; attn_output [B, 40, S, 128] is rounded to bf16.
Each global scale couples all (batch, head) slices of its tensor. Quantising K or V^T before repeating
them is the same thing: the repeat changes neither the amax nor any block. The mask is causal, so query
0 sees key 0 alone and its probability is exactly 1: the probabilities' amax is 1 on every input, and
their global scale is the constant 1 / (448 * 6). Use the constant: a kernel whose result is the same
on every input cannot be told, by suppressing it, from a kernel that does nothing.

NVFP4, all in fp32: g = amax(x) / (448 * 6); per 16-element block along K, s = e4m3(amax(block) / 6 / g)
(two fp32 divisions, nearest-even e4m3); x / (s * g), clipped to +-6, rounds to the nearest E2M1 value
(0, 0.5, 1, 1.5, 2, 3, 4, 6; ties to the even code); a block whose scale is 0 (the masked, exactly zero
probabilities) decodes to 0. Values decode to code * s * g.

Grading: the float64 anchor keeps every quantisation step but not the bf16 roundings of the scores
and probabilities, so it quantises the unrounded probabilities. Codes flip wherever two
implementations round differently near a code boundary, and the short causal rows have too few
blocks to absorb a flip: keep the scores and probabilities in fp32 up to the quantiser (round only
the returned attn_weights) to track the anchor.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-14B (NVFP4 checkpoint)",
    upstream="nvidia/SOL-ExecBench Quant/031_nvfp4_grouped_query_attention_with_kv_repeat, workload index 1",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Quantisation runs in fp32 in the float64 anchor too: Q, K and V get the same codes in both "
    "runs; the probabilities' codes can differ because the anchor's probabilities are unrounded. The "
    "catalogue leaves zero blocks open; here a block with scale 0 decodes to 0 (its code is irrelevant).",
)
INPUTS = ("query_states", "key_states", "value_states", "attention_mask")
OUTPUTS = ("attn_output", "attn_weights")
SMALL_WORKLOAD = dict(batch=2, heads=4, kv_heads=2, seq=32, head_dim=32)
BLOCK = 16
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # the E2M1 magnitudes the description lists
E4M3_MAX = 448.0  # the largest finite e4m3 value
E2M1_MAX = 6.0  # the largest E2M1 magnitude


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


def nvfp4(x):
    """x quantised to NVFP4 (one global scale over the whole tensor) and decoded."""
    return nvfp4_dequant(*nvfp4_round(x))


def make_inputs(device, generator, *, batch=64, heads=40, kv_heads=8, seq=256, head_dim=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    future = torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)
    mask = torch.zeros(seq, seq, dtype=torch.bfloat16, device=device)
    mask = mask.masked_fill(future, torch.finfo(torch.bfloat16).min).expand(batch, 1, seq, seq)
    return (randn(batch, heads, seq, head_dim), randn(batch, kv_heads, seq, head_dim),
            randn(batch, kv_heads, seq, head_dim), mask.contiguous())


def reference(query_states, key_states, value_states, attention_mask):
    heads, head_dim = query_states.shape[1], query_states.shape[3]
    group = heads // key_states.shape[1]
    q = nvfp4(query_states)
    k = nvfp4(key_states).repeat_interleave(group, dim=1)
    scores = _bf16(_bf16(q @ k.transpose(-1, -2)) * head_dim ** -0.5)
    weights = _bf16(torch.softmax(_bf16(scores + acc(attention_mask)), dim=-1))
    v_t = nvfp4(value_states.transpose(-1, -2)).repeat_interleave(group, dim=1)
    output = nvfp4(weights) @ v_t.transpose(-1, -2)
    return to_output(output, torch.bfloat16), to_output(weights, torch.bfloat16)


def physical_floor(*, batch, heads, kv_heads, seq, head_dim):
    qkv = batch * (heads + 2 * kv_heads) * seq * head_dim * 2
    outputs = batch * heads * seq * (head_dim + seq) * 2
    return {"bytes": qkv + outputs,  # the mask is always causal, so a kernel need not read it
            "flops": 2 * 2 * batch * heads * seq * seq * head_dim // 2, "math": "fp4"}
