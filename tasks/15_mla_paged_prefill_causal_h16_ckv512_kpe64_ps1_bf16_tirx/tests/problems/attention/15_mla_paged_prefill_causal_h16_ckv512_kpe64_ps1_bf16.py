"""Causal absorbed-MLA paged prefill, 16 heads, latent 512 + RoPE 64, page size 1 (DeepSeek-V3 TP=8).

28 sequences' query tokens are packed ragged by qo_indptr; the cached tokens of sequence b are rows
kv_indices[kv_indptr[b]:kv_indptr[b+1]] (a short prefix of 1..8 tokens followed by the queries'
own tokens). Query i (0-based) sees cached token j only if j <= i + (L_kv - L_q). Logits =
(q_nope . ckv + q_pe . kpe) * sm_scale, fp32 softmax, output = probabilities @ ckv (512-dim latent as
value), rounded to bf16; the second output is the base-2 log-sum-exp per (token, head), fp32.
"""

import math

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="DeepSeek-V3 (TP=8)",
    upstream="flashinfer-ai/flashinfer-trace definitions/mla_paged/"
    "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1.json (workload record 892d1b8f-f6fe-40ad-aa3f-b6d391753bd3)",
    license="Apache-2.0",
    notes="The captured indptr arrays are not redistributed; fixed ragged profiles with the captured "
    "statistics stand in (28 sequences, 1..420 query tokens, 1954 in total; prefixes of 1..8 tokens "
    "giving 4..423 KV tokens, 2044 in total).",
)
INPUTS = ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "qo_indptr", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
SMALL_WORKLOAD = dict(batch=4, heads=4, rank=32, rope_dim=8, num_pages=64, total_tokens=36, max_len=16,
                      total_prefix=12, max_prefix=5)
SM_SCALE = 0.1352337747812271  # 1/sqrt(192) * (1 + 0.1 ln 40)^2, DeepSeek's YaRN mscale correction
SHORTEST_CONTEXT = 4


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


def profiles(batch, total_tokens, max_len, total_prefix, max_prefix):
    """Fixed query and prefix lengths (same every draw).

    As captured, one sequence has a single query and the longest one max_len queries, both behind a
    3-token prefix (giving the extreme contexts of 4 and max_len + 3 tokens); the other prefixes
    span 1..max_prefix.
    """
    q_lengths = ragged_profile(batch, 1, max_len, total_tokens, seed=115)
    prefix = torch.full((batch,), SHORTEST_CONTEXT - 1, dtype=torch.int64)
    others = torch.ones(batch, dtype=torch.bool)
    others[[int(q_lengths.argmin()), int(q_lengths.argmax())]] = False
    prefix[others] = ragged_profile(batch - 2, 1, max_prefix, total_prefix - 2 * int(prefix[0]), seed=1115)
    kv_lengths = q_lengths + prefix
    assert int(kv_lengths.min()) == SHORTEST_CONTEXT and int(kv_lengths.max()) == max_len + 3
    return q_lengths, prefix


def make_inputs(device, generator, *, batch=28, heads=16, rank=512, rope_dim=64, num_pages=989669,
                total_tokens=1954, max_len=420, total_prefix=90, max_prefix=8):
    q_lengths, prefix = profiles(batch, total_tokens, max_len, total_prefix, max_prefix)
    qo_indptr = torch.zeros(batch + 1, dtype=torch.int32)
    qo_indptr[1:] = torch.cumsum(q_lengths, 0).to(torch.int32)
    kv_indptr = torch.zeros(batch + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(q_lengths + prefix, 0).to(torch.int32)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    q_nope, q_pe = randn(total_tokens, heads, rank), randn(total_tokens, heads, rope_dim)
    ckv_cache, kpe_cache = randn(num_pages, 1, rank), randn(num_pages, 1, rope_dim)
    perm = torch.randperm(num_pages, device=device, generator=generator)
    kv_indices = perm[:total_tokens + total_prefix].to(torch.int32)
    return (q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr.to(device), kv_indptr.to(device), kv_indices,
            SM_SCALE)


def mla_attend(q_nope, q_pe, ckv, kpe, sm_scale):
    """Absorbed MLA over one sequence whose queries are the last tokens of its context.

    q_nope [lq, heads, 512], q_pe [lq, heads, 64], ckv [lkv, 512], kpe [lkv, 64] in the working
    precision; query i sees cached tokens j <= i + (lkv - lq). The latent ckv is both key part and
    value. Returns the output [lq, heads, 512] and the natural LSE [lq, heads].
    """
    lq, heads, rank = q_nope.shape
    lkv = ckv.shape[0]
    logits = (q_nope.reshape(-1, rank) @ ckv.T + q_pe.reshape(lq * heads, -1) @ kpe.T) * sm_scale
    logits = logits.view(lq, heads, lkv)
    future = torch.ones(lq, lq, dtype=torch.bool, device=ckv.device).triu(1).unsqueeze(1)
    logits[..., lkv - lq:].masked_fill_(future, float("-inf"))
    peak = logits.amax(dim=-1, keepdim=True)
    weights = logits.sub_(peak).exp_()  # unnormalised probabilities, in place
    total = weights.sum(dim=-1, keepdim=True)
    out = (weights.view(lq * heads, lkv) @ ckv).view(lq, heads, rank) / total
    return out, (peak + total.log()).squeeze(-1)


def reference(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    tokens, heads, rank = q_nope.shape
    output = torch.empty(tokens, heads, rank, dtype=acc(q_nope).dtype, device=q_nope.device)
    lse = torch.empty(tokens, heads, dtype=acc(q_nope).dtype, device=q_nope.device)
    qb, kb = qo_indptr.tolist(), kv_indptr.tolist()
    for b in range(len(qb) - 1):
        rows = kv_indices[kb[b]:kb[b + 1]].long()
        span = slice(qb[b], qb[b + 1])
        output[span], lse[span] = mla_attend(acc(q_nope[span]), acc(q_pe[span]), acc(ckv_cache[rows, 0]),
                                             acc(kpe_cache[rows, 0]), sm_scale)
    return to_output(output, torch.bfloat16), to_output(lse / math.log(2.0), torch.float32)


def physical_floor(*, batch, heads, rank, rope_dim, num_pages, total_tokens, max_len, total_prefix,
                   max_prefix):
    q_lengths, prefix = profiles(batch, total_tokens, max_len, total_prefix, max_prefix)
    pairs = int((q_lengths * (q_lengths + 1) // 2 + q_lengths * prefix).sum())  # visible pairs
    total_kv = total_tokens + total_prefix
    cache_bytes = total_kv * (rank + rope_dim) * 2 + total_kv * 4
    io_bytes = total_tokens * heads * (2 * rank + rope_dim) * 2 + total_tokens * heads * 4
    return {"bytes": cache_bytes + io_bytes, "flops": 2 * pairs * heads * (2 * rank + rope_dim),
            "math": "bf16"}
