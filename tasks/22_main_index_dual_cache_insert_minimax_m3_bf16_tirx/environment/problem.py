"""MiniMax-M3 attention prologue: Gemma QK-norm, partial RoPE, main and index cache inserts, bf16.

qkv [T, (16 + 4 + 4 + 4 + 1) * 128] splits into q (16 heads), k (4), v (4), index-q (4) and
index-k (1), all of dim 128. q, k, index-q and index-k each get RMSNorm over the 128 dims in fp32
(eps 1e-6) with Gemma scaling x * rsqrt(ms + eps) * (1 + w), rounded to bf16; then NeoX RoPE on the
first 64 dims (halves of 32, base 5e6, cos | sin from a bf16 table by position) computed in fp32 from
the bf16 values and rounded to bf16; dims 64..127 pass through. v is untouched. With block size 64,
k and v go to kv_cache[slot // 64, head, slot % 64, 0:128] and [128:256], and index-k to
index_cache[islot // 64, islot % 64] by its own slot map. Returns q and index-q; both caches are
updated in place.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="vLLM",
    model="MiniMax-M3",
    upstream="vllm-project/vllm@b9b6306: tests/kernels/test_fused_minimax_m3_qknorm_rope_kv_insert.py "
    "(sparse insert mode, bf16 cache)",
    license="Apache-2.0",
    notes="The index slot map is an independent draw of distinct slots (the upstream test rolls the "
    "main slot map by one).",
)
INPUTS = ("qkv", "q_norm_weight", "k_norm_weight", "index_q_norm_weight", "index_k_norm_weight",
          "positions", "cos_sin_cache", "slot_mapping", "index_slot_mapping", "kv_cache", "index_cache")
OUTPUTS = ("q", "iq")
INPLACE = ("kv_cache", "index_cache")
SMALL_WORKLOAD = dict(tokens=9, kv_heads=2, index_heads=2, head_dim=16, rotary_dim=8,
                      max_position=64, num_blocks=3, block_size=4)
ROPE_BASE = 5e6
EPS = 1e-6
HEADS = 16  # query heads; the index-query head count follows from the qkv width


def _bf16(t):
    """A bf16 materialisation the eager model performs; the float64 anchor lifts it."""
    return acc(to_output(t, torch.bfloat16))


def _norm_rope(x, weight, cos, sin):
    """Gemma RMSNorm (rounded to bf16) followed by NeoX RoPE on the leading dims (rounded to bf16)."""
    x = _bf16(x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * (1.0 + weight))
    half = cos.shape[-1]
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat([_bf16(x1 * cos - x2 * sin), _bf16(x2 * cos + x1 * sin), rest], dim=-1)


def rope_table(max_position, rotary_dim, base, device):
    """The exact cos | sin table [max_position, rotary_dim] rounded to bf16."""
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(torch.bfloat16).to(device)


def make_inputs(device, generator, *, tokens=513, kv_heads=4, index_heads=4, head_dim=128,
                rotary_dim=64, max_position=4096, num_blocks=10, block_size=64):
    def randn(*shape, gain=1.0):
        return (gain * torch.randn(*shape, device=device, generator=generator)).to(torch.bfloat16)

    def distinct_slots():
        return torch.randperm(num_blocks * block_size, device=device, generator=generator)[:tokens]

    qkv = randn(tokens, (HEADS + 2 * kv_heads + index_heads + 1) * head_dim)
    weights = [randn(head_dim, gain=0.1) for _ in range(4)]
    positions = torch.randint(0, max_position, (tokens,), device=device, generator=generator)
    cos_sin_cache = rope_table(max_position, rotary_dim, ROPE_BASE, device)
    slot_mapping, index_slot_mapping = distinct_slots(), distinct_slots()
    kv_cache = randn(num_blocks, kv_heads, block_size, 2 * head_dim)
    index_cache = randn(num_blocks, block_size, head_dim)
    return (qkv, *weights, positions, cos_sin_cache, slot_mapping, index_slot_mapping, kv_cache,
            index_cache)


def reference(qkv, q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight, positions,
              cos_sin_cache, slot_mapping, index_slot_mapping, kv_cache, index_cache):
    _, kv_heads, block_size, two_dims = kv_cache.shape
    head_dim = two_dims // 2
    tokens = qkv.shape[0]
    x = acc(qkv).view(tokens, -1, head_dim)
    index_heads = x.shape[1] - 2 * kv_heads - 1 - HEADS
    q, k, v, iq, ik = x.split([HEADS, kv_heads, kv_heads, index_heads, 1], dim=1)
    cos, sin = acc(cos_sin_cache[positions]).unsqueeze(1).chunk(2, dim=-1)
    q = _norm_rope(q, acc(q_norm_weight), cos, sin)
    k = _norm_rope(k, acc(k_norm_weight), cos, sin)
    iq = _norm_rope(iq, acc(index_q_norm_weight), cos, sin)
    ik = _norm_rope(ik, acc(index_k_norm_weight), cos, sin)
    blocks, offsets = slot_mapping // block_size, slot_mapping % block_size
    kv_cache[blocks, :, offsets, :head_dim] = k.to(kv_cache.dtype)
    kv_cache[blocks, :, offsets, head_dim:] = v.to(kv_cache.dtype)
    index_cache[index_slot_mapping // block_size, index_slot_mapping % block_size] = (
        ik.squeeze(1).to(index_cache.dtype))
    return to_output(q, torch.bfloat16), to_output(iq, torch.bfloat16)


def physical_floor(*, tokens, kv_heads, index_heads, head_dim, rotary_dim, max_position, num_blocks,
                   block_size):
    width = HEADS + 2 * kv_heads + index_heads + 1
    reads = tokens * width * head_dim * 2 + tokens * (8 + 16 + rotary_dim * 2) + 4 * head_dim * 2
    writes = tokens * width * head_dim * 2
    return {"bytes": reads + writes, "flops": tokens * (width - kv_heads) * head_dim * 8, "math": "fp32"}
