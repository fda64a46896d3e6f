"""CuTe DSL oracle for problem 43: backward of an embedding lookup + RMSNorm (Jamba), bf16 table gradient.

Host glue prepares the index only: a stable sort of the token ids (token order kept within an id,
as the reference's index_put_ accumulates) and, for every table row, the start of its run of
tokens in that order (a search over the sorted ids). Two DSL kernels do the arithmetic.

``embed_rmsnorm_bwd_kernel``: each CTA owns ``_ROWS_PER_CTA`` consecutive table rows and walks
them in order; a thread owns the same ``vec`` contiguous columns in every row (512 threads x 8
columns cover 4096). For each token of a row's run it loads dy (bf16) and h (fp32) with 16-byte
loads, forms n = h * rstd and g = dy * w in fp32, reduces dot(g, n) by butterfly shuffles inside
each warp and through shared memory across warps (double-buffered by the token's position, one
barrier per token; every thread adds the warp sums in the same order), takes mean = dot * (1 /
hidden) as the reference's mean scales its sum, and adds dx = rstd * (g - n * mean) to the row's
fp32 accumulator in token order, which is the reference's fp32 accumulation into a zeroed table.
The row is then rounded to bf16 and stored with 16-byte stores, so rows no token hits are written
as zeros by the same kernel (the table is written once, never cleared first). Every thread also
accumulates dy * n of its columns over the CTA's tokens in fp32 registers and writes the CTA's
partial row of the norm-weight gradient; ``dw_reduce_kernel`` sums the partial rows per column in
fp64 (8 interleaved slices, combined in order through shared memory), rounds to fp32 (the
reference's sum precision) and then to bf16.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

VOCAB = 65536
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=256, hidden=4096)
_MAX_THREADS = 512
_ROWS_PER_CTA = 64  # table rows per CTA of the main kernel (one fp32 partial row of dW each)
_SLICES = 8  # fp64 partial sums per column in the dW reduction
_COLS = 32  # columns per CTA of the dW reduction
_COMPILED = {}
assert VOCAB % _ROWS_PER_CTA == 0


def _plan(hidden):
    """(vector width, threads per CTA, steps per thread): the multiple of 32 threads (at most 512,
    at least half of that cap) leaving the fewest idle slots; 4096 = 512 threads x 8 columns."""
    vec = 8 if hidden % 8 == 0 else (4 if hidden % 4 == 0 else (2 if hidden % 2 == 0 else 1))
    chunks = hidden // vec
    cap = min(_MAX_THREADS, (chunks + 31) // 32 * 32)
    best = None
    for threads in range(cap, max(cap // 2, 32) - 1, -32):
        steps = (chunks + threads - 1) // threads
        if best is None or steps * threads < best[0]:
            best = (steps * threads, threads, steps)
    return vec, best[1], best[2]


@cute.kernel
def embed_rmsnorm_bwd_kernel(dy: cute.Tensor, h: cute.Tensor, rstd: cute.Tensor, w: cute.Tensor,
                             order: cute.Tensor, starts: cute.Tensor, table: cute.Tensor, partial: cute.Tensor,
                             vec: cutlass.Constexpr, threads: cutlass.Constexpr, steps: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    hidden = cute.size(dy, mode=[1])
    chunks = hidden // vec
    warps = threads // 32
    bounded = chunks % threads != 0
    inv_hidden = 1.0 / hidden

    smem = cutlass.memory.SmemAllocator()
    scratch = smem.allocate_tensor(cutlass.Float32, cute.make_layout(2 * warps), byte_alignment=16)

    gw = cute.zipped_divide(w, (vec,))
    ws = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    acc = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    row_acc = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    ys = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    ns = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    ws.fill(0.0)
    acc.fill(0.0)
    ys.fill(0.0)
    ns.fill(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        if cutlass.const_expr(bounded):
            if c < chunks:
                ws[None, k].store(gw[None, c].load().to(cutlass.Float32))
        else:
            ws[None, k].store(gw[None, c].load().to(cutlass.Float32))

    for vi in cutlass.range(_ROWS_PER_CTA):
        v = cta * _ROWS_PER_CTA + vi
        first = cutlass.Int32(starts[v])
        last = cutlass.Int32(starts[v + 1])
        row_acc.fill(0.0)
        for q in cutlass.range(first, last):
            t = cutlass.Int32(order[q])
            scale = rstd[t]
            gdy = cute.zipped_divide(dy[t, None], (vec,))
            gh = cute.zipped_divide(h[t, None], (vec,))
            for k in cutlass.range_constexpr(steps):
                c = tidx + k * threads
                if cutlass.const_expr(bounded):
                    if c < chunks:
                        ys[None, k].store(gdy[None, c].load().to(cutlass.Float32))
                        ns[None, k].store(gh[None, c].load())
                else:
                    ys[None, k].store(gdy[None, c].load().to(cutlass.Float32))
                    ns[None, k].store(gh[None, c].load())
            s = cutlass.Float32(0.0)
            for k in cutlass.range_constexpr(steps):
                for j in cutlass.range_constexpr(vec):
                    ns[j, k] = ns[j, k] * scale
                    s = s + (ys[j, k] * ws[j, k]) * ns[j, k]
                    acc[j, k] = acc[j, k] + ys[j, k] * ns[j, k]
            s = cute.arch.warp_reduction_sum(s)
            if lane == 0:
                scratch[(q % 2) * warps + warp] = s
            cute.arch.sync_threads()
            total = cutlass.Float32(0.0)
            for i in cutlass.range_constexpr(warps):
                total = total + scratch[(q % 2) * warps + i]
            mean = total * inv_hidden
            for k in cutlass.range_constexpr(steps):
                for j in cutlass.range_constexpr(vec):
                    row_acc[j, k] = row_acc[j, k] + scale * (ys[j, k] * ws[j, k] - ns[j, k] * mean)
        gt = cute.zipped_divide(table[v, None], (vec,))
        for k in cutlass.range_constexpr(steps):
            c = tidx + k * threads
            if cutlass.const_expr(bounded):
                if c < chunks:
                    gt[None, c].store(row_acc[None, k].load().to(cutlass.BFloat16))
            else:
                gt[None, c].store(row_acc[None, k].load().to(cutlass.BFloat16))

    gp = cute.zipped_divide(partial[cta, None], (vec,))
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        if cutlass.const_expr(bounded):
            if c < chunks:
                gp[None, c].store(acc[None, k].load())
        else:
            gp[None, c].store(acc[None, k].load())


@cute.kernel
def dw_reduce_kernel(partial: cute.Tensor, dw: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    ctas = cute.size(partial, mode=[0])
    hidden = cute.size(partial, mode=[1])
    col = bidx * _COLS + tidx % _COLS
    part = tidx // _COLS

    smem = cutlass.memory.SmemAllocator()
    sums = smem.allocate_tensor(cutlass.Float64, cute.make_layout(_SLICES * _COLS), byte_alignment=16)
    s = cutlass.Float64(0.0)
    if col < hidden:
        for p in cutlass.range(part, ctas, _SLICES):
            s = s + cutlass.Float64(partial[p, col])
    sums[tidx] = s
    cute.arch.sync_threads()
    if part == 0:
        total = cutlass.Float64(0.0)
        for i in cutlass.range_constexpr(_SLICES):
            total = total + sums[i * _COLS + tidx]
        if col < hidden:
            dw[col] = cutlass.Float32(total).to(cutlass.BFloat16)


@cute.jit
def embed_rmsnorm_bwd(dy: cute.Tensor, h: cute.Tensor, rstd: cute.Tensor, w: cute.Tensor, order: cute.Tensor,
                      starts: cute.Tensor, table: cute.Tensor, partial: cute.Tensor, stream: cuda.CUstream):
    vec, threads, steps = _plan(cute.size(dy, mode=[1]))
    embed_rmsnorm_bwd_kernel(dy, h, rstd, w, order, starts, table, partial, vec, threads, steps).launch(
        grid=[cute.size(partial, mode=[0]), 1, 1], block=[threads, 1, 1], stream=stream)


@cute.jit
def dw_reduce(partial: cute.Tensor, dw: cute.Tensor, stream: cuda.CUstream):
    hidden = cute.size(partial, mode=[1])
    dw_reduce_kernel(partial, dw).launch(
        grid=[(hidden + _COLS - 1) // _COLS, 1, 1], block=[_SLICES * _COLS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _compile(tokens, hidden, arch=None, ptx_dir=None):
    """Static shapes: the row length fixes the thread plan, so one compile per (tokens, hidden)."""
    ctas = VOCAB // _ROWS_PER_CTA
    vec = _plan(hidden)[0]
    align = {8: 16, 4: 8, 2: 4, 1: 2}[vec]

    def rows(dtype, count, width, alignment):
        return make_fake_compact_tensor(dtype, (count, width), stride_order=(1, 0), assumed_align=alignment)

    dy = rows(cutlass.BFloat16, tokens, hidden, align)
    h = rows(cutlass.Float32, tokens, hidden, min(16, 2 * align))
    rstd = make_fake_compact_tensor(cutlass.Float32, (tokens,), assumed_align=4)
    w = make_fake_compact_tensor(cutlass.BFloat16, (hidden,), assumed_align=align)
    order = make_fake_compact_tensor(cutlass.Int64, (tokens,), assumed_align=8)
    starts = make_fake_compact_tensor(cutlass.Int64, (VOCAB + 1,), assumed_align=8)
    table = rows(cutlass.BFloat16, VOCAB, hidden, align)
    partial = rows(cutlass.Float32, ctas, hidden, min(16, 2 * align))
    dw = make_fake_compact_tensor(cutlass.BFloat16, (hidden,), assumed_align=2)
    main = cute.compile(embed_rmsnorm_bwd, dy, h, rstd, w, order, starts, table, partial, make_fake_stream(),
                        options=_options(arch, ptx_dir))
    reduce = cute.compile(dw_reduce, partial, dw, make_fake_stream(), options=_options(arch, ptx_dir))
    return main, reduce


def solve(grad_output, input_ids, hidden_states_fp32, rstd, norm_weight):
    hidden = grad_output.shape[-1]
    tokens = grad_output.numel() // hidden
    device = grad_output.device
    table = torch.empty(VOCAB, hidden, dtype=torch.bfloat16, device=device)
    dw = torch.empty(hidden, dtype=torch.bfloat16, device=device)
    if tokens == 0:
        table.zero_()
        dw.zero_()
        return table, dw
    vec, threads, steps = _plan(hidden)
    if steps * vec > 32:
        raise ValueError(f"rows of {hidden} do not fit this kernel's registers")
    # index preparation: tokens grouped by id in token order, and each table row's run start
    sorted_ids, order = torch.sort(input_ids.reshape(-1), stable=True)
    starts = torch.searchsorted(sorted_ids, torch.arange(VOCAB + 1, device=device, dtype=sorted_ids.dtype))
    ctas = VOCAB // _ROWS_PER_CTA
    partial = torch.empty(ctas, hidden, dtype=torch.float32, device=device)
    key = (tokens, hidden)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(tokens, hidden)
    main, reduce = _COMPILED[key]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    main(grad_output.contiguous().view(tokens, hidden), hidden_states_fp32.contiguous().view(tokens, hidden),
         rstd.contiguous().view(tokens), norm_weight.contiguous(), order, starts, table, partial, stream)
    reduce(partial, dw, stream)
    return table, dw


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    tokens = WORKLOAD["batch"] * WORKLOAD["seq"]
    return [name for f in _compile(tokens, WORKLOAD["hidden"], arch, ptx_dir) for name in f.kernel_info]
