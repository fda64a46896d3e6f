"""MLA prologue: q_b projection, NeoX RoPE and the compressed latent-cache write, bf16.

qkv_lora [T, 1536 + 512 + 64] splits into q_c, kv_c and k_pe. q = q_c @ q_b_weight^T (bf16 GEMM,
fp32 accumulation, rounded to bf16) is viewed as 16 heads of 192 = 128 nope + 64 rope dims. NeoX RoPE
(halves of 32, base 10000, cos | sin from a bf16 table by position) rotates q_pe of every head and
the single shared k_pe, in bf16 arithmetic (every product and sum rounded). Returns
q_out = [q_nope | rotated q_pe]; the 576 values [kv_c | rotated k_pe] of each token go to the paged
latent cache at block = slot // 16, offset = slot % 16 (head 0), in place; slot -1 tokens are skipped.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="vLLM",
    model="DeepSeek-style MLA (16 heads, q_lora 1536, kv_lora 512, rope 64)",
    upstream="vllm-project/vllm@b9b6306: tests/compile/passes/test_mla_rope_kvcache_cat_fusion.py "
    "(the unfused q_b_proj + rotary_emb + unified_mla_kv_cache_update pattern)",
    license="Apache-2.0",
)
INPUTS = ("qkv_lora", "q_b_weight", "positions", "cos_sin_cache", "slot_mapping", "kv_cache")
OUTPUTS = ("q_out",)
INPLACE = ("kv_cache",)
SMALL_WORKLOAD = dict(tokens=12, q_lora=32, kv_lora=16, nope_dim=8, rope_dim=8,
                      max_position=64, num_blocks=4, block_size=4, max_padding=3)
ROPE_BASE = 10000.0
HEADS = 16  # query heads; q_b_weight has HEADS * (nope_dim + rope_dim) rows


def _bf16(t):
    """A bf16 rounding the eager model performs; the float64 anchor lifts it."""
    return acc(to_output(t, torch.bfloat16))


def _neox_rope(x, cos, sin):
    """Rotate x (halves), in rounded bf16 steps."""
    x1, x2 = x.chunk(2, dim=-1)
    o1 = _bf16(_bf16(x1 * cos) - _bf16(x2 * sin))
    o2 = _bf16(_bf16(x2 * cos) + _bf16(x1 * sin))
    return torch.cat([o1, o2], dim=-1)


def rope_table(max_position, rotary_dim, base, device):
    """The exact cos | sin table [max_position, rotary_dim] rounded to bf16."""
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(torch.bfloat16).to(device)


def make_inputs(device, generator, *, tokens=2048, q_lora=1536, kv_lora=512, nope_dim=128,
                rope_dim=64, max_position=4096, num_blocks=256, block_size=16, max_padding=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    qkv_lora = randn(tokens, q_lora + kv_lora + rope_dim).to(torch.bfloat16)
    q_b_weight = (0.02 * randn(HEADS * (nope_dim + rope_dim), q_lora)).to(torch.bfloat16)
    positions = torch.randint(0, max_position, (tokens,), device=device, generator=generator)
    slots = torch.randperm(num_blocks * block_size, device=device, generator=generator)[:tokens]
    padding = int(torch.randint(1, max_padding + 1, (1,), device=device, generator=generator))
    slots[tokens - padding:] = -1
    kv_cache = randn(num_blocks, block_size, 1, kv_lora + rope_dim).to(torch.bfloat16)
    cos_sin_cache = rope_table(max_position, rope_dim, ROPE_BASE, device)
    return qkv_lora, q_b_weight, positions, cos_sin_cache, slots.to(torch.int64), kv_cache


def reference(qkv_lora, q_b_weight, positions, cos_sin_cache, slot_mapping, kv_cache):
    _, block_size, _, latent = kv_cache.shape
    rope_dim = cos_sin_cache.shape[1]
    kv_lora = latent - rope_dim
    q_lora = q_b_weight.shape[1]
    tokens = qkv_lora.shape[0]
    q_c, kv_c, k_pe = acc(qkv_lora).split([q_lora, kv_lora, rope_dim], dim=-1)
    q = _bf16(q_c @ acc(q_b_weight).T).view(tokens, HEADS, -1)
    q_nope, q_pe = q.split([q.shape[-1] - rope_dim, rope_dim], dim=-1)
    cos, sin = acc(cos_sin_cache[positions]).chunk(2, dim=-1)
    q_out = torch.cat([q_nope, _neox_rope(q_pe, cos.unsqueeze(1), sin.unsqueeze(1))], dim=-1)
    entry = torch.cat([kv_c, _neox_rope(k_pe, cos, sin)], dim=-1)
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    kv_cache[slots // block_size, slots % block_size, 0] = entry[valid].to(kv_cache.dtype)
    return to_output(q_out, torch.bfloat16)


def physical_floor(*, tokens, q_lora, kv_lora, nope_dim, rope_dim, max_position, num_blocks,
                   block_size, max_padding):
    written = tokens - max_padding
    reads = tokens * (q_lora + kv_lora + rope_dim) * 2 + HEADS * (nope_dim + rope_dim) * q_lora * 2
    reads += tokens * (8 + 8 + rope_dim * 2)
    writes = tokens * HEADS * (nope_dim + rope_dim) * 2 + written * (kv_lora + rope_dim) * 2
    return {"bytes": reads + writes, "flops": 2 * tokens * q_lora * HEADS * (nope_dim + rope_dim),
            "math": "bf16"}
