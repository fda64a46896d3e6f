"""Causal paged GQA prefill, 24 query heads on 8 KV heads of dim 128, page size 1 (Llama-3.2-3B).

27 sequences' query tokens (captured lengths 145..1250, 16372 in total) are packed ragged by
qo_indptr; the KV pages of sequence b are kv_indices[kv_indptr[b]:kv_indptr[b+1]], drawn from a pool
of 77646 pages, one token per page (here kv_indptr == qo_indptr: no cached prefix). Query head h
uses KV head h // 3. Query i of a sequence (0-based) sees KV position j only if
j <= i + (L_kv - L_q): the queries are the last L_q tokens of the context. Logits are scaled by
sm_scale, softmaxed in fp32 and average V; the output is rounded to bf16. The second output is the
base-2 log-sum-exp of the scaled, masked logits per (query token, head), fp32.
"""

import itertools
import math

import torch

from metakernelbench.problem_kit import acc, captured, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Llama-3.2-3B",
    upstream="flashinfer-ai/flashinfer-trace definitions/gqa_paged/"
    "gqa_paged_prefill_causal_h24_kv8_d128_ps1.json (workload record 0b88caa4-106e-4017-a2a0-fc9840e4b66c)",
    license="Apache-2.0",
    notes="The graded workload is the source's in full: its 27 sequences with the captured qo_indptr and "
    "kv_indptr verbatim (145..1250 query tokens each, 16372 in total, KV lengths equal to the query "
    "lengths; stored beside this file as 04_gqa_paged_prefill_causal_h24_kv8_d128_ps1_bf16.captured.json) "
    "over the 77646-page pool. The page assignment (kv_indices) is re-drawn every draw as distinct "
    "random pages of the pool. SMALL_WORKLOAD (CPU tests) takes the first 3 captured sequences with "
    "their query lengths divided by 16 (cached prefixes, here none, kept).",
)
INPUTS = ("q", "k_cache", "v_cache", "qo_indptr", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
SMALL_WORKLOAD = dict(batch=3, num_pages=48, length_divisor=16)
SM_SCALE = 0.08838834764831843


def sequence_lengths(batch, length_divisor):
    """(query, KV) lengths of the first ``batch`` captured sequences: query lengths divided by
    ``length_divisor`` (at least 1), each KV length its query length plus the captured cached prefix."""
    values = captured(__file__)
    qo, kv = values["qo_indptr"], values["kv_indptr"]
    if not 1 <= batch < len(qo):
        raise ValueError(f"batch must be 1..{len(qo) - 1} (the captured sequences), not {batch}")
    q_lens, kv_lens = [], []
    for b in range(batch):
        q_len = qo[b + 1] - qo[b]
        prefix = (kv[b + 1] - kv[b]) - q_len
        q_lens.append(max(1, q_len // length_divisor))
        kv_lens.append(q_lens[-1] + prefix)
    return q_lens, kv_lens


def make_inputs(device, generator, *, batch=27, heads=24, kv_heads=8, head_dim=128, num_pages=77646,
                length_divisor=1):
    q_lens, kv_lens = sequence_lengths(batch, length_divisor)
    qo_indptr = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32)
    kv_indptr = torch.tensor([0, *itertools.accumulate(kv_lens)], dtype=torch.int32)
    tokens, total_kv = int(qo_indptr[-1]), int(kv_indptr[-1])
    assert total_kv <= num_pages, "every context page must be a distinct page of the pool"
    q = torch.randn(tokens, heads, head_dim, device=device, generator=generator).to(torch.bfloat16)
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


def text_values(*, batch, heads, kv_heads, head_dim, num_pages, length_divisor):
    q_lens, _ = sequence_lengths(batch, length_divisor)
    return {"shortest": min(q_lens), "longest": max(q_lens), "total_tokens": sum(q_lens)}


def physical_floor(*, batch, heads, kv_heads, head_dim, num_pages, length_divisor):
    q_lens, kv_lens = sequence_lengths(batch, length_divisor)
    tokens, total_kv = sum(q_lens), sum(kv_lens)
    # visible (query, key) pairs under the causal mask: query i sees its prefix and keys 0..i of its own part
    pairs = sum(lq * (lq + 1) // 2 + lq * (lkv - lq) for lq, lkv in zip(q_lens, kv_lens, strict=True))
    kv_bytes = 2 * total_kv * kv_heads * head_dim * 2
    io_bytes = 2 * tokens * heads * head_dim * 2 + tokens * heads * 4 + total_kv * 4
    return {"bytes": kv_bytes + io_bytes, "flops": 4 * pairs * heads * head_dim, "math": "bf16"}
