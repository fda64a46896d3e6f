"""Gather a paged FP8 MLA latent cache into a contiguous fp32 buffer, dequantising with a scalar scale.

The cache [1024 blocks, 16, 576] holds float8 e4m3fn values stored as bytes. For request r (8 of them)
and token position p < seq_lens[r], the entry is src_cache[block_table[r, p // 16], p % 16]; its 576
values become fp32(e4m3) * scale (one fp32 multiply by the fp32 value of scale). The requests' tokens
are concatenated in request order into a [sum(seq_lens) = 4096, 576] fp32 output.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="vLLM",
    model="DeepSeek MLA latent cache (kv_lora 512 + rope 64)",
    upstream="vllm-project/vllm@b9b6306: tests/kernels/attention/test_cache.py::"
    "test_gather_and_maybe_dequant_cache_mla; csrc/libtorch_stable/cache_kernels.cu::"
    "gather_and_maybe_dequant_cache",
    license="Apache-2.0",
)
INPUTS = ("src_cache", "block_table", "seq_lens", "scale")
OUTPUTS = ("output",)
EXACT = ("output",)
SMALL_WORKLOAD = dict(num_blocks=16, block_size=4, entry=24, requests=3, tokens=20)


def random_split(total, parts, device, generator):
    """`parts` positive lengths summing to `total` (parts - 1 distinct random cut points)."""
    cuts = torch.randperm(total - 1, device=device, generator=generator)[:parts - 1] + 1
    bounds = torch.cat([cuts.new_zeros(1), cuts.sort().values, cuts.new_full((1,), total)])
    return bounds.diff()


def make_inputs(device, generator, *, num_blocks=1024, block_size=16, entry=576, requests=8, tokens=4096):
    values = torch.randn(num_blocks, block_size, entry, device=device, generator=generator) / 0.1
    src_cache = values.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    block_table = torch.stack([torch.randperm(num_blocks, device=device, generator=generator)
                               for _ in range(requests)]).to(torch.int32)
    seq_lens = random_split(tokens, requests, device, generator).to(torch.int32)
    return src_cache, block_table, seq_lens, 0.1


def reference(src_cache, block_table, seq_lens, scale):
    block_size = src_cache.shape[1]
    rows = []
    for r, length in enumerate(seq_lens.tolist()):
        position = torch.arange(length, device=src_cache.device)
        blocks = block_table[r, position // block_size].long()
        rows.append(src_cache[blocks, position % block_size])
    gathered = torch.cat(rows).view(torch.float8_e4m3fn)
    return to_output(acc(gathered) * scale, torch.float32)


def physical_floor(*, num_blocks, block_size, entry, requests, tokens):
    table_bytes = tokens // block_size * 4  # at least this many block ids are looked up
    return {"bytes": tokens * entry * (1 + 4) + table_bytes + requests * 4, "flops": tokens * entry,
            "math": "fp32"}
