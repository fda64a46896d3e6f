"""CuTe DSL oracle for problem 28: residual add fused with RMSNorm (hidden 4096), bf16 in and out.

The whole computation is one DSL kernel, one row per CTA. Each thread loads ``_VEC`` contiguous bf16
of hidden_states and residual per step (16-byte loads), forms x = h + r in fp32 and keeps it in
registers; the sum of x^2 is reduced across the warp by shuffles and across warps through shared
memory (every thread adds the per-warp sums in the same order, so all agree). Then
y = (x * rsqrt(sum / hidden + eps)) * weight in fp32, rounded to bf16 once at the end, which is the
reference's order of rounding.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

EPS = 1e-5
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=14509, hidden=4096)
_MAX_THREADS = 256
_COMPILED = {}


def _plan(hidden):
    """(vector width, threads per CTA, steps per thread, whether the last step needs a bound check)."""
    vec = 8 if hidden % 8 == 0 else 1
    chunks = hidden // vec
    threads = min(_MAX_THREADS, (chunks + 31) // 32 * 32)
    steps = (chunks + threads - 1) // threads
    return vec, threads, steps, chunks % threads != 0


@cute.kernel
def fused_add_rmsnorm_kernel(h: cute.Tensor, r: cute.Tensor, w: cute.Tensor, y: cute.Tensor,
                             vec: cutlass.Constexpr, threads: cutlass.Constexpr,
                             steps: cutlass.Constexpr, bounded: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    hidden = cute.size(h, mode=[1])
    chunks = hidden // vec
    warps = threads // 32

    smem = cutlass.memory.SmemAllocator()
    partial = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)

    gh = cute.zipped_divide(h[row, None], (vec,))
    gr = cute.zipped_divide(r[row, None], (vec,))
    gw = cute.zipped_divide(w, (vec,))
    gy = cute.zipped_divide(y[row, None], (vec,))

    xs = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    xs.fill(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        if cutlass.const_expr(bounded):
            if c < chunks:
                xs[None, k].store(gh[None, c].load().to(cutlass.Float32)
                                  + gr[None, c].load().to(cutlass.Float32))
        else:
            xs[None, k].store(gh[None, c].load().to(cutlass.Float32)
                              + gr[None, c].load().to(cutlass.Float32))

    sq = cutlass.Float32(0.0)
    for k in cutlass.range_constexpr(steps):
        for j in cutlass.range_constexpr(vec):
            sq = sq + xs[j, k] * xs[j, k]
    sq = cute.arch.warp_reduction_sum(sq)
    if lane == 0:
        partial[warp] = sq
    cute.arch.sync_threads()
    total = cutlass.Float32(0.0)
    for i in cutlass.range_constexpr(warps):
        total = total + partial[i]
    rstd = cute.math.rsqrt(total / hidden + EPS)

    ys = cute.make_rmem_tensor((vec,), cutlass.Float32)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        if cutlass.const_expr(bounded):
            if c < chunks:
                ys.store(gw[None, c].load().to(cutlass.Float32))
                for j in cutlass.range_constexpr(vec):
                    ys[j] = (xs[j, k] * rstd) * ys[j]
                gy[None, c].store(ys.load().to(cutlass.BFloat16))
        else:
            ys.store(gw[None, c].load().to(cutlass.Float32))
            for j in cutlass.range_constexpr(vec):
                ys[j] = (xs[j, k] * rstd) * ys[j]
            gy[None, c].store(ys.load().to(cutlass.BFloat16))


@cute.jit
def fused_add_rmsnorm(h: cute.Tensor, r: cute.Tensor, w: cute.Tensor, y: cute.Tensor,
                      stream: cuda.CUstream):
    tokens = cute.size(h, mode=[0])
    vec, threads, steps, bounded = _plan(cute.size(h, mode=[1]))
    fused_add_rmsnorm_kernel(h, r, w, y, vec, threads, steps, bounded).launch(
        grid=[tokens, 1, 1], block=[threads, 1, 1], stream=stream)


def _compile(tokens, hidden, arch=None, ptx_dir=None):
    """Static shapes: the row length fixes the thread plan, so one compile per (tokens, hidden)."""
    rows = [make_fake_compact_tensor(cutlass.BFloat16, (tokens, hidden), stride_order=(1, 0),
                                     assumed_align=16) for _ in range(2)]
    weight = make_fake_compact_tensor(cutlass.BFloat16, (hidden,), assumed_align=16)
    out = make_fake_compact_tensor(cutlass.BFloat16, (tokens, hidden), stride_order=(1, 0),
                                   assumed_align=16)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(fused_add_rmsnorm, *rows, weight, out, make_fake_stream(), options=options)


def solve(hidden_states, residual, weight):
    tokens, hidden = hidden_states.shape
    h, r, w = hidden_states.contiguous(), residual.contiguous(), weight.contiguous()
    y = torch.empty_like(h)
    if tokens == 0:
        return y
    key = (tokens, hidden)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(tokens, hidden)
    _COMPILED[key](h, r, w, y, cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return y


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    return list(_compile(WORKLOAD["tokens"], WORKLOAD["hidden"], arch, ptx_dir).kernel_info)
