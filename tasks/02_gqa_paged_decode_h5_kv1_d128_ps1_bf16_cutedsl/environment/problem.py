"""Paged GQA decode attention, 5 query heads on 1 KV head of dim 128, page size 1 (Llama-4-Scout TP=8).

63 sequences decode one token each over captured contexts of 4..5668 pages (19134 in total) drawn
from a pool of 53173 pages. The pages of sequence b are kv_indices[kv_indptr[b]:kv_indptr[b+1]]
(CSR), one token per page. Logits q.k are scaled by sm_scale and softmaxed in fp32 over the whole
context (no mask); the output averages V and is rounded to bf16. The second output is the log-sum-exp
of the scaled logits in base 2 (natural LSE / ln 2) per (sequence, head), fp32.
"""

import itertools
import math

import torch

from metakernelbench.problem_kit import acc, captured, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Llama-4-Scout-17B-16E (TP=8)",
    upstream="flashinfer-ai/flashinfer-trace definitions/gqa_paged/gqa_paged_decode_h5_kv1_d128_ps1.json "
    "(workload record 69ec7197-791c-419a-ae93-a3d2f0d49fd0)",
    license="Apache-2.0",
    notes="The graded workload is the source's in full: its 63 sequences with the captured kv_indptr "
    "verbatim (4..5668 pages each, 19134 in total; stored beside this file as "
    "02_gqa_paged_decode_h5_kv1_d128_ps1_bf16.captured.json) over the 53173-page pool. The page "
    "assignment (kv_indices) is re-drawn every draw as distinct random pages of the pool. "
    "SMALL_WORKLOAD (CPU tests) takes the first 3 captured sequences with their lengths divided by 4.",
)
INPUTS = ("q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
SMALL_WORKLOAD = dict(batch=3, num_pages=64, length_divisor=4)


def context_lengths(batch, length_divisor):
    """Pages of the first ``batch`` captured sequences, each divided by ``length_divisor`` (at least 1)."""
    bounds = captured(__file__)["kv_indptr"]
    if not 1 <= batch < len(bounds):
        raise ValueError(f"batch must be 1..{len(bounds) - 1} (the captured sequences), not {batch}")
    starts, ends = bounds[:batch], bounds[1:batch + 1]
    return [max(1, (end - start) // length_divisor) for start, end in zip(starts, ends, strict=True)]


def make_inputs(device, generator, *, batch=63, heads=5, kv_heads=1, head_dim=128, num_pages=53173,
                length_divisor=1):
    lengths = context_lengths(batch, length_divisor)
    kv_indptr = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    total = int(kv_indptr[-1])
    assert total <= num_pages, "every context page must be a distinct page of the pool"
    q = torch.randn(batch, heads, head_dim, device=device, generator=generator).to(torch.bfloat16)
    cache_shape = (num_pages, 1, kv_heads, head_dim)
    k_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    v_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    perm = torch.randperm(num_pages, device=device, generator=generator)
    kv_indices = perm[:total].to(torch.int32)
    return q, k_cache, v_cache, kv_indptr.to(device), kv_indices, 1.0 / math.sqrt(head_dim)


def reference(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    batch, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    output = torch.empty(batch, heads, head_dim, dtype=acc(q).dtype, device=q.device)
    lse = torch.empty(batch, heads, dtype=acc(q).dtype, device=q.device)
    bounds = kv_indptr.tolist()
    for b in range(batch):
        pages = kv_indices[bounds[b]:bounds[b + 1]].long()
        k = acc(k_cache[pages]).reshape(-1, kv_heads, head_dim).repeat_interleave(group, dim=1)
        v = acc(v_cache[pages]).reshape(-1, kv_heads, head_dim).repeat_interleave(group, dim=1)
        logits = torch.einsum("hd,thd->ht", acc(q[b]), k) * sm_scale
        lse[b] = torch.logsumexp(logits, dim=-1) / math.log(2.0)
        output[b] = torch.einsum("ht,thd->hd", torch.softmax(logits, dim=-1), v)
    return to_output(output, torch.bfloat16), to_output(lse, torch.float32)


def text_values(*, batch, heads, kv_heads, head_dim, num_pages, length_divisor):
    lengths = context_lengths(batch, length_divisor)
    return {"shortest": min(lengths), "longest": max(lengths), "total_pages": sum(lengths)}


def physical_floor(*, batch, heads, kv_heads, head_dim, num_pages, length_divisor):
    total_pages = sum(context_lengths(batch, length_divisor))
    kv_bytes = 2 * total_pages * kv_heads * head_dim * 2
    return {"bytes": kv_bytes + 2 * batch * heads * head_dim * 2 + total_pages * 4,
            "flops": 4 * total_pages * heads * head_dim, "math": "bf16"}
