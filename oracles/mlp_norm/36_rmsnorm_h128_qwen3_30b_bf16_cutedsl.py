"""CuTe DSL oracle for problem 36: RMSNorm over rows of 128 (per-head q/k norm), bf16 in and out.

The whole computation is one DSL kernel. A row of 128 bf16 is only 256 bytes, so one CTA per row
would leave most threads idle; instead a group of ``lanes`` threads (16 for hidden 128) owns a row
and each thread loads ``vec`` contiguous bf16 (8, one 16-byte load). The sum of squares is reduced
inside the group by butterfly shuffles, so no shared memory or barrier is needed, and a 256-thread
CTA normalises 16 rows. y = (x * rsqrt(sum / hidden + eps)) * weight is formed in fp32 and rounded
to bf16 once, the reference's order. Groups past the last row still take part in the shuffles (the
full-warp mask needs every lane) with zeros, and only their loads and stores are skipped.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

EPS = 1e-6
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(rows=520128, hidden=128)
_THREADS = 256
_COMPILED = {}


def _plan(hidden):
    """(vector width, threads per row: a power of two <= 32, steps per thread, ragged last step)."""
    vec = 8 if hidden % 8 == 0 else 1
    chunks = hidden // vec
    lanes = 1
    while lanes < min(chunks, 32):
        lanes *= 2
    steps = (chunks + lanes - 1) // lanes
    return vec, lanes, steps, chunks % lanes != 0


@cute.kernel
def rmsnorm_rows_kernel(x: cute.Tensor, w: cute.Tensor, y: cute.Tensor, vec: cutlass.Constexpr,
                        lanes: cutlass.Constexpr, steps: cutlass.Constexpr, ragged: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    rows = cute.size(x, mode=[0])
    hidden = cute.size(x, mode=[1])
    chunks = hidden // vec
    row = bidx * (_THREADS // lanes) + tidx // lanes
    part = tidx % lanes
    valid = row < rows
    safe_row = row
    if not valid:
        safe_row = rows - 1

    gx = cute.zipped_divide(x[safe_row, None], (vec,))
    gw = cute.zipped_divide(w, (vec,))
    gy = cute.zipped_divide(y[safe_row, None], (vec,))

    xs = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    xs.fill(0.0)
    for k in cutlass.range_constexpr(steps):
        c = part + k * lanes
        if cutlass.const_expr(ragged):
            if valid and c < chunks:
                xs[None, k].store(gx[None, c].load().to(cutlass.Float32))
        else:
            if valid:
                xs[None, k].store(gx[None, c].load().to(cutlass.Float32))

    sq = cutlass.Float32(0.0)
    for k in cutlass.range_constexpr(steps):
        for j in cutlass.range_constexpr(vec):
            sq = sq + xs[j, k] * xs[j, k]
    sq = cute.arch.warp_reduction(sq, lambda a, b: a + b, threads_in_group=lanes)
    rstd = cute.math.rsqrt(sq / hidden + EPS)

    ys = cute.make_rmem_tensor((vec,), cutlass.Float32)
    for k in cutlass.range_constexpr(steps):
        c = part + k * lanes
        ok = valid
        if cutlass.const_expr(ragged):
            ok = valid and c < chunks
        if ok:
            ys.store(gw[None, c].load().to(cutlass.Float32))
            for j in cutlass.range_constexpr(vec):
                ys[j] = (xs[j, k] * rstd) * ys[j]
            gy[None, c].store(ys.load().to(cutlass.BFloat16))


@cute.jit
def rmsnorm_rows(x: cute.Tensor, w: cute.Tensor, y: cute.Tensor, stream: cuda.CUstream):
    rows = cute.size(x, mode=[0])
    vec, lanes, steps, ragged = _plan(cute.size(x, mode=[1]))
    per_cta = _THREADS // lanes
    rmsnorm_rows_kernel(x, w, y, vec, lanes, steps, ragged).launch(
        grid=[(rows + per_cta - 1) // per_cta, 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _compile(hidden, arch=None, ptx_dir=None):
    """The row count is a runtime symbol; the row length fixes the thread plan (one compile each)."""
    rows = cute.sym_int()
    x = make_fake_compact_tensor(cutlass.BFloat16, (rows, hidden), stride_order=(1, 0), assumed_align=16)
    w = make_fake_compact_tensor(cutlass.BFloat16, (hidden,), assumed_align=16)
    y = make_fake_compact_tensor(cutlass.BFloat16, (rows, hidden), stride_order=(1, 0), assumed_align=16)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(rmsnorm_rows, x, w, y, make_fake_stream(), options=options)


def solve(hidden_states, weight):
    rows, hidden = hidden_states.shape
    x, w = hidden_states.contiguous(), weight.contiguous()
    y = torch.empty_like(x)
    if rows == 0:
        return y
    if hidden not in _COMPILED:
        _COMPILED[hidden] = _compile(hidden)
    _COMPILED[hidden](x, w, y, cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return y


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    return list(_compile(WORKLOAD["hidden"], arch, ptx_dir).kernel_info)
