"""Causal paged GQA prefill, 24 query heads on 8 KV heads of dim 128, page size 1 (Llama-3.2-3B).

27 sequences' query tokens are packed ragged by qo_indptr; the KV pages of sequence b are
kv_indices[kv_indptr[b]:kv_indptr[b+1]], one token per page (here kv_indptr == qo_indptr: no cached
prefix). Query head h uses KV head h // 3. Query i of a sequence (0-based) sees KV position j only if
j <= i + (L_kv - L_q): the queries are the last L_q tokens of the context. Logits are scaled by
sm_scale, softmaxed in fp32 and average V; the output is rounded to bf16. The second output is the
base-2 log-sum-exp of the scaled, masked logits per (query token, head), fp32.
"""

import math

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Llama-3.2-3B",
    upstream="flashinfer-ai/flashinfer-trace definitions/gqa_paged/"
    "gqa_paged_prefill_causal_h24_kv8_d128_ps1.json (workload record 0b88caa4-106e-4017-a2a0-fc9840e4b66c)",
    license="Apache-2.0",
    notes="The captured qo_indptr is not redistributed; a fixed ragged length profile with the "
    "captured statistics (27 sequences, 145..1250 query tokens, 16372 in total) stands in for it.",
)
INPUTS = ("q", "k_cache", "v_cache", "qo_indptr", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
SMALL_WORKLOAD = dict(batch=3, num_pages=48, total_tokens=30, min_len=3, max_len=16)
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


def make_inputs(device, generator, *, batch=27, heads=24, kv_heads=8, head_dim=128, num_pages=77646,
                total_tokens=16372, min_len=145, max_len=1250):
    lengths = ragged_profile(batch, min_len, max_len, total_tokens, seed=104)
    qo_indptr = torch.zeros(batch + 1, dtype=torch.int32)
    qo_indptr[1:] = torch.cumsum(lengths, 0).to(torch.int32)
    q = torch.randn(total_tokens, heads, head_dim, device=device, generator=generator).to(torch.bfloat16)
    cache_shape = (num_pages, 1, kv_heads, head_dim)
    k_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    v_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    perm = torch.randperm(num_pages, device=device, generator=generator)
    kv_indices = perm[:total_tokens].to(torch.int32)
    qo_indptr = qo_indptr.to(device)
    return q, k_cache, v_cache, qo_indptr, qo_indptr.clone(), kv_indices, SM_SCALE


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


def physical_floor(*, batch, heads, kv_heads, head_dim, num_pages, total_tokens, min_len, max_len):
    lengths = ragged_profile(batch, min_len, max_len, total_tokens, seed=104)
    pairs = int((lengths * (lengths + 1) // 2).sum())  # visible (query, key) pairs, causal
    kv_bytes = 2 * total_tokens * kv_heads * head_dim * 2
    io_bytes = 2 * total_tokens * heads * head_dim * 2 + total_tokens * heads * 4 + total_tokens * 4
    return {"bytes": kv_bytes + io_bytes, "flops": 4 * pairs * heads * head_dim, "math": "bf16"}
