"""Paged GQA decode attention, 32 query heads on 8 KV heads of dim 128, page size 1 (Llama-3.1-8B).

Each sequence decodes one token. The pages of sequence b are kv_indices[kv_indptr[b]:kv_indptr[b+1]]
(CSR), one token per page; query head h reads KV head h // 4. Logits q.k are scaled by sm_scale and
softmaxed in fp32 over the whole context (no mask); the output averages V and is rounded to bf16. The
second output is the base-2 log-sum-exp of the scaled logits (natural LSE / ln 2) per (sequence, head).
"""

import math

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Llama-3.1-8B",
    upstream="flashinfer-ai/flashinfer-trace definitions/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps1.json "
    "(workload record 5444fc56-b282-4228-b233-ee170d1bd127)",
    license="Apache-2.0",
    notes="Measured on the H200 (benchmarks/h200_problems.py): the eager reference took 22.0 ms per call at"
    " the previous workload, above the 20 ms ceiling; cut to batch 64 -> 40, total_pages 58966 -> "
    "36854. "
    "The captured kv_indptr is not redistributed; a fixed ragged length profile with the "
    "captured statistics (64 sequences, 509..3172 pages, 58966 in total) stands in for it.",
)
INPUTS = ("q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
SMALL_WORKLOAD = dict(batch=3, num_pages=64, total_pages=40, min_len=4, max_len=20)
SM_SCALE = 0.0883883461356163  # the captured value: 1/sqrt(128) rounded to fp32


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


def make_inputs(device, generator, *, batch=40, heads=32, kv_heads=8, head_dim=128, num_pages=68237,
                total_pages=36854, min_len=509, max_len=3172):
    lengths = ragged_profile(batch, min_len, max_len, total_pages, seed=101)
    kv_indptr = torch.zeros(batch + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(lengths, 0).to(torch.int32)
    q = torch.randn(batch, heads, head_dim, device=device, generator=generator).to(torch.bfloat16)
    cache_shape = (num_pages, 1, kv_heads, head_dim)
    k_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    v_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    perm = torch.randperm(num_pages, device=device, generator=generator)
    kv_indices = perm[:total_pages].to(torch.int32)
    return q, k_cache, v_cache, kv_indptr.to(device), kv_indices, SM_SCALE


def attend(q, k, v, sm_scale):
    """One sequence: q [heads, d], k/v [tokens, kv_heads, d] -> output [heads, d], natural LSE [heads]."""
    kv_heads, dim = k.shape[1], k.shape[2]
    qg = (q * sm_scale).view(kv_heads, -1, dim)  # query heads grouped by the KV head they read
    logits = torch.bmm(qg, k.permute(1, 2, 0))  # [kv_heads, group, tokens]
    peak = logits.amax(dim=-1, keepdim=True)
    weights = logits.sub_(peak).exp_()  # unnormalised probabilities, in place
    total = weights.sum(dim=-1, keepdim=True)
    out = torch.bmm(weights, v.transpose(0, 1)) / total
    return out.reshape(-1, dim), (peak + total.log()).reshape(-1)


def reference(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    batch, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    output = torch.empty(batch, heads, head_dim, dtype=acc(q).dtype, device=q.device)
    lse = torch.empty(batch, heads, dtype=acc(q).dtype, device=q.device)
    bounds = kv_indptr.tolist()
    for b in range(batch):
        pages = kv_indices[bounds[b]:bounds[b + 1]].long()
        k = acc(k_cache[pages].view(-1, kv_heads, head_dim))
        v = acc(v_cache[pages].view(-1, kv_heads, head_dim))
        output[b], lse[b] = attend(acc(q[b]), k, v, sm_scale)
    return to_output(output, torch.bfloat16), to_output(lse / math.log(2.0), torch.float32)


def physical_floor(*, batch, heads, kv_heads, head_dim, num_pages, total_pages, min_len, max_len):
    kv_bytes = 2 * total_pages * kv_heads * head_dim * 2
    io_bytes = 2 * batch * heads * head_dim * 2 + batch * heads * 4 + total_pages * 4 + (batch + 1) * 4
    return {"bytes": kv_bytes + io_bytes, "flops": 4 * total_pages * heads * head_dim, "math": "bf16"}
