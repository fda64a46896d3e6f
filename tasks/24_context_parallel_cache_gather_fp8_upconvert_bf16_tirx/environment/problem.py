"""Gather a mixed-layout FP8 MLA cache (656-byte entries) and up-convert it to bf16 rows.

Each token entry holds 512 e4m3 NoPE values (bytes 0..511), four fp32 scales, one per group of 128
NoPE values (bytes 512..527, little endian), and 64 bf16 RoPE values (bytes 528..655). For request r
(block size 64) and position p < seq_lens[r] the entry is cache[block_table[r, p // 64], p % 64]. NoPE
value i becomes bf16(fp32(e4m3) * scale[i // 128]) (one fp32 multiply, then round to nearest even);
the RoPE bytes are reinterpreted as bf16 unchanged. Rows [512 NoPE | 64 RoPE] are concatenated request
by request into [sum(seq_lens), 576].

The block table's width is the largest block count of the three requests, so it varies between
draws; unused entries are 0.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="vLLM",
    model="DeepSeek-V3.2-style FP8 MLA cache (656-byte entries)",
    upstream="vllm-project/vllm@b9b6306: tests/kernels/test_cp_gather_fp8.py::"
    "test_cp_gather_and_upconvert_fp8_kv_cache; csrc/libtorch_stable/cache_kernels.cu::"
    "cp_gather_and_upconvert_fp8_kv_cache",
    license="Apache-2.0",
)
INPUTS = ("cache", "block_table", "seq_lens")
OUTPUTS = ("output",)
EXACT = ("output",)
SMALL_WORKLOAD = dict(num_blocks=6, block_size=4, requests=3, tokens=13)
NOPE, GROUPS, ROPE = 512, 4, 64
SCALE_BYTES = 4 * GROUPS


def text_values(**_):
    """The byte layout of one cache entry and the width of an output row."""
    return {"values per scale": NOPE // GROUPS, "scale bytes end": NOPE + SCALE_BYTES,
            "rope bytes start": NOPE + SCALE_BYTES, "row": NOPE + ROPE}


def random_split(total, parts, device, generator):
    """`parts` positive lengths summing to `total` (parts - 1 distinct random cut points)."""
    cuts = torch.randperm(total - 1, device=device, generator=generator)[:parts - 1] + 1
    bounds = torch.cat([cuts.new_zeros(1), cuts.sort().values, cuts.new_full((1,), total)])
    return bounds.diff()


def make_inputs(device, generator, *, num_blocks=16, block_size=64, requests=3, tokens=641):
    def draw(fn, *shape):
        return fn(num_blocks, block_size, *shape, device=device, generator=generator)

    payload = draw(torch.randn, NOPE).to(torch.float8_e4m3fn).view(torch.uint8)
    scales = (0.1 + 2.0 * draw(torch.rand, GROUPS)).view(torch.uint8)
    rope = draw(torch.randn, ROPE).to(torch.bfloat16).view(torch.uint8)
    cache = torch.cat([payload, scales, rope], dim=-1)
    seq_lens = random_split(tokens, requests, device, generator)
    counts = ((seq_lens + block_size - 1) // block_size).tolist()
    if sum(counts) > num_blocks:
        raise ValueError("the workload needs more blocks than the cache holds")
    perm = torch.randperm(num_blocks, device=device, generator=generator)
    block_table = torch.zeros(requests, max(counts), dtype=torch.int32, device=device)
    start = 0
    for r, count in enumerate(counts):
        block_table[r, :count] = perm[start:start + count]
        start += count
    return cache, block_table, seq_lens.to(torch.int32)


def reference(cache, block_table, seq_lens):
    block_size = cache.shape[1]
    rows = []
    for r, length in enumerate(seq_lens.tolist()):
        position = torch.arange(length, device=cache.device)
        rows.append(cache[block_table[r, position // block_size].long(), position % block_size])
    entries = torch.cat(rows)
    nope = acc(entries[:, :NOPE].view(torch.float8_e4m3fn)).view(-1, GROUPS, NOPE // GROUPS)
    scales = acc(entries[:, NOPE:NOPE + SCALE_BYTES].contiguous().view(torch.float32))
    rope = acc(entries[:, NOPE + SCALE_BYTES:].contiguous().view(torch.bfloat16))
    return to_output(torch.cat([(nope * scales.unsqueeze(-1)).flatten(1), rope], dim=1), torch.bfloat16)


def physical_floor(*, num_blocks, block_size, requests, tokens):
    entry = NOPE + SCALE_BYTES + 2 * ROPE
    return {"bytes": tokens * entry + tokens * (NOPE + ROPE) * 2 + tokens // block_size * 4 + requests * 4,
            "flops": tokens * NOPE, "math": "fp32"}
