"""CuTe DSL oracle for problem 38: backward of residual add + RMSNorm (hidden 2560), dx in bf16, dW in fp32.

Two DSL kernels. ``rmsnorm_bwd_kernel``: each CTA owns ``_CHUNK`` consecutive tokens and walks them
two rows per step. A thread owns the same ``vec`` contiguous columns in every row (320 threads x 8
columns cover a row of 2560), loads them with 16-byte loads (dy in bf16, n in fp32), and forms
g = dy * w in fp32. The row's dot(g, n) is reduced by butterfly shuffles inside each warp and then
through shared memory across warps (double-buffered by step parity, one barrier per step; every
thread adds the warp sums in the same order); mean = dot * (1 / hidden), as the reference's mean
scales its sum; dx = rstd * (g - n * mean) is rounded to bf16 once and stored with 16-byte stores.
The same tensor is returned as the hidden-state and the residual gradient (the reference returns
equal values). The weight gradient needs a sum over all tokens: every thread accumulates dy * n
of its columns over the CTA's tokens in fp32 registers and writes the CTA's partial row.
``dw_reduce_kernel`` then sums the partial rows per column in fp64 (8 interleaved slices per
column, combined in order through shared memory) and rounds to fp32 once, so the long sum over
262144 tokens adds no error beyond the per-CTA fp32 partials.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=32, seq=8192, hidden=2560)
_MAX_THREADS = 512
_CHUNK = 64  # tokens per CTA of the main kernel (one fp32 partial row of dW each)
_ROWS = 2  # rows in flight per step
_SLICES = 8  # fp64 partial sums per column in the dW reduction
_COLS = 32  # columns per CTA of the dW reduction
_COMPILED = {}


def _plan(hidden):
    """(vector width, threads per CTA, steps per thread): the multiple of 32 threads (at most 512,
    at least half of that cap) leaving the fewest idle slots; 2560 = 320 threads x 8 columns."""
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
def rmsnorm_bwd_kernel(dy: cute.Tensor, n: cute.Tensor, rstd: cute.Tensor, w: cute.Tensor, dx: cute.Tensor,
                       partial: cute.Tensor, vec: cutlass.Constexpr, threads: cutlass.Constexpr,
                       steps: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    tokens = cute.size(dy, mode=[0])
    hidden = cute.size(dy, mode=[1])
    chunks = hidden // vec
    warps = threads // 32
    bounded = chunks % threads != 0
    inv_hidden = 1.0 / hidden

    smem = cutlass.memory.SmemAllocator()
    scratch = smem.allocate_tensor(cutlass.Float32, cute.make_layout(2 * _ROWS * warps), byte_alignment=16)

    gw = cute.zipped_divide(w, (vec,))
    ws = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    acc = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    ys = cute.make_rmem_tensor((vec, steps, _ROWS), cutlass.Float32)
    ns = cute.make_rmem_tensor((vec, steps, _ROWS), cutlass.Float32)
    out = cute.make_rmem_tensor((vec,), cutlass.Float32)
    ws.fill(0.0)
    acc.fill(0.0)
    ys.fill(0.0)
    ns.fill(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        if cutlass.const_expr(bounded):
            if c < chunks:
                ws[None, k].store(gw[None, c].load())
        else:
            ws[None, k].store(gw[None, c].load())

    for it in cutlass.range(_CHUNK // _ROWS):
        parity = it % 2
        for r in cutlass.range_constexpr(_ROWS):
            row = cta * _CHUNK + it * _ROWS + r
            if row < tokens:
                gdy = cute.zipped_divide(dy[row, None], (vec,))
                gn = cute.zipped_divide(n[row, None], (vec,))
                for k in cutlass.range_constexpr(steps):
                    c = tidx + k * threads
                    if cutlass.const_expr(bounded):
                        if c < chunks:
                            ys[None, k, r].store(gdy[None, c].load().to(cutlass.Float32))
                            ns[None, k, r].store(gn[None, c].load())
                    else:
                        ys[None, k, r].store(gdy[None, c].load().to(cutlass.Float32))
                        ns[None, k, r].store(gn[None, c].load())
            else:
                for k in cutlass.range_constexpr(steps):
                    for j in cutlass.range_constexpr(vec):
                        ys[j, k, r] = cutlass.Float32(0.0)
                        ns[j, k, r] = cutlass.Float32(0.0)
        for r in cutlass.range_constexpr(_ROWS):
            s = cutlass.Float32(0.0)
            for k in cutlass.range_constexpr(steps):
                for j in cutlass.range_constexpr(vec):
                    s = s + (ys[j, k, r] * ws[j, k]) * ns[j, k, r]
                    acc[j, k] = acc[j, k] + ys[j, k, r] * ns[j, k, r]
            s = cute.arch.warp_reduction_sum(s)
            if lane == 0:
                scratch[(parity * _ROWS + r) * warps + warp] = s
        cute.arch.sync_threads()
        for r in cutlass.range_constexpr(_ROWS):
            row = cta * _CHUNK + it * _ROWS + r
            total = cutlass.Float32(0.0)
            for i in cutlass.range_constexpr(warps):
                total = total + scratch[(parity * _ROWS + r) * warps + i]
            mean = total * inv_hidden
            if row < tokens:
                scale = rstd[row]
                gdx = cute.zipped_divide(dx[row, None], (vec,))
                for k in cutlass.range_constexpr(steps):
                    c = tidx + k * threads
                    for j in cutlass.range_constexpr(vec):
                        out[j] = scale * (ys[j, k, r] * ws[j, k] - ns[j, k, r] * mean)
                    if cutlass.const_expr(bounded):
                        if c < chunks:
                            gdx[None, c].store(out.load().to(cutlass.BFloat16))
                    else:
                        gdx[None, c].store(out.load().to(cutlass.BFloat16))

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
            dw[col] = cutlass.Float32(total)


@cute.jit
def rmsnorm_bwd(dy: cute.Tensor, n: cute.Tensor, rstd: cute.Tensor, w: cute.Tensor, dx: cute.Tensor,
                partial: cute.Tensor, stream: cuda.CUstream):
    vec, threads, steps = _plan(cute.size(dy, mode=[1]))
    rmsnorm_bwd_kernel(dy, n, rstd, w, dx, partial, vec, threads, steps).launch(
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
    ctas = (tokens + _CHUNK - 1) // _CHUNK
    vec = _plan(hidden)[0]
    align = {8: 16, 4: 8, 2: 4, 1: 2}[vec]

    def rows(dtype, count, width, alignment):
        return make_fake_compact_tensor(dtype, (count, width), stride_order=(1, 0), assumed_align=alignment)

    dy = rows(cutlass.BFloat16, tokens, hidden, align)
    n = rows(cutlass.Float32, tokens, hidden, min(16, 2 * align))
    rstd = make_fake_compact_tensor(cutlass.Float32, (tokens,), assumed_align=4)
    w = make_fake_compact_tensor(cutlass.Float32, (hidden,), assumed_align=min(16, 2 * align))
    dx = rows(cutlass.BFloat16, tokens, hidden, align)
    partial = rows(cutlass.Float32, ctas, hidden, min(16, 2 * align))
    dw = make_fake_compact_tensor(cutlass.Float32, (hidden,), assumed_align=4)
    main = cute.compile(rmsnorm_bwd, dy, n, rstd, w, dx, partial, make_fake_stream(),
                        options=_options(arch, ptx_dir))
    reduce = cute.compile(dw_reduce, partial, dw, make_fake_stream(), options=_options(arch, ptx_dir))
    return main, reduce


def solve(grad_output, normalized, rstd, weight):
    hidden = normalized.shape[-1]
    tokens = normalized.numel() // hidden
    dx = torch.empty(normalized.shape, dtype=torch.bfloat16, device=normalized.device)
    dw = torch.empty(hidden, dtype=torch.float32, device=normalized.device)
    if tokens == 0:
        dw.zero_()
        return dx, dx, dw
    vec, threads, steps = _plan(hidden)
    if steps * vec > 32:
        raise ValueError(f"rows of {hidden} do not fit this kernel's registers")
    ctas = (tokens + _CHUNK - 1) // _CHUNK
    partial = torch.empty(ctas, hidden, dtype=torch.float32, device=normalized.device)
    key = (tokens, hidden)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(tokens, hidden)
    main, reduce = _COMPILED[key]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    main(grad_output.contiguous().view(tokens, hidden), normalized.contiguous().view(tokens, hidden),
         rstd.contiguous().view(tokens), weight.contiguous(), dx.view(tokens, hidden), partial, stream)
    reduce(partial, dw, stream)
    return dx, dx, dw


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    tokens = WORKLOAD["batch"] * WORKLOAD["seq"]
    return [name for f in _compile(tokens, WORKLOAD["hidden"], arch, ptx_dir) for name in f.kernel_info]
