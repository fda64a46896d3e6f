"""DeepSeek sparse attention (DSA) in absorbed-MLA form over a 64-token-page latent cache (DeepSeek-V3.2).

62 query tokens, 16 heads. Row t of sparse_indices lists the cached token slots query t attends: up
to 2048 global slot ids (page * 64 + offset into the flattened [pages * 64] cache), valid ids sorted
ascending, then -1 padding. The selections are a captured decode batch: 61 rows take their whole
context (2..1319 tokens) and one row takes 2048 positions of a 2161-token context, 11837 slots in
all, on pages spread over the 6465-page pool. Over the selected slots, logits = (q_nope . ckv +
q_pe . kpe) * sm_scale (-1 entries masked to -inf), softmax in fp32, output = probabilities @ ckv
(the 512-dim latent is also the value), rounded to bf16; the second output is the base-2
log-sum-exp per (token, head), fp32.
"""

import math

import torch

from metakernelbench.problem_kit import acc, captured, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="DeepSeek-V3.2 (TP=8)",
    upstream="flashinfer-ai/flashinfer-trace definitions/dsa_paged/"
    "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64.json (workload record 0f8137e0c871466f8b4bdce5bfd57658)",
    license="Apache-2.0",
    notes="Upstream's workload in full, on the captured selection pattern (beside this file as the "
    "captured values): each row's selection count (2..1319 for the 61 rows that select their whole "
    "context, 11837 slots in all) and, for row 2, the captured runs of 2048 context positions out of "
    "2161. As upstream does, each row stands for one decoding sequence whose context pages are placed "
    "on a fresh random permutation of the 6465-page pool every draw, and the caches and queries are "
    "drawn per draw.",
)
INPUTS = ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "sparse_indices", "sm_scale")
OUTPUTS = ("output", "lse")
# the CPU workload: the first 4 captured rows with positions divided by 128 (1, 1, 17 and 1 slots)
SMALL_WORKLOAD = dict(tokens=4, heads=2, rank=16, rope_dim=8, page_size=4, num_pages=32, top_k=20, len_divisor=128)
SM_SCALE = 0.1352337788608801


def selected_positions(tokens, len_divisor):
    """Per row, its context length and the context positions it selects (same every draw).

    The first ``tokens`` captured rows. A row that selects its whole context keeps its count divided by
    ``len_divisor`` (at least 1); the long row's captured runs of positions become position //
    len_divisor (duplicates merged) in a context of ceil(context / len_divisor). The graded workload
    (divisor 1) is the capture verbatim.
    """
    values = captured(__file__)
    counts, long_row = values["select_lens"], values["long_row"]
    assert 1 <= tokens <= len(counts)
    contexts, positions = [], []
    for t, count in enumerate(counts[:tokens]):
        if t == long_row:
            kept = torch.cat([torch.arange(start, start + run) for start, run in values["long_row_runs"]])
            assert kept.numel() == count
            positions.append(torch.unique(kept // len_divisor))
            contexts.append(-(-values["long_row_context"] // len_divisor))
        else:
            count = max(1, count // len_divisor)
            positions.append(torch.arange(count))
            contexts.append(count)
    return contexts, positions


def text_values(*, tokens, heads, rank, rope_dim, page_size, num_pages, top_k, len_divisor):
    contexts, positions = selected_positions(tokens, len_divisor)
    whole = [n for n, pos in zip(contexts, positions, strict=True) if len(pos) == n]
    return len(whole), min(whole), max(whole), max(contexts), sum(len(pos) for pos in positions)


def make_inputs(device, generator, *, tokens=62, heads=16, rank=512, rope_dim=64, page_size=64, num_pages=6465,
                top_k=2048, len_divisor=1):
    contexts, positions = selected_positions(tokens, len_divisor)
    assert max(len(pos) for pos in positions) <= top_k

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    q_nope, q_pe = randn(tokens, heads, rank), randn(tokens, heads, rope_dim)
    ckv_cache, kpe_cache = randn(num_pages, page_size, rank), randn(num_pages, page_size, rope_dim)
    pages_per_row = [-(-n // page_size) for n in contexts]
    assert sum(pages_per_row) <= num_pages
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


def physical_floor(*, tokens, heads, rank, rope_dim, page_size, num_pages, top_k, len_divisor):
    total_selected = sum(len(pos) for pos in selected_positions(tokens, len_divisor)[1])
    cache_bytes = total_selected * (rank + rope_dim) * 2
    io_bytes = tokens * heads * (2 * rank + rope_dim) * 2 + tokens * heads * 4 + tokens * top_k * 4
    flops = 2 * total_selected * heads * (2 * rank + rope_dim)
    return {"bytes": cache_bytes + io_bytes, "flops": flops, "math": "bf16"}
