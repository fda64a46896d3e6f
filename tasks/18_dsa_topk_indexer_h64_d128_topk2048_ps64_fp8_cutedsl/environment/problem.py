"""DSA lightning-indexer top-2048 token selection over an FP8 paged index-key cache (DeepSeek-V3.2).

For each of 31 sequences, its ceil(seq_len / 64) pages are block_table[b, :n]. seq_lens is a captured
decode batch: 6..2693 tokens, 11934 in all on 207 pages of the 11923-page cache, and only one
sequence longer than 2048. A page of the index-key cache is 64 x 128 e4m3 key bytes followed by 64
fp32 per-token scales (8448 bytes, viewed as int8 [64, 1, 132]); key = e4m3 value * its token's
scale. Queries are e4m3 values used as they are. Token t scores sum_h weights[b, h] * relu(q[b, h] .
key[t]) over the 64 heads. The min(2048, seq_len) best token positions are selected and written
left-aligned as global slot ids (page_id * 64 + offset, in ascending position order), padded with
-1. Compared as a set per row.
"""

import torch

from metakernelbench.problem_kit import acc, captured

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="DeepSeek-V3.2",
    upstream="flashinfer-ai/flashinfer-trace definitions/dsa_paged/"
    "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64.json (workload record a52c09bc-2ee5-4366-be02-457932a80631)",
    license="Apache-2.0",
    notes="Upstream's workload in full: seq_lens are the captured ones (31 sequences of 6..2693 tokens, "
    "only one above 2048, 207 pages referenced; beside this file as the captured values); the block "
    "table's page ids, the index cache, the queries and the head weights are drawn per draw, as "
    "upstream does. The generator redraws the queries and head weights of every sequence longer than "
    "2048 until its 2048th and 2049th scores differ by at least 0.05 (about 1e-3 of the score "
    "spread): a 1e-3 absolute gap would be below the rounding of FP8 tensor-core dot products at "
    "these magnitudes.",
)
INPUTS = ("q_index_fp8", "k_index_cache_fp8", "weights", "seq_lens", "block_table")
OUTPUTS = ("topk_indices",)
SETS = {"topk_indices": {"dim": -1}}
# the CPU workload: the first 4 captured sequences (63, 9, 2693 and 212 tokens: one above TOP_K) on a
# 64-page cache; heads and dim stay at full size, so the redraw for a clear TOP_K boundary succeeds as
# often as at the graded workload (a few draws)
SMALL_WORKLOAD = dict(batch=4, heads=64, dim=128, num_pages=64, max_pages=43)
TOP_K = 2048
MIN_GAP = 0.05


def sequence_lengths(batch):
    """The first ``batch`` captured sequence lengths (all 31 in the graded workload)."""
    lengths = captured(__file__)["seq_lens"]
    assert 1 <= batch <= len(lengths)
    return torch.tensor(lengths[:batch], dtype=torch.int32)


def decode_keys(pages, page_size, dim):
    """int8 pages [..., page_size, 1, dim + 4] -> keys [..., page_size, dim] in the working precision."""
    raw = pages.reshape(*pages.shape[:-3], page_size * (dim + 4))
    values = raw[..., :page_size * dim].contiguous().view(torch.float8_e4m3fn)
    scales = raw[..., page_size * dim:].contiguous().view(torch.float32)
    keys = acc(values).view(*pages.shape[:-3], page_size, dim)
    return keys * acc(scales).unsqueeze(-1)


def token_scores(q, keys, weights):
    """q [B, heads, dim], keys [B, tokens, dim], weights [B, heads] -> scores [B, tokens]."""
    return (torch.bmm(q, keys.transpose(1, 2)).relu_() * weights.unsqueeze(-1)).sum(dim=1)


