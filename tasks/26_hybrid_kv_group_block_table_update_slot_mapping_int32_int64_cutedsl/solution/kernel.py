"""CuTe DSL oracle for problem 26: staged block-table writes for 3 KV-cache groups, then the slot mapping.

One DSL kernel, one CTA of ``THREADS`` threads, in two phases separated by a CTA barrier (which
also makes the table writes of the first phase visible to the reads of the second).

Phase 1 applies the staged writes. Thread item (group g, request r), for items tid, tid + THREADS,
..., walks all writes in order and applies those that target r: the start column is 0 when the
write's overwrite flag is set, else the request's running block count; the first
staged_counts[g, w] staged ids are stored, each expanded into ``expand`` kernel block ids
(b * expand + j, expand = 2 for group 1, whose allocator blocks are twice its kernel blocks), and
the running count becomes the end of what was written. Writes to one (group, request) only ever
touch that request's row, so one thread applying them in order reproduces the reference's
sequential replay exactly, later writes replacing earlier ones. The final count goes to
num_blocks[g, r].

Phase 2 maps tokens to slots, one token per thread per step. A token t below query_start_loc[-1]
finds its batch entry by a binary search for the number of query_start_loc entries <= t (the
reference's searchsorted(right=True) - 1, out-of-range entries taken as the reference's indexing
takes them), its request through idx_mapping, and for each group g writes
block_table_g[request, p // kbs_g] * kbs_g + p % kbs_g in int64 (p = positions[t]); later tokens
get -1. Everything is integer arithmetic, so the outputs are exact.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

EXPAND = (1, 2, 1)  # allocator block size // kernel block size, per group
KERNEL_BLOCK_SIZES = (16, 16, 8)
THREADS = 1024
STAGE_CAPACITY = 4  # staged ids per write (the problem's constant; the only static extent)
# No workload size is compiled in: requests, tokens, table widths and lengths are runtime symbols.
WORKLOAD = {}
_COMPILED = {}


@cute.jit
def _apply_writes(table: cute.Tensor, num_blocks: cute.Tensor, write_requests: cute.Tensor, overwrite: cute.Tensor,
                  staged_ids: cute.Tensor, staged_counts: cute.Tensor, r: cutlass.Int32, group: cutlass.Constexpr,
                  expand: cutlass.Constexpr, capacity: cutlass.Constexpr):
    """Replay, in order, the writes of one group that target request r; store its final block count."""
    writes = cute.size(write_requests, mode=[0])
    count = cutlass.Int32(num_blocks[group, r])
    for w in range(writes):
        if cutlass.Int32(write_requests[w]) == r:
            start = count
            if cutlass.Int32(overwrite[w]) != 0:
                start = cutlass.Int32(0)
            n = cutlass.Int32(staged_counts[group, w])
            for k in cutlass.range_constexpr(capacity):
                if k < n:
                    block = cutlass.Int32(staged_ids[group, w, k])
                    for j in cutlass.range_constexpr(expand):
                        table[r, start + k * expand + j] = block * expand + j
            count = start + n * expand
    num_blocks[group, r] = count


@cute.kernel
def block_table_slots_kernel(table_0: cute.Tensor, table_1: cute.Tensor, table_2: cute.Tensor,
                             num_blocks: cute.Tensor, write_requests: cute.Tensor, overwrite: cute.Tensor,
                             staged_ids: cute.Tensor, staged_counts: cute.Tensor, idx_mapping: cute.Tensor,
                             query_start_loc: cute.Tensor, positions: cute.Tensor, slots: cute.Tensor,
                             capacity: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    requests = cute.size(num_blocks, mode=[1])

    # phase 1: the staged writes, one (group, request) per thread and step
    for item in range(tidx, 3 * requests, THREADS):
        group = item // requests
        r = item - group * requests
        if group == 0:
            _apply_writes(table_0, num_blocks, write_requests, overwrite, staged_ids, staged_counts, r, 0,
                          EXPAND[0], capacity)
        else:
            if group == 1:
                _apply_writes(table_1, num_blocks, write_requests, overwrite, staged_ids, staged_counts, r, 1,
                              EXPAND[1], capacity)
            else:
                _apply_writes(table_2, num_blocks, write_requests, overwrite, staged_ids, staged_counts, r, 2,
                              EXPAND[2], capacity)
    cute.arch.sync_threads()

    # phase 2: the slot mapping, one token per thread and step
    tokens = cute.size(positions, mode=[0])
    entries = cute.size(query_start_loc, mode=[0])
    batch_size = cute.size(idx_mapping, mode=[0])
    end = cutlass.Int32(query_start_loc[entries - 1])
    for t in range(tidx, tokens, THREADS):
        if t < end:
            lo = cutlass.Int32(0)
            hi = cutlass.Int32(entries)
            while lo < hi:
                mid = (lo + hi) // 2
                if cutlass.Int32(query_start_loc[mid]) <= t:
                    lo = mid + 1
                else:
                    hi = mid
            batch = lo - 1
            if batch >= batch_size:
                batch = batch_size - 1
            if batch < 0:
                batch = batch_size + batch
            request = cutlass.Int32(idx_mapping[batch])
            pos = cutlass.Int64(positions[t])
            kbs0, kbs1, kbs2 = KERNEL_BLOCK_SIZES
            slots[0, t] = cutlass.Int64(table_0[request, cutlass.Int32(pos // kbs0)]) * kbs0 + pos % kbs0
            slots[1, t] = cutlass.Int64(table_1[request, cutlass.Int32(pos // kbs1)]) * kbs1 + pos % kbs1
            slots[2, t] = cutlass.Int64(table_2[request, cutlass.Int32(pos // kbs2)]) * kbs2 + pos % kbs2
        else:
            for g in cutlass.range_constexpr(3):
                slots[g, t] = cutlass.Int64(-1)


@cute.jit
def block_table_slots(table_0: cute.Tensor, table_1: cute.Tensor, table_2: cute.Tensor, num_blocks: cute.Tensor,
                      write_requests: cute.Tensor, overwrite: cute.Tensor, staged_ids: cute.Tensor,
                      staged_counts: cute.Tensor, idx_mapping: cute.Tensor, query_start_loc: cute.Tensor,
                      positions: cute.Tensor, slots: cute.Tensor, stream: cuda.CUstream):
    block_table_slots_kernel(table_0, table_1, table_2, num_blocks, write_requests, overwrite, staged_ids,
                             staged_counts, idx_mapping, query_start_loc, positions, slots,
                             cute.size(staged_ids, mode=[2])).launch(grid=[1, 1, 1], block=[THREADS, 1, 1],
                                                                     stream=stream)


def _compile(capacity, arch=None, ptx_dir=None):
    """Only the staging capacity is static; every count, width and length is a runtime symbol."""
    requests, writes, batch, entries, tokens = (cute.sym_int() for _ in range(5))
    tables = [make_fake_compact_tensor(cutlass.Int32, (requests, cute.sym_int()), stride_order=(1, 0))
              for _ in range(3)]
    num_blocks = make_fake_compact_tensor(cutlass.Int32, (3, requests), stride_order=(1, 0))
    write_requests = make_fake_compact_tensor(cutlass.Int32, (writes,))
    overwrite = make_fake_compact_tensor(cutlass.Uint8, (writes,))
    staged_ids = make_fake_compact_tensor(cutlass.Int32, (3, writes, capacity), stride_order=(2, 1, 0))
    staged_counts = make_fake_compact_tensor(cutlass.Int32, (3, writes), stride_order=(1, 0))
    idx_mapping = make_fake_compact_tensor(cutlass.Int32, (batch,))
    query_start_loc = make_fake_compact_tensor(cutlass.Int32, (entries,))
    positions = make_fake_compact_tensor(cutlass.Int64, (tokens,))
    slots = make_fake_compact_tensor(cutlass.Int64, (3, tokens), stride_order=(1, 0))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(block_table_slots, *tables, num_blocks, write_requests, overwrite, staged_ids, staged_counts,
                        idx_mapping, query_start_loc, positions, slots, make_fake_stream(), options=options)


def solve(block_table_0, block_table_1, block_table_2, num_blocks, write_requests, overwrite, staged_ids,
          staged_counts, idx_mapping, query_start_loc, positions):
    tables = (block_table_0, block_table_1, block_table_2)
    if not (all(t.is_contiguous() for t in tables) and num_blocks.is_contiguous()):
        raise ValueError("the block tables and num_blocks must be contiguous (they are updated in place)")
    tokens = positions.shape[0]
    slots = torch.empty(3, tokens, dtype=torch.int64, device=positions.device)
    capacity = staged_ids.shape[2]
    if capacity not in _COMPILED:
        _COMPILED[capacity] = _compile(capacity)
    _COMPILED[capacity](*tables, num_blocks, write_requests.contiguous(), overwrite.contiguous().view(torch.uint8),
                        staged_ids.contiguous(), staged_counts.contiguous(), idx_mapping.contiguous(),
                        query_start_loc.contiguous(), positions.contiguous(), slots,
                        cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return slots


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    return list(_compile(STAGE_CAPACITY, arch, ptx_dir).kernel_info)
