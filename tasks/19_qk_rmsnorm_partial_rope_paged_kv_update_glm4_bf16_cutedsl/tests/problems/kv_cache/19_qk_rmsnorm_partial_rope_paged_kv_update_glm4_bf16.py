"""Fused QK-RMSNorm, partial NeoX RoPE and paged KV-cache write (GLM-4.5 attention prologue), bf16.

qkv [T, (32 + 8 + 8) * 128] splits into q (32 heads), k (8) and v (8) of dim 128. q and k get a
per-head RMSNorm: mean of squares in fp32, x * rsqrt(ms + eps) rounded to bf16, then times the bf16
weight (a bf16 product). NeoX RoPE rotates the first 64 dims of each head (halves of 32:
x1*cos - x2*sin and x2*cos + x1*sin) with cos | sin looked up by position in a bf16 table; as in the
eager model this arithmetic is bf16 (every product and sum rounded). Dims 64..127 pass through. The
rotated k and the raw v go to the paged cache at block = slot // 16, offset = slot % 16
(kv_cache[0] holds k, kv_cache[1] holds v); padding tokens (slot -1) are skipped. Returns q; the
cache is updated in place.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="vLLM",
    model="GLM-4.5 (MoE)",
    upstream="vllm-project/vllm@b9b6306: tests/compile/passes/test_rocm_aiter_qk_norm_rope_kvcache_fusion.py "
    "(the unfused QK-norm + RoPE + unified_kv_cache_update pattern, glm4_moe configuration)",
    license="Apache-2.0",
)
INPUTS = ("qkv", "positions", "q_norm_weight", "k_norm_weight", "cos_sin_cache", "slot_mapping",
          "kv_cache", "eps")
OUTPUTS = ("q",)
INPLACE = ("kv_cache",)
SMALL_WORKLOAD = dict(tokens=12, heads=2, kv_heads=1, head_dim=16, rotary_dim=8, max_position=64,
                      num_blocks=4, block_size=4, max_padding=3)
ROPE_BASE = 10000.0


def _bf16(t):
    """A bf16 rounding the eager model performs; the float64 anchor lifts it."""
    return acc(to_output(t, torch.bfloat16))


def _rms_norm(x, weight, eps):
    normed = _bf16(x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps))
    return _bf16(normed * weight)


def _neox_rope(x, cos, sin):
    """Rotate the leading 2 * cos.shape[-1] dims of x (halves), in rounded bf16 steps."""
    half = cos.shape[-1]
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    o1 = _bf16(_bf16(x1 * cos) - _bf16(x2 * sin))
    o2 = _bf16(_bf16(x2 * cos) + _bf16(x1 * sin))
    return torch.cat([o1, o2, rest], dim=-1)


def rope_table(max_position, rotary_dim, base, device):
    """The exact cos | sin table [max_position, rotary_dim] rounded to bf16."""
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(torch.bfloat16).to(device)


def make_inputs(device, generator, *, tokens=2048, heads=32, kv_heads=8, head_dim=128, rotary_dim=64,
                max_position=4096, num_blocks=256, block_size=16, max_padding=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    qkv = randn(tokens, (heads + 2 * kv_heads) * head_dim)
    positions = torch.randint(0, max_position, (tokens,), device=device, generator=generator)
    q_norm_weight, k_norm_weight = randn(head_dim), randn(head_dim)
    slots = torch.randperm(num_blocks * block_size, device=device, generator=generator)[:tokens]
    padding = int(torch.randint(1, max_padding + 1, (1,), device=device, generator=generator))
    slots[tokens - padding:] = -1
    kv_cache = randn(2, num_blocks, block_size, kv_heads, head_dim)
    cos_sin_cache = rope_table(max_position, rotary_dim, ROPE_BASE, device)
    return (qkv, positions, q_norm_weight, k_norm_weight, cos_sin_cache, slots.to(torch.int64),
            kv_cache, 1e-5)


def reference(qkv, positions, q_norm_weight, k_norm_weight, cos_sin_cache, slot_mapping, kv_cache, eps):
    _, _, block_size, kv_heads, head_dim = kv_cache.shape
    tokens = qkv.shape[0]
    heads = qkv.shape[1] // head_dim - 2 * kv_heads
    q, k, v = acc(qkv).view(tokens, heads + 2 * kv_heads, head_dim).split([heads, kv_heads, kv_heads], 1)
    q = _rms_norm(q, acc(q_norm_weight), eps)
    k = _rms_norm(k, acc(k_norm_weight), eps)
    cos, sin = acc(cos_sin_cache[positions]).unsqueeze(1).chunk(2, dim=-1)
    q, k = _neox_rope(q, cos, sin), _neox_rope(k, cos, sin)
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    blocks, offsets = slots // block_size, slots % block_size
    kv_cache[0, blocks, offsets] = k[valid].to(kv_cache.dtype)
    kv_cache[1, blocks, offsets] = v[valid].to(kv_cache.dtype)
    return to_output(q, torch.bfloat16)


def physical_floor(*, tokens, heads, kv_heads, head_dim, rotary_dim, max_position, num_blocks,
                   block_size, max_padding):
    written = tokens - max_padding  # at least this many tokens have a slot
    reads = tokens * (heads + kv_heads) * head_dim * 2 + written * kv_heads * head_dim * 2
    reads += tokens * (8 + 8 + rotary_dim * 2) + 2 * head_dim * 2
    writes = tokens * heads * head_dim * 2 + written * 2 * kv_heads * head_dim * 2
    return {"bytes": reads + writes, "flops": tokens * (heads + kv_heads) * head_dim * 8, "math": "fp32"}
