"""DeepSeek sparse attention (DSA) in absorbed-MLA form over a 64-token-page latent cache (DeepSeek-V3.2).

62 query tokens, 16 heads. Row t of sparse_indices lists the cached token slots query t attends: up
to 2048 global slot ids (page * 64 + offset into the flattened [pages * 64] cache), valid ids sorted
ascending, then -1 padding. Over the selected slots, logits = (q_nope . ckv + q_pe . kpe) * sm_scale
(-1 entries masked to -inf), softmax in fp32, output = probabilities @ ckv (the 512-dim latent is
also the value), rounded to bf16; the second output is the base-2 log-sum-exp per (token, head), fp32.
"""

import math

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="DeepSeek-V3.2 (TP=8)",
    upstream="flashinfer-ai/flashinfer-trace definitions/dsa_paged/"
    "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64.json (workload record 0f8137e0c871466f8b4bdce5bfd57658)",
    license="Apache-2.0",
    notes="The captured sparse_indices are not redistributed. Each query row stands for one decoding "
    "sequence whose context pages are placed on a fresh random permutation of the pool: 61 rows "
    "select their whole context (fixed counts 2..1319) and row 2 selects 2048 of a 2161-token context "
    "(three fixed dropped runs); 11800 selected slots in total, the capture's approximate count.",
)
INPUTS = ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "sparse_indices", "sm_scale")
OUTPUTS = ("output", "lse")
SMALL_WORKLOAD = dict(tokens=4, heads=2, rank=16, rope_dim=8, page_size=4, num_pages=32, top_k=16,
                      total_selected=30, max_count=10, long_context=20)
SM_SCALE = 0.1352337788608801
LONG_ROW = 2


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


def selected_positions(tokens, top_k, total_selected, max_count, long_context):
    """Per row, the fixed context length and the context positions it selects (same every draw)."""
    counts = ragged_profile(tokens - 1, 2, max_count, total_selected - top_k, seed=117).tolist()
    contexts = counts[:LONG_ROW] + [long_context] + counts[LONG_ROW:]
    positions = [torch.arange(n) for n in contexts]
    drop = long_context - top_k  # the long row keeps top_k positions: three dropped runs
    keep = torch.ones(long_context, dtype=torch.bool)
    for start, run in zip((1, 3, 5), (drop // 3, drop // 3, drop - 2 * (drop // 3)), strict=True):
        keep[long_context * start // 6:long_context * start // 6 + run] = False
    positions[LONG_ROW] = positions[LONG_ROW][keep]
    return contexts, positions


def make_inputs(device, generator, *, tokens=62, heads=16, rank=512, rope_dim=64, page_size=64,
                num_pages=6465, top_k=2048, total_selected=11800, max_count=1319, long_context=2161):
    contexts, positions = selected_positions(tokens, top_k, total_selected, max_count, long_context)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    q_nope, q_pe = randn(tokens, heads, rank), randn(tokens, heads, rope_dim)
    ckv_cache, kpe_cache = randn(num_pages, page_size, rank), randn(num_pages, page_size, rope_dim)
    pages_per_row = [-(-n // page_size) for n in contexts]
    perm = torch.randperm(num_pages, device=device, generator=generator)[:sum(pages_per_row)]
    sparse_indices = torch.full((tokens, top_k), -1, dtype=torch.int64, device=device)
    first_page = 0
    for t, (pos, n_pages) in enumerate(zip(positions, pages_per_row, strict=True)):
        pos = pos.to(device)
        table = perm[first_page:first_page + n_pages]
        first_page += n_pages
        slots = table[pos // page_size] * page_size + pos % page_size
        sparse_indices[t, :len(pos)] = slots.sort().values
    return q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices.to(torch.int32), SM_SCALE


def reference(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    rank, rope_dim = ckv_cache.shape[-1], kpe_cache.shape[-1]
    valid = sparse_indices >= 0
    slots = sparse_indices.clamp(min=0).long()
    ckv = acc(ckv_cache.reshape(-1, rank)[slots])  # [tokens, top_k, rank]
    kpe = acc(kpe_cache.reshape(-1, rope_dim)[slots])
    logits = torch.bmm(acc(q_nope), ckv.transpose(1, 2)) + torch.bmm(acc(q_pe), kpe.transpose(1, 2))
    logits = (logits * sm_scale).masked_fill_(~valid.unsqueeze(1), float("-inf"))  # [tokens, heads, top_k]
    peak = logits.amax(dim=-1, keepdim=True)
    weights = logits.sub_(peak).exp_()  # unnormalised probabilities, in place
    total = weights.sum(dim=-1, keepdim=True)
    output = torch.bmm(weights, ckv) / total
    lse = (peak + total.log()).squeeze(-1)
    return to_output(output, torch.bfloat16), to_output(lse / math.log(2.0), torch.float32)


def physical_floor(*, tokens, heads, rank, rope_dim, page_size, num_pages, top_k, total_selected, max_count,
                   long_context):
    cache_bytes = total_selected * (rank + rope_dim) * 2
    io_bytes = tokens * heads * (2 * rank + rope_dim) * 2 + tokens * heads * 4 + tokens * top_k * 4
    flops = 2 * total_selected * heads * (2 * rank + rope_dim)
    return {"bytes": cache_bytes + io_bytes, "flops": flops, "math": "bf16"}