def text_values(*, batch, dim, page_size, **_):
    """The bytes of one index-key cache page (e4m3 keys, then one fp32 scale per token) and the
    captured profile's length range, total and referenced pages."""
    lengths = sequence_lengths(batch).tolist()
    return {"page bytes": page_size * (dim + 4), "lengths": (min(lengths), max(lengths), sum(lengths)),
            "pages": sum(-(-n // page_size) for n in lengths)}


def make_inputs(device, generator, *, batch=31, heads=64, dim=128, page_size=64, num_pages=11923, max_pages=43):
    seq_lens = sequence_lengths(batch)
    q = torch.randn(batch, heads, dim, device=device, generator=generator).to(torch.float8_e4m3fn)
    weights = torch.randn(batch, heads, device=device, generator=generator)
    payload = torch.randn(num_pages, page_size * dim, device=device, generator=generator)
    scales = 0.5 + 0.5 * torch.rand(num_pages, page_size, device=device, generator=generator)
    k_cache = torch.cat([payload.to(torch.float8_e4m3fn).view(torch.int8), scales.view(torch.int8)], dim=1)
    k_cache = k_cache.view(num_pages, page_size, 1, dim + 4)

    n_pages = [-(-n // page_size) for n in seq_lens.tolist()]
    assert max(n_pages) <= max_pages and sum(n_pages) < num_pages
    ids = torch.randperm(num_pages - 1, device=device, generator=generator)[:sum(n_pages)] + 1
    block_table = torch.zeros(batch, max_pages, dtype=torch.int32, device=device)
    first = 0
    for b, n in enumerate(n_pages):
        block_table[b, :n] = ids[first:first + n].to(torch.int32)
        first += n

    for b in (seq_lens > TOP_K).nonzero().flatten().tolist():  # redraw until each TOP_K boundary is clear
        keys = (decode_keys(k_cache[block_table[b].long()], page_size, dim).reshape(-1, dim)
                .to(torch.float64)[:int(seq_lens[b])])
        for _ in range(500):
            scores = token_scores(q[b:b + 1].to(torch.float64), keys[None], weights[b:b + 1].to(torch.float64))
            ranked = scores[0].sort(descending=True).values
            if float(ranked[TOP_K - 1] - ranked[TOP_K]) >= MIN_GAP:
                break
            q[b] = torch.randn(heads, dim, device=device, generator=generator).to(torch.float8_e4m3fn)
            weights[b] = torch.randn(heads, device=device, generator=generator)
        else:
            raise RuntimeError("could not draw an unambiguous top-k boundary")
    return q, k_cache, weights, seq_lens.to(device), block_table


def reference(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table):
    batch, _, dim = q_index_fp8.shape
    page_size = k_index_cache_fp8.shape[1]
    keys = decode_keys(k_index_cache_fp8[block_table.long()], page_size, dim).flatten(1, 2)
    scores = token_scores(acc(q_index_fp8), keys, acc(weights))  # [batch, max_pages * page_size]
    position = torch.arange(scores.shape[1], device=scores.device)
    live = position < seq_lens.unsqueeze(1).long()
    chosen = scores.masked_fill(~live, float("-inf")).topk(TOP_K, dim=-1).indices
    chosen_live = chosen < seq_lens.unsqueeze(1).long()
    chosen = chosen.masked_fill(~chosen_live, scores.shape[1]).sort(dim=-1).values  # ascending, dead last
    chosen_live = chosen < seq_lens.unsqueeze(1).long()
    pages = block_table.long().gather(1, (chosen // page_size).clamp(max=block_table.shape[1] - 1))
    slots = pages * page_size + chosen % page_size
    return slots.masked_fill(~chosen_live, -1).to(torch.int32)


def physical_floor(*, batch, heads, dim, page_size, num_pages, max_pages):
    seq_lens = sequence_lengths(batch)
    pages = sum(-(-n // page_size) for n in seq_lens.tolist())
    tokens = int(seq_lens.sum())
    io_bytes = batch * heads * (dim + 4) + batch * (1 + max_pages) * 4 + batch * TOP_K * 4
    return {"bytes": pages * page_size * (dim + 4) + io_bytes, "flops": 2 * tokens * heads * dim,
            "math": "fp8"}
