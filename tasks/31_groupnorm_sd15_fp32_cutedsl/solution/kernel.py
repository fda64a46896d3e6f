"""CuTe DSL oracle for problem 31: GroupNorm (32 groups) over NCHW fp32, affine per channel.

The whole computation is one DSL kernel with one CTA per (sample, group). A group's channels are
contiguous in NCHW, so a group is one contiguous row of ``channels / 32 * height * width`` floats
(2560 at the graded shape). Each thread loads ``vec`` contiguous floats per step (16-byte loads
when the row length allows) and keeps its share of the row in registers. The mean is a two-level
reduction, butterfly shuffles inside each warp and then the per-warp sums added in warp order
through shared memory, divided by the row length (IEEE division). The variance is then the same
reduction of the squared centred values (out-of-row slots contribute zero), so mean and variance
are the reference's two-pass form, not E[x^2] - mean^2. rstd = 1 / sqrt(var + eps) with a
correctly rounded square root and division (no fast math: the fp32 output is judged within a few
ulp, so an approximate rsqrt is not accurate enough), and y = (x - mean) * rstd * weight[c] +
bias[c], with c the channel of the element, stored with 16-byte stores.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

GROUPS = 32
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=32, channels=1280, height=8, width=8)
_MAX_THREADS = 256
_MAX_PER_THREAD = 64  # fp32 values a thread keeps in registers
_COMPILED = {}


def _plan(row):
    """(vector width, threads per CTA, steps per thread) for a group row of ``row`` floats.

    The thread count is the multiple of 32 (at most 256, at least half of that cap) that leaves the
    fewest idle slots, so 640 vectors of the graded row become 160 threads x 4 steps exactly.
    """
    vec = 4 if row % 4 == 0 else (2 if row % 2 == 0 else 1)
    chunks = row // vec
    cap = min(_MAX_THREADS, (chunks + 31) // 32 * 32)
    best = None
    for threads in range(cap, max(cap // 2, 32) - 1, -32):
        steps = (chunks + threads - 1) // threads
        if best is None or steps * threads < best[0]:
            best = (steps * threads, threads, steps)
    return vec, best[1], best[2]


@cute.kernel
def groupnorm_kernel(x: cute.Tensor, w: cute.Tensor, b: cute.Tensor, y: cute.Tensor, eps: cutlass.Float32,
                     per_group: cutlass.Constexpr, hw: cutlass.Constexpr, vec: cutlass.Constexpr,
                     threads: cutlass.Constexpr, steps: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    length = cute.size(x, mode=[1])
    chunks = length // vec
    warps = threads // 32
    bounded = chunks % threads != 0
    uniform = hw % vec == 0  # a vector never straddles two channels
    first_channel = (row % GROUPS) * per_group

    smem = cutlass.memory.SmemAllocator()
    part_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)
    part_sq = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)

    gx = cute.zipped_divide(x[row, None], (vec,))
    gy = cute.zipped_divide(y[row, None], (vec,))

    xs = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    xs.fill(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        if cutlass.const_expr(bounded):
            if c < chunks:
                xs[None, k].store(gx[None, c].load())
        else:
            xs[None, k].store(gx[None, c].load())

    s = cutlass.Float32(0.0)
    for k in cutlass.range_constexpr(steps):
        for j in cutlass.range_constexpr(vec):
            s = s + xs[j, k]
    s = cute.arch.warp_reduction_sum(s)
    if lane == 0:
        part_sum[warp] = s
    cute.arch.sync_threads()
    total = cutlass.Float32(0.0)
    for i in cutlass.range_constexpr(warps):
        total = total + part_sum[i]
    mean = total / cutlass.Float32(length)

    q = cutlass.Float32(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        for j in cutlass.range_constexpr(vec):
            d = xs[j, k] - mean
            if cutlass.const_expr(bounded):
                if c >= chunks:
                    d = cutlass.Float32(0.0)
            xs[j, k] = d
            q = q + d * d
    q = cute.arch.warp_reduction_sum(q)
    if lane == 0:
        part_sq[warp] = q
    cute.arch.sync_threads()
    total_sq = cutlass.Float32(0.0)
    for i in cutlass.range_constexpr(warps):
        total_sq = total_sq + part_sq[i]
    var = total_sq / cutlass.Float32(length)
    rstd = cutlass.Float32(1.0) / cute.math.sqrt(var + eps, fastmath=False)

    ys = cute.make_rmem_tensor((vec,), cutlass.Float32)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            if cutlass.const_expr(uniform):
                ch = first_channel + (c * vec) // hw
                wc = w[ch]
                bc = b[ch]
                for j in cutlass.range_constexpr(vec):
                    ys[j] = (xs[j, k] * rstd) * wc + bc
            else:
                for j in cutlass.range_constexpr(vec):
                    ch = first_channel + (c * vec + j) // hw
                    ys[j] = (xs[j, k] * rstd) * w[ch] + b[ch]
            gy[None, c].store(ys.load())


@cute.jit
def groupnorm(x: cute.Tensor, w: cute.Tensor, b: cute.Tensor, y: cute.Tensor, eps: cutlass.Float32,
              per_group: cutlass.Constexpr, hw: cutlass.Constexpr, stream: cuda.CUstream):
    rows = cute.size(x, mode=[0])
    vec, threads, steps = _plan(cute.size(x, mode=[1]))
    groupnorm_kernel(x, w, b, y, eps, per_group, hw, vec, threads, steps).launch(
        grid=[rows, 1, 1], block=[threads, 1, 1], stream=stream)


def _compile(batch, channels, height, width, arch=None, ptx_dir=None):
    """Static shapes: the group row length fixes the thread plan, so one compile per shape."""
    rows, per_group, hw = batch * GROUPS, channels // GROUPS, height * width
    length = per_group * hw
    align = 16 if length % 4 == 0 else (8 if length % 2 == 0 else 4)
    x = make_fake_compact_tensor(cutlass.Float32, (rows, length), stride_order=(1, 0), assumed_align=align)
    w = make_fake_compact_tensor(cutlass.Float32, (channels,), assumed_align=4)
    b = make_fake_compact_tensor(cutlass.Float32, (channels,), assumed_align=4)
    y = make_fake_compact_tensor(cutlass.Float32, (rows, length), stride_order=(1, 0), assumed_align=align)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(groupnorm, x, w, b, y, cutlass.Float32(1e-5), per_group, hw, make_fake_stream(),
                        options=options)


def solve(x, weight, bias, eps):
    n, c, h, w = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel() == 0:
        return out
    length = c // GROUPS * h * w
    vec, threads, steps = _plan(length)
    if steps * vec > _MAX_PER_THREAD:
        raise ValueError(f"group of {length} values does not fit this kernel's registers")
    key = (n, c, h, w)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(n, c, h, w)
    rows = x.contiguous().view(n * GROUPS, length)
    _COMPILED[key](rows, weight.contiguous(), bias.contiguous(), out.view(n * GROUPS, length), float(eps),
                   cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    return list(_compile(WORKLOAD["batch"], WORKLOAD["channels"], WORKLOAD["height"], WORKLOAD["width"],
                         arch, ptx_dir).kernel_info)
