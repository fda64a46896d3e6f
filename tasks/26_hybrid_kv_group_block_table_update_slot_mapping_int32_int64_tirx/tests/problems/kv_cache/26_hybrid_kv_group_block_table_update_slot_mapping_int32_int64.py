"""vLLM v1 block-table bookkeeping for 3 KV-cache groups: ordered staged writes, then slot mapping.

Allocator block sizes are (16, 32, 8) and kernel block sizes (16, 16, 8), so in group 1 each staged
allocator block id b stands for the kernel blocks 2b and 2b + 1. The staged writes are applied in
order: write w targets request r = write_requests[w]; for group g it starts at column 0 when
overwrite[w] is set, else at num_blocks[g, r], stores the (expanded) first staged_counts[g, w] ids of
staged_ids[g, w] into block_table_g[r, start:], and sets num_blocks[g, r] to the end of what it wrote.
Then for batch entry i (request idx_mapping[i]) and token t in [query_start_loc[i],
query_start_loc[i + 1]) at position p = positions[t], slot_g[t] = block_table_g[req, p // kbs_g] *
kbs_g + p % kbs_g (int64); tokens past query_start_loc[-1] get -1. The three tables and num_blocks are
updated in place; slot_mappings [3, tokens] is returned.
"""

import torch

PROVENANCE = dict(
    source="vLLM",
    model="generic hybrid model with 3 KV-cache groups",
    upstream="vllm-project/vllm@b9b6306: tests/v1/worker/test_gpu_block_table.py::"
    "test_block_tables_apply_staged_writes_fuses_kv_groups; vllm/v1/worker/gpu/block_table.py::BlockTables",
    license="Apache-2.0",
)
INPUTS = ("block_table_0", "block_table_1", "block_table_2", "num_blocks", "write_requests", "overwrite",
          "staged_ids", "staged_counts", "idx_mapping", "query_start_loc", "positions")
OUTPUTS = ("slot_mappings",)
INPLACE = ("block_table_0", "block_table_1", "block_table_2", "num_blocks")
SMALL_WORKLOAD = dict(requests=4, tokens=32, width_0=16, width_1=32, width_2=16, max_position=16)
BLOCK_SIZES = (16, 32, 8)
KERNEL_BLOCK_SIZES = (16, 16, 8)
STAGE_CAPACITY = 4
ID_RANGE = 2048


def make_inputs(device, generator, *, requests=64, tokens=4096, width_0=512, width_1=1024, width_2=512,
                max_position=64):
    def randint(high, *shape, low=0):
        return torch.randint(low, high, shape, device=device, generator=generator)

    def randperm(n):
        return torch.randperm(n, device=device, generator=generator)

    tables = [randint(ID_RANGE, requests, w).to(torch.int32) for w in (width_0, width_1, width_2)]
    num_blocks = torch.zeros(3, requests, dtype=torch.int32, device=device)
    writes = 2 * requests  # every request is written twice, in two random orders
    write_requests = torch.cat([randperm(requests), randperm(requests)]).to(torch.int32)
    overwrite = randint(2, writes).to(torch.bool)
    staged_counts = randint(STAGE_CAPACITY + 1, 3, writes).to(torch.int32)
    filled = torch.arange(STAGE_CAPACITY, device=device) < staged_counts.unsqueeze(-1)
    staged_ids = torch.where(filled, randint(ID_RANGE, 3, writes, STAGE_CAPACITY), -1).to(torch.int32)
    idx_mapping = randperm(requests).to(torch.int32)
    lengths = randint(tokens // requests + 1, requests)
    ends = lengths.cumsum(0).clamp(max=tokens)
    query_start_loc = torch.cat([ends.new_zeros(1), ends]).to(torch.int32)
    positions = randint(max_position, tokens)
    return (*tables, num_blocks, write_requests, overwrite, staged_ids, staged_counts, idx_mapping,
            query_start_loc, positions)


def _apply_writes(table, group, counts, requests, overwrite, staged_ids, staged_counts):
    """Replay the staged writes of one group on the host; scatter the surviving ids into the table."""
    expand = BLOCK_SIZES[group] // KERNEL_BLOCK_SIZES[group]
    final = {}  # (request, column) -> kernel block id; a later write replaces an earlier one
    for w, r in enumerate(requests):
        start = 0 if overwrite[w] else counts[r]
        ids = [b * expand + j for b in staged_ids[w][:staged_counts[w]] for j in range(expand)]
        for column, block in enumerate(ids, start):
            final[(r, column)] = block
        counts[r] = start + len(ids)
    if final:
        index = torch.tensor(list(final), dtype=torch.int64, device=table.device)
        table[index[:, 0], index[:, 1]] = torch.tensor(list(final.values()), dtype=table.dtype,
                                                       device=table.device)


def reference(block_table_0, block_table_1, block_table_2, num_blocks, write_requests, overwrite,
              staged_ids, staged_counts, idx_mapping, query_start_loc, positions):
    tables = (block_table_0, block_table_1, block_table_2)
    counts = num_blocks.tolist()
    requests, flags = write_requests.tolist(), overwrite.tolist()
    ids, id_counts = staged_ids.tolist(), staged_counts.tolist()
    for g, table in enumerate(tables):
        _apply_writes(table, g, counts[g], requests, flags, ids[g], id_counts[g])
    num_blocks.copy_(torch.tensor(counts, dtype=num_blocks.dtype))

    token = torch.arange(positions.shape[0], device=positions.device)
    batch = torch.searchsorted(query_start_loc, token.to(query_start_loc.dtype), right=True) - 1
    request = idx_mapping[batch.clamp(max=idx_mapping.shape[0] - 1)].long()
    in_batch = token < query_start_loc[-1]
    slots = []
    for table, size in zip(tables, KERNEL_BLOCK_SIZES, strict=True):
        block = table[request, positions // size].long()
        slots.append(torch.where(in_batch, block * size + positions % size, -1))
    return torch.stack(slots)


def physical_floor(*, requests, tokens, width_0, width_1, width_2, max_position):
    metadata = 2 * requests * (4 + 1 + 3 * 4)  # write targets, overwrite flags, staged counts
    return {"bytes": 3 * tokens * 8 + metadata, "flops": 0, "math": "int"}
