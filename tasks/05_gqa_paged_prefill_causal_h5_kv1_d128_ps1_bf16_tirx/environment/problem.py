"""Causal paged GQA prefill, 5 query heads on 1 KV head of dim 128, page size 1 (Llama-4-Scout TP=8).

The sequences' query tokens are packed ragged by qo_indptr; the KV pages of sequence b are
kv_indices[kv_indptr[b]:kv_indptr[b+1]], one token per page; each context holds 1..5 cached tokens
before its queries. All 5 query heads read the single KV head. Query i of a sequence (0-based) sees
KV position j only if j <= i + (L_kv - L_q): the queries are the last L_q tokens of the context.
Logits are scaled by sm_scale, softmaxed in fp32 and average V; the output is rounded to bf16. The
second output is the base-2 log-sum-exp of the scaled, masked logits per (query token, head), fp32.
"""

import math

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Llama-4-Scout-17B-16E (TP=8)",
    upstream="flashinfer-ai/flashinfer-trace definitions/gqa_paged/"
    "gqa_paged_prefill_causal_h5_kv1_d128_ps1.json (workload record b84bca7b-dd0f-4315-a523-b106191c049e)",
    license="Apache-2.0",
    notes="Measured on the H200 (benchmarks/h200_problems.py): the eager reference took 27.5 ms per call at"
    " the previous workload, above the 20 ms ceiling; cut to batch 54 -> 27, total_tokens 10847 -> "
    "5423, total_prefix 98 -> 49. "
    "The captured qo_indptr/kv_indptr are not redistributed; fixed ragged profiles with the "
    "captured statistics stand in for them (54 sequences, 1..5139 query tokens, 10847 in total; "
    "1..5 cached tokens per sequence, 10945 KV tokens in total).",
)
INPUTS = ("q", "k_cache", "v_cache", "qo_indptr", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
SMALL_WORKLOAD = dict(batch=3, num_pages=48, total_tokens=30, min_len=3, max_len=16, total_prefix=8)
SM_SCALE = 0.08838834764831843


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


def make_inputs(device, generator, *, batch=27, heads=5, kv_heads=1, head_dim=128, num_pages=44264,
                total_tokens=5423, min_len=1, max_len=5139, total_prefix=49, min_prefix=1, max_prefix=5):
    q_lengths = ragged_profile(batch, min_len, max_len, total_tokens, seed=105)
    kv_lengths = q_lengths + ragged_profile(batch, min_prefix, max_prefix, total_prefix, seed=1105)
    qo_indptr = torch.zeros(batch + 1, dtype=torch.int32)
    qo_indptr[1:] = torch.cumsum(q_lengths, 0).to(torch.int32)
    kv_indptr = torch.zeros(batch + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(kv_lengths, 0).to(torch.int32)
    total_kv = int(kv_indptr[-1])
    q = torch.randn(total_tokens, heads, head_dim, device=device, generator=generator).to(torch.bfloat16)
    cache_shape = (num_pages, 1, kv_heads, head_dim)
    k_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    v_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    perm = torch.randperm(num_pages, device=device, generator=generator)
    kv_indices = perm[:total_kv].to(torch.int32)
    return q, k_cache, v_cache, qo_indptr.to(device), kv_indptr.to(device), kv_indices, SM_SCALE


def attend(q, k, v, sm_scale):
    """Causal GQA over one sequence whose queries are the last tokens of its context.

    q [lq, heads, d] and k/v [lkv, kv_heads, d] in the working precision; query i sees keys
    j <= i + (lkv - lq). Returns the output [lq, heads, d] and the natural LSE [lq, heads].
    """
    lq, heads, dim = q.shape
    lkv, kv_heads = k.shape[0], k.shape[1]
    group = heads // kv_heads
    qg = (q * sm_scale).view(lq, kv_heads, group, dim).permute(1, 2, 0, 3).reshape(kv_heads, -1, dim)
    logits = torch.bmm(qg, k.permute(1, 2, 0)).view(kv_heads, group, lq, lkv)
    future = torch.ones(lq, lq, dtype=torch.bool, device=q.device).triu(1)
    logits[..., lkv - lq:].masked_fill_(future, float("-inf"))
    peak = logits.amax(dim=-1, keepdim=True)
    weights = logits.sub_(peak).exp_()  # unnormalised probabilities, in place
    total = weights.sum(dim=-1, keepdim=True)
    out = torch.bmm(weights.view(kv_heads, group * lq, lkv), v.transpose(0, 1)).view(kv_heads, group, lq, -1)
    out, lse = out / total, (peak + total.log()).squeeze(-1)
    return out.permute(2, 0, 1, 3).reshape(lq, heads, -1), lse.permute(2, 0, 1).reshape(lq, heads)


def reference(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    tokens, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    output = torch.empty(tokens, heads, head_dim, dtype=acc(q).dtype, device=q.device)
    lse = torch.empty(tokens, heads, dtype=acc(q).dtype, device=q.device)
    qb, kb = qo_indptr.tolist(), kv_indptr.tolist()
    for b in range(len(qb) - 1):
        pages = kv_indices[kb[b]:kb[b + 1]].long()
        k = acc(k_cache[pages].view(-1, kv_heads, head_dim))
        v = acc(v_cache[pages].view(-1, kv_heads, head_dim))
        rows = slice(qb[b], qb[b + 1])
        output[rows], lse[rows] = attend(acc(q[rows]), k, v, sm_scale)
    return to_output(output, torch.bfloat16), to_output(lse / math.log(2.0), torch.float32)


def physical_floor(*, batch, heads, kv_heads, head_dim, num_pages, total_tokens, min_len, max_len,
                   total_prefix, min_prefix, max_prefix):
    q_lengths = ragged_profile(batch, min_len, max_len, total_tokens, seed=105)
    prefix = ragged_profile(batch, min_prefix, max_prefix, total_prefix, seed=1105)
    pairs = int((q_lengths * (q_lengths + 1) // 2 + q_lengths * prefix).sum())  # visible pairs
    total_kv = total_tokens + total_prefix
    kv_bytes = 2 * total_kv * kv_heads * head_dim * 2
    io_bytes = 2 * total_tokens * heads * head_dim * 2 + total_tokens * heads * 4 + total_kv * 4
    return {"bytes": kv_bytes + io_bytes, "flops": 4 * pairs * heads * head_dim, "math": "bf16"}
