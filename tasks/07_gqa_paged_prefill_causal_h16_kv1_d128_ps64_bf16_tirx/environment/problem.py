"""Causal paged GQA prefill, 16 query heads on 1 KV head of dim 128, page size 64 (Qwen3-235B TP=4).

The query tokens of 15 captured sequences (969 in all, 3..340 per sequence) are packed ragged by
qo_indptr; the KV pages of sequence b are kv_indices[kv_indptr[b]:kv_indptr[b+1]], distinct pages of a
4166-page pool. Every page holds 64 tokens except the last, which holds kv_last_page_len[b] = 1; as
captured, each sequence lists as many pages as it has queries, so n queries sit at the end of a
64*(n-1)+1-token context (129..21697 tokens per sequence, 61071 in all). All 16 query heads read the
single KV head. Query i (0-based) sees KV position j only if j <= i + (L_kv - L_q). Logits are scaled
by sm_scale, softmaxed in fp32 and average V; the output is rounded to bf16. The second output is the
base-2 log-sum-exp of the scaled, masked logits per (query token, head), fp32.
"""

import math

import torch

from metakernelbench.problem_kit import acc, captured, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Qwen3-235B-A22B (TP=4)",
    upstream="flashinfer-ai/flashinfer-trace definitions/gqa_paged/"
    "gqa_paged_prefill_causal_h16_kv1_d128_ps64.json (workload record 820d93c0-2670-4ee2-8b19-864e471836a3)",
    license="Apache-2.0",
    notes="Upstream's workload in full: the 15 captured sequences (qo_indptr, kv_indptr and "
    "kv_last_page_len of the record, verbatim, in the .captured.json beside this file) over the captured "
    "pool of 4166 pages; page ids, q and the caches are drawn per draw. The largest per-sequence logits "
    "(16 heads x 340 queries x 21697 keys) take 0.5 GB in fp32 and 0.9 GB in float64. SMALL_WORKLOAD takes "
    "the first 3 captured sequences with query and page counts divided by length_divisor.",
)
INPUTS = ("q", "k_cache", "v_cache", "qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len", "sm_scale")
OUTPUTS = ("output", "lse")
SMALL_WORKLOAD = dict(batch=3, page_size=4, num_pages=40, length_divisor=12)
SM_SCALE = 0.08838834764831843
def _profile():
    """Qo_indptr, kv_indptr, kv_last_page_len of the captured record: read when inputs are drawn."""
    return captured(__file__)


def sequence_shapes(batch, page_size, length_divisor):
    """(query tokens, pages, tokens on the last page) of the first ``batch`` captured sequences.

    At length_divisor 1 these are the captured values verbatim; the small CPU workload divides the
    query and page counts (never below 1) so that the same profile fits a few dozen tokens.
    """
    qo, kv, last = _profile()["qo_indptr"], _profile()["kv_indptr"], _profile()["kv_last_page_len"]
    assert 1 <= batch <= len(last) and length_divisor >= 1
    q_lens = [max(1, (qo[b + 1] - qo[b]) // length_divisor) for b in range(batch)]
    pages = [max(1, (kv[b + 1] - kv[b]) // length_divisor) for b in range(batch)]
    last_lens = [min(last[b], page_size) for b in range(batch)]
    assert all((p - 1) * page_size + t >= n for n, p, t in zip(q_lens, pages, last_lens, strict=True))
    return q_lens, pages, last_lens


def context_lengths(batch, page_size, length_divisor):
    """Query and KV token counts per sequence: L_kv = (pages - 1) * page_size + last-page tokens."""
    q_lens, pages, last_lens = sequence_shapes(batch, page_size, length_divisor)
    return q_lens, [(p - 1) * page_size + t for p, t in zip(pages, last_lens, strict=True)]


def text_values(*, batch, page_size, length_divisor, **_):
    """The query and context lengths the description quotes."""
    q_lens, kv_lens = context_lengths(batch, page_size, length_divisor)
    return {"query tokens per sequence": (min(q_lens), max(q_lens)),
            "context tokens per sequence": (min(kv_lens), max(kv_lens)), "context tokens": sum(kv_lens)}


def indptr(counts):
    out = torch.zeros(len(counts) + 1, dtype=torch.int32)
    out[1:] = torch.cumsum(torch.tensor(counts, dtype=torch.int64), 0).to(torch.int32)
    return out


def make_inputs(device, generator, *, batch=15, heads=16, kv_heads=1, head_dim=128, page_size=64,
                num_pages=4166, length_divisor=1):
    q_lens, pages, last_lens = sequence_shapes(batch, page_size, length_divisor)
    tokens, nnz = sum(q_lens), sum(pages)
    assert nnz <= num_pages, "the page pool must hold every listed page"
    q = torch.randn(tokens, heads, head_dim, device=device, generator=generator).to(torch.bfloat16)
    cache_shape = (num_pages, page_size, kv_heads, head_dim)
    k_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    v_cache = torch.randn(cache_shape, device=device, generator=generator).to(torch.bfloat16)
    perm = torch.randperm(num_pages, device=device, generator=generator)
    kv_indices = perm[:nnz].to(torch.int32)  # distinct pages, re-drawn per draw
    kv_last_page_len = torch.tensor(last_lens, dtype=torch.int32, device=device)
    return (q, k_cache, v_cache, indptr(q_lens).to(device), indptr(pages).to(device), kv_indices, kv_last_page_len,
            SM_SCALE)


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


def reference(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    tokens, heads, head_dim = q.shape
    page_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    output = torch.empty(tokens, heads, head_dim, dtype=acc(q).dtype, device=q.device)
    lse = torch.empty(tokens, heads, dtype=acc(q).dtype, device=q.device)
    qb, kb, last = qo_indptr.tolist(), kv_indptr.tolist(), kv_last_page_len.tolist()
    for b in range(len(qb) - 1):
        pages = kv_indices[kb[b]:kb[b + 1]].long()
        context = (len(pages) - 1) * page_size + last[b]
        k = acc(k_cache[pages].view(-1, kv_heads, head_dim)[:context])
        v = acc(v_cache[pages].view(-1, kv_heads, head_dim)[:context])
        rows = slice(qb[b], qb[b + 1])
        output[rows], lse[rows] = attend(acc(q[rows]), k, v, sm_scale)
    return to_output(output, torch.bfloat16), to_output(lse / math.log(2.0), torch.float32)


def physical_floor(*, batch, heads, kv_heads, head_dim, page_size, num_pages, length_divisor):
    q_lens, kv_lens = context_lengths(batch, page_size, length_divisor)
    pairs = sum(n * (c - n) + n * (n + 1) // 2 for n, c in zip(q_lens, kv_lens, strict=True))
    tokens, nnz = sum(q_lens), sum(sequence_shapes(batch, page_size, length_divisor)[1])
    kv_bytes = 2 * sum(kv_lens) * kv_heads * head_dim * 2
    io_bytes = 2 * tokens * heads * head_dim * 2 + tokens * heads * 4 + nnz * 4
    return {"bytes": kv_bytes + io_bytes, "flops": 4 * pairs * heads * head_dim, "math": "bf16"}
