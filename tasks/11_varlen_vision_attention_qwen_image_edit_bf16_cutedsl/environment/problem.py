"""Variable-length vision self-attention with 2x72-dim rotate-half RoPE (Qwen-Image-Edit vision encoder), bf16.

A fused qkv linear (1152 -> 3 x 1152, bias) gives [T, 3, 16 heads, 72]; q and k get rotate-half RoPE
from the per-token cos/sin. Each of the 28 packed images, delimited by cu_seqlens (end offsets, no
leading zero), attends to itself only, bidirectionally, with scale 72^-0.5; softmax in fp32 and the
probabilities rounded to bf16 before PV. The images' outputs, concatenated, go through the output
projection (1152 -> 1152, bias). Like the bf16 model, q/k/v, the rotated q/k, the probabilities and
the attention output are rounded to bf16; the logits stay fp32.
"""

import torch

from metakernelbench.problem_kit import acc, round_to, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen-Image-Edit-2509 (vision encoder)",
    upstream="nvidia/SOL-ExecBench L2/018_cu_seqlens_variable_length_vision_attention, workload index 4",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The authored sequence lengths are not redistributed; a fixed ragged profile with their "
    "statistics (28 sequences, 85..680 tokens, 7168 in total) stands in for them.",
)
INPUTS = ("hidden_states", "cu_seqlens", "cos", "sin", "qkv_weight", "qkv_bias", "proj_weight", "proj_bias")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(images=3, tokens=24, min_len=4, max_len=12, heads=2, head_dim=8)
THETA = 10000.0


def ragged_profile(count, lo, hi, total, seed):
    """A fixed ragged profile with exactly this count, minimum, maximum and sum (same every draw)."""
    assert count >= 2 and lo * (count - 1) + hi <= total <= hi * (count - 1) + lo
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(count, generator=g).tolist()
    weights = (torch.rand(count, generator=g).pow(2) + 0.05).tolist()
    lengths = [lo] * count
    lengths[order[0]] = hi
    free = order[2:]  # order[1] keeps the minimum
    budget = total - lo * (count - 1) - hi
    wsum = sum(weights[i] for i in free)
    for i in free:
        lengths[i] += min(hi - lo, int(weights[i] / wsum * budget))
    rest = total - sum(lengths)
    while rest:  # hand out the remainder one unit at a time, never above hi
        for i in free:
            if rest and lengths[i] < hi:
                lengths[i] += 1
                rest -= 1
    return torch.tensor(lengths, dtype=torch.int64)


def rotary_tables(lengths, heads, head_dim):
    """cos/sin [T, heads, head_dim] from positions restarting at 0 in every sequence (rotate-half)."""
    positions = torch.cat([torch.arange(n) for n in lengths.tolist()]).to(torch.float64)
    inv_freq = THETA ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions[:, None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)[:, None, :].expand(-1, heads, -1)
    return angles.cos().to(torch.bfloat16).contiguous(), angles.sin().to(torch.bfloat16).contiguous()


def make_inputs(device, generator, *, images=28, tokens=7168, min_len=85, max_len=680, heads=16, head_dim=72):
    lengths = ragged_profile(images, min_len, max_len, tokens, seed=111)
    hidden = heads * head_dim

    def randn(*shape, scale=1.0):
        return (scale * torch.randn(*shape, device=device, generator=generator)).to(torch.bfloat16)

    hidden_states = randn(tokens, hidden)
    cos, sin = rotary_tables(lengths, heads, head_dim)
    qkv_weight, qkv_bias = randn(3 * hidden, hidden, scale=hidden ** -0.5), randn(3 * hidden, scale=0.1)
    proj_weight, proj_bias = randn(hidden, hidden, scale=hidden ** -0.5), randn(hidden, scale=0.1)
    cu_seqlens = torch.cumsum(lengths, 0).to(device)
    return (hidden_states, cu_seqlens, cos.to(device), sin.to(device), qkv_weight, qkv_bias, proj_weight,
            proj_bias)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def reference(hidden_states, cu_seqlens, cos, sin, qkv_weight, qkv_bias, proj_weight, proj_bias):
    tokens = hidden_states.shape[0]
    heads, head_dim = cos.shape[1], cos.shape[2]
    bf16 = torch.bfloat16
    qkv = round_to(acc(hidden_states) @ acc(qkv_weight).T + acc(qkv_bias), bf16)
    q, k, v = qkv.view(tokens, 3, heads, head_dim).unbind(dim=1)
    cos, sin = acc(cos), acc(sin)
    q = round_to(q * cos + rotate_half(q) * sin, bf16)
    k = round_to(k * cos + rotate_half(k) * sin, bf16)
    attn = torch.empty_like(q)
    ends = cu_seqlens.tolist()
    for start, end in zip([0] + ends[:-1], ends, strict=True):
        qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))  # [heads, n, head_dim]
        logits = torch.bmm(qs, ks.transpose(1, 2)) * head_dim ** -0.5
        probs = round_to(torch.softmax(logits, dim=-1), bf16)
        attn[start:end] = torch.bmm(probs, vs).transpose(0, 1)
    attn = round_to(attn.reshape(tokens, heads * head_dim), bf16)
    return to_output(attn @ acc(proj_weight).T + acc(proj_bias), bf16)


def physical_floor(*, images, tokens, min_len, max_len, heads, head_dim):
    lengths = ragged_profile(images, min_len, max_len, tokens, seed=111)
    hidden = heads * head_dim
    act_bytes = 2 * tokens * hidden * 2 + 2 * tokens * heads * head_dim * 2 + images * 8
    weight_bytes = (4 * hidden * hidden + 4 * hidden) * 2
    flops = 2 * tokens * hidden * 4 * hidden + 4 * int((lengths * lengths).sum()) * heads * head_dim
    return {"bytes": act_bytes + weight_bytes, "flops": flops, "math": "bf16"}
