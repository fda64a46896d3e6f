"""Batched KV-cache block copy with a block remap (fp8 cache bytes), updated in place.

For each (src, dst) row of block_mapping, the whole page src_k[src] is copied to dst_k[dst] and
src_v[src] to dst_v[dst]; every other destination block keeps its bytes. Sources and destinations
are disjoint slices of one random permutation, so no destination is written twice.
"""

import torch

PROVENANCE = dict(
    source="vLLM",
    model="generic (block 32 tokens x 8 heads x 256 dims, fp8 bytes)",
    upstream="vllm-project/vllm@b9b6306: tests/kernels/attention/test_cache.py::test_swap_blocks; "
    "csrc/libtorch_stable/cache_kernels.cu::swap_blocks",
    license="Apache-2.0",
)
INPUTS = ("src_k", "src_v", "dst_k", "dst_v", "block_mapping")
OUTPUTS = ()
INPLACE = ("dst_k", "dst_v")
SMALL_WORKLOAD = dict(num_blocks=16, block_tokens=4, heads=2, head_bytes=16, pairs=5)


def make_inputs(device, generator, *, num_blocks=1024, block_tokens=32, heads=8, head_bytes=256,
                pairs=256):
    shape = (num_blocks, block_tokens, heads, head_bytes)

    def random_bytes():
        return torch.randint(0, 256, shape, dtype=torch.uint8, device=device, generator=generator)

    src_k, src_v, dst_k, dst_v = (random_bytes() for _ in range(4))
    perm = torch.randperm(num_blocks, device=device, generator=generator)
    block_mapping = torch.stack([perm[:pairs], perm[pairs:2 * pairs]], dim=1).to(torch.int64)
    return src_k, src_v, dst_k, dst_v, block_mapping


def reference(src_k, src_v, dst_k, dst_v, block_mapping):
    src, dst = block_mapping[:, 0], block_mapping[:, 1]
    dst_k[dst] = src_k[src]
    dst_v[dst] = src_v[src]


def physical_floor(*, num_blocks, block_tokens, heads, head_bytes, pairs):
    page = block_tokens * heads * head_bytes
    return {"bytes": 2 * 2 * pairs * page + pairs * 16, "flops": 0, "math": "int"}
