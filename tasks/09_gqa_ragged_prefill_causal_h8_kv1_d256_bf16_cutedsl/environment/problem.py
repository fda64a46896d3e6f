"""Causal ragged GQA prefill, 8 query heads on 1 KV head of dim 256 (Qwen3-Next-80B TP=2), bf16.

63 sequences on packed (non-paged) tensors: queries q[qo_indptr[b]:qo_indptr[b+1]] (3053 tokens in
all, 13..102 per sequence, as captured), keys and values k/v[kv_indptr[b]:kv_indptr[b+1]] (4841 tokens
in all), each sequence's KV being a cached prefix (0..64 tokens, 1788 in all) followed by its queries.
All 8 query heads read the single KV head. Query i (0-based) sees KV position j only if
j <= i + (L_kv - L_q). Logits are scaled by sm_scale, softmaxed in fp32 and average V; the output is
rounded to bf16. The second output is the base-2 log-sum-exp per (query token, head), fp32.
"""

import math

import torch

from metakernelbench.problem_kit import acc, captured, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Qwen3-Next-80B-A3B (TP=2, full-attention layers)",
    upstream="flashinfer-ai/flashinfer-trace definitions/gqa_ragged/gqa_ragged_prefill_causal_h8_kv1_d256.json "
    "(workload record 96ee50a6-c16e-4231-9253-e4565ed6213d)",
    license="Apache-2.0",
    notes="Upstream's workload in full: the 63 captured query lengths (qo_indptr of the record, verbatim) "
    "and the 63 fixed cached-prefix lengths (0..64, 1788 in all) that the upstream problem authored, since "
    "the record carries none; both are stored in the .captured.json beside this file. q, k and v are "
    "drawn per draw. The reference is launch-bound (63 short sequences, a dozen small kernels each); its "
    "memory is a few MB. SMALL_WORKLOAD takes the first 3 sequences with query and prefix lengths divided "
    "by length_divisor, at head_dim 64.",
)
INPUTS = ("q", "k", "v", "qo_indptr", "kv_indptr", "sm_scale")
OUTPUTS = ("output", "lse")
SMALL_WORKLOAD = dict(batch=3, head_dim=64, length_divisor=8)
SM_SCALE = 0.08838834764831843
def _profile():
    """Qo_indptr (captured) and prefix_lens (authored upstream): read when inputs are drawn."""
    return captured(__file__)


def profiles(batch, length_divisor):
    """Query and cached-prefix lengths of the first ``batch`` sequences of the captured profile.

    At length_divisor 1 these are the stored values verbatim; the small CPU workload divides both
    (query lengths never below 1) so that the same profile fits a few dozen tokens.
    """
    qo, prefix = _profile()["qo_indptr"], _profile()["prefix_lens"]
    assert 1 <= batch <= len(prefix) and length_divisor >= 1
    q_lens = [max(1, (qo[b + 1] - qo[b]) // length_divisor) for b in range(batch)]
    return q_lens, [prefix[b] // length_divisor for b in range(batch)]


def text_values(*, batch, length_divisor, **_):
    """The query and prefix lengths the description quotes."""
    q_lens, prefix = profiles(batch, length_divisor)
    return {"query tokens per sequence": (min(q_lens), max(q_lens)),
            "prefix tokens per sequence": (min(prefix), max(prefix)), "prefix tokens": sum(prefix)}


def indptr(counts):
    out = torch.zeros(len(counts) + 1, dtype=torch.int32)
    out[1:] = torch.cumsum(torch.tensor(counts, dtype=torch.int64), 0).to(torch.int32)
    return out


def make_inputs(device, generator, *, batch=63, heads=8, kv_heads=1, head_dim=256, length_divisor=1):
    q_lens, prefix = profiles(batch, length_divisor)
    kv_lens = [n + p for n, p in zip(q_lens, prefix, strict=True)]

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    q, k, v = randn(sum(q_lens), heads, head_dim), randn(sum(kv_lens), kv_heads, head_dim), randn(
        sum(kv_lens), kv_heads, head_dim)
    return q, k, v, indptr(q_lens).to(device), indptr(kv_lens).to(device), SM_SCALE


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


def reference(q, k, v, qo_indptr, kv_indptr, sm_scale):
    tokens, heads, head_dim = q.shape
    output = torch.empty(tokens, heads, head_dim, dtype=acc(q).dtype, device=q.device)
    lse = torch.empty(tokens, heads, dtype=acc(q).dtype, device=q.device)
    qb, kb = qo_indptr.tolist(), kv_indptr.tolist()
    for b in range(len(qb) - 1):
        rows, context = slice(qb[b], qb[b + 1]), slice(kb[b], kb[b + 1])
        output[rows], lse[rows] = attend(acc(q[rows]), acc(k[context]), acc(v[context]), sm_scale)
    return to_output(output, torch.bfloat16), to_output(lse / math.log(2.0), torch.float32)


def physical_floor(*, batch, heads, kv_heads, head_dim, length_divisor):
    q_lens, prefix = profiles(batch, length_divisor)
    pairs = sum(n * (n + 1) // 2 + n * p for n, p in zip(q_lens, prefix, strict=True))  # visible pairs
    tokens, total_kv = sum(q_lens), sum(q_lens) + sum(prefix)
    kv_bytes = 2 * total_kv * kv_heads * head_dim * 2
    io_bytes = 2 * tokens * heads * head_dim * 2 + tokens * heads * 4 + 2 * (batch + 1) * 4
    return {"bytes": kv_bytes + io_bytes, "flops": 4 * pairs * heads * head_dim, "math": "bf16"}
