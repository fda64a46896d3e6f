"""Per-token-per-head dynamic FP8 quantisation fused with the paged KV-cache append.

For each token and each of the 8 KV heads, independently for key and value: absmax over the 128 dims
in fp32; scale = max(absmax / 448, 1e-6); q = clamp(x * (1 / scale), -448, 448) rounded to float8
e4m3fn (nearest even), where 1 / scale is the fp32 reciprocal and the product is an fp32 multiply.
At slot s (block = s // 16, offset = s % 16) the 8 x 128 e4m3 bytes go to key_cache / value_cache and
the 8 fp32 scales to k_scale_cache / v_scale_cache; slot -1 (padding) tokens are skipped. All four
caches are updated in place; nothing is returned.
"""

import torch

from metakernelbench.problem_kit import true_divisor

PROVENANCE = dict(
    source="vLLM",
    model="generic (8 KV heads x 128, block size 16)",
    upstream="vllm-project/vllm@b9b6306: tests/quantization/test_per_token_kv_cache.py; "
    "vllm/v1/attention/ops/triton_reshape_and_cache_flash.py (per-token-head scale path)",
    license="Apache-2.0",
    notes="The quantisation is computed in fp32 in the float64 anchor run as well (the inputs hold "
    "bf16 values, so the cast is exact): the e4m3 bytes and the scales are defined by fp32 arithmetic "
    "and must be the same in both runs.",
)
INPUTS = ("key", "value", "slot_mapping", "key_cache", "value_cache", "k_scale_cache", "v_scale_cache")
OUTPUTS = ()
INPLACE = ("key_cache", "value_cache", "k_scale_cache", "v_scale_cache")
SMALL_WORKLOAD = dict(tokens=12, heads=2, head_dim=16, num_blocks=4, block_size=4, max_padding=3)
FP8_MAX = 448.0
MIN_SCALE = 1e-6



def quantize_per_head(x):
    """e4m3 bytes [n, heads, dim] and fp32 scales [n, heads] of x, computed in fp32 in both runs."""
    x32 = x.to(torch.float32)
    scale = torch.clamp(x32.abs().amax(dim=-1, keepdim=True) / true_divisor(FP8_MAX, x32), min=MIN_SCALE)
    q = (x32 * torch.reciprocal(scale)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(torch.uint8), scale.squeeze(-1)


def make_inputs(device, generator, *, tokens=2048, heads=8, head_dim=128, num_blocks=256, block_size=16,
                max_padding=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    def random_bytes():
        return torch.randint(0, 256, (num_blocks, block_size, heads, head_dim), dtype=torch.uint8,
                             device=device, generator=generator)

    key, value = randn(tokens, heads, head_dim), randn(tokens, heads, head_dim)
    slots = torch.randperm(num_blocks * block_size, device=device, generator=generator)[:tokens]
    padding = int(torch.randint(1, max_padding + 1, (1,), device=device, generator=generator))
    slots[tokens - padding:] = -1
    key_cache, value_cache = random_bytes(), random_bytes()
    scales = [0.5 + torch.rand(num_blocks, block_size, heads, device=device, generator=generator)
              for _ in range(2)]
    return key, value, slots.to(torch.int64), key_cache, value_cache, scales[0], scales[1]


def reference(key, value, slot_mapping, key_cache, value_cache, k_scale_cache, v_scale_cache):
    block_size = key_cache.shape[1]
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    blocks, offsets = slots // block_size, slots % block_size
    for x, cache, scale_cache in ((key, key_cache, k_scale_cache), (value, value_cache, v_scale_cache)):
        payload, scale = quantize_per_head(x[valid])
        cache[blocks, offsets] = payload
        scale_cache[blocks, offsets] = scale.to(scale_cache.dtype)


def physical_floor(*, tokens, heads, head_dim, num_blocks, block_size, max_padding):
    written = tokens - max_padding
    reads = 2 * written * heads * head_dim * 2 + tokens * 8
    writes = 2 * written * heads * (head_dim + 4)
    return {"bytes": reads + writes, "flops": 2 * written * heads * head_dim * 3, "math": "fp32"}
