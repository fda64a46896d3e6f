"""CuTe DSL oracle for problem 62: Qwen3-Next's chunked (64-token) gated delta rule as the source
defines it (raw per-token g in the inter-chunk factors), zero state, bf16 I/O.

The reference's chunk form is rewritten exactly as a step-by-step recurrence. In a chunk with entry
state S0 and within-chunk cumulative decay G, let M_i = sum_(j<=i) exp(G_i - G_j) k_j v'_j^T (the
intra-chunk part, M_i = exp(g_i) M_(i-1) + k_i v'_i^T) and N = sum_j exp(-g_j) k_j v'_j^T. Then the
solve of (I + A) gives v'_i = beta_i (v_i - exp(g_i) k_i.(S0 + M_(i-1))), the output is
o_i = q_i.(exp(g_i) S0 + M_i), and the state leaving the chunk is exp(g_last) (S0 + N) (the
source's exp(g_last - g_j) factors). Every value column j evolves on its own, so:

- One DSL kernel; CTA (batch * value head, column block) with 128 threads; value head h reads q/k
  head h mod (q/k heads) (the reference's tiling). A group of ``lanes`` neighbouring threads (8 for
  head dim 128) owns one column and keeps its S0, M and N in fp64 registers: lane l holds the 2-row
  chunks l, l + lanes, ... (16 rows for 128), so the lanes of a group read contiguous bytes of a
  staged k or q row per 16-byte shared-memory load. A CTA owns 128 / lanes columns.
- Per stage of ``_STAGE`` steps the CTA stages k, q, its columns of v, beta and the decays exp(g),
  exp(-g) (fp64 exps of the bf16 g) in shared memory, then L2-normalises k and q at the
  reference's fp32 rounding points: sum of squares in fp32 (4 interleaved partial sums),
  rsqrt(sum + 1e-6) evaluated in fp64 and rounded to fp32, x * r rounded to fp32, for q then
  * scale rounded to fp32. The normalised values are kept in shared memory as fp64.
- The recurrence runs in fp64: a step-by-step fp32 recurrence rounds its state every token where
  the reference rounds once per chunk (problem 74's emulation of that fp32 form reached about twice
  the reference's error against the grader's three times); fp64 keeps its own error negligible.
  Dot products: 4 interleaved partial sums per lane, added pairwise, then butterfly shuffles inside
  the lane group. o is rounded to fp32 and then to bf16. Padded steps of a partial last chunk do
  not exist here (only the final state would see them, and it is not returned).

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 9): 2.94 ms against the
eager reference's 2.59 ms (0.88x). The grader's profiled call is this one kernel (2.79 ms). Its
arithmetic is small (about 12 GFLOP of fp64 at the graded workload, a third of a millisecond at the
H100's fp64 rate), so the time is that of the 256 dependent steps each of its 2,048 CTAs runs,
about 11 us a step over the whole grid: the staged shared-memory reads, the butterfly shuffles and
the barriers of every step. The TIRx oracle of the same plan takes 1.71 ms (1.09x) in the same run, so
the gap to eager lies in this kernel's generated code, not in the plan; which of the step's
instructions the CuTe DSL build makes slower has not been profiled. The route that would beat
eager: first the TIRx kernel's step cost (its 6.7 us a step would give about 1.8 ms); beyond it, the
chunk form itself (the reference's), whose 64 steps of a chunk become matrix products on the tensor
cores, so each chunk costs a few dependent GEMMs instead of 64 serial steps.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=16, qk_heads=4, v_heads=16, seqlen=256, head_dim=128)
_CHUNK = 64  # the reference's chunk: the state S0 is refreshed at its ends
_THREADS = 128
_STAGE = 16  # time steps staged in shared memory at once
_EPS = 1e-6
_ACCS = 4  # interleaved partial sums of a lane's dot-product terms
_COMPILED = {}


def _plan(head_dim):
    """(vector width: 2 fp64 = one 16-byte shared-memory load, lanes per column: a power of two <= 8
    dividing the chunk count, chunks per lane)."""
    vec = 2 if head_dim % 2 == 0 else 1
    chunks = head_dim // vec
    lanes = 1
    while lanes * 2 <= min(8, chunks) and chunks % (lanes * 2) == 0:
        lanes *= 2
    return vec, lanes, chunks // lanes


def _partials(terms):
    """Sum (a, b) products with ``_ACCS`` interleaved partial sums (term n goes to n mod _ACCS), in fp64."""
    sums = [None] * min(_ACCS, len(terms))
    for n, (a, b) in enumerate(terms):
        m = n % len(sums)
        sums[m] = a * b if sums[m] is None else sums[m] + a * b
    return _pairwise(sums)


def _pairwise(values):
    """Sum a list pairwise ((a + b) + (c + d)), the order the partial sums are combined in."""
    while len(values) > 1:
        values = [values[i] + values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


@cute.kernel
def gdr_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, g: cute.Tensor, beta: cute.Tensor,
               o: cute.Tensor, scale: cutlass.Float32, vec: cutlass.Constexpr, lanes: cutlass.Constexpr,
               steps: cutlass.Constexpr, head_dim: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bh, blk, _ = cute.arch.block_idx()
    qk_heads = cute.size(q, mode=[1])
    heads = cute.size(v, mode=[1])
    seqlen = cute.size(v, mode=[2])
    cols = _THREADS // lanes
    bi = bh // heads
    h = bh - bi * heads
    hq = h % qk_heads
    part = tidx % lanes
    group = tidx // lanes
    col_raw = blk * cols + group
    valid = col_raw < head_dim
    col = cutlass.select_(valid, col_raw, head_dim - 1)

    smem = cutlass.memory.SmemAllocator()
    kq = smem.allocate_tensor(cutlass.Float64, cute.make_ordered_layout((2, _STAGE, head_dim), order=(2, 1, 0)),
                              byte_alignment=16)
    vs = smem.allocate_tensor(cutlass.Float64, cute.make_ordered_layout((_STAGE, cols), order=(1, 0)),
                              byte_alignment=16)
    bs = smem.allocate_tensor(cutlass.Float64, cute.make_layout((_STAGE,)), byte_alignment=16)
    es = smem.allocate_tensor(cutlass.Float64, cute.make_ordered_layout((2, _STAGE), order=(1, 0)),
                              byte_alignment=16)
    rinv = smem.allocate_tensor(cutlass.Float32, cute.make_layout((2 * _STAGE,)), byte_alignment=16)

    # This group's column of S0, M and N, in fp64 registers, from zero.
    s0 = cute.make_rmem_tensor((vec, steps), cutlass.Float64)
    s0.fill(0.0)
    mm = cute.make_rmem_tensor((vec, steps), cutlass.Float64)
    mm.fill(0.0)
    nn = cute.make_rmem_tensor((vec, steps), cutlass.Float64)
    nn.fill(0.0)
    kr = cute.make_rmem_tensor((vec, steps), cutlass.Float64)

    for t0 in cutlass.range(0, seqlen, _STAGE, unroll=1):
        # Stage k, q (rows t0 .. t0 + _STAGE, zeros past the end), this CTA's v columns, beta and decays.
        for idx in cutlass.range(tidx, 2 * _STAGE * head_dim, _THREADS, unroll=1):
            which = idx // (_STAGE * head_dim)
            rem = idx - which * (_STAGE * head_dim)
            s = rem // head_dim
            i = rem - s * head_dim
            val = cutlass.Float64(0.0)
            if t0 + s < seqlen:
                if which == 0:
                    val = k[bi, hq, t0 + s, i].to(cutlass.Float64)
                else:
                    val = q[bi, hq, t0 + s, i].to(cutlass.Float64)
            kq[which, s, i] = val
        for idx in cutlass.range(tidx, _STAGE * cols, _THREADS, unroll=1):
            s = idx // cols
            c = idx - s * cols
            val = cutlass.Float64(0.0)
            if t0 + s < seqlen and blk * cols + c < head_dim:
                val = v[bi, h, t0 + s, blk * cols + c].to(cutlass.Float64)
            vs[s, c] = val
        if tidx < _STAGE:
            val = cutlass.Float64(0.0)
            lg = cutlass.Float64(0.0)
            if t0 + tidx < seqlen:
                val = beta[bi, h, t0 + tidx].to(cutlass.Float64)
                lg = g[bi, h, t0 + tidx].to(cutlass.Float64)
            bs[tidx] = val
            es[0, tidx] = cute.math.exp(lg)
            es[1, tidx] = cute.math.exp(-lg)
        cute.arch.sync_threads()
        # One thread per k/q row: the fp32 sum of squares and the correctly rounded rsqrt.
        for row in cutlass.range(tidx, 2 * _STAGE, _THREADS, unroll=1):
            which = row // _STAGE
            s = row - which * _STAGE
            sums = [cutlass.Float32(0.0) for _ in range(4)]
            for i in cutlass.range_constexpr(head_dim):
                x = kq[which, s, i].to(cutlass.Float32)
                sums[i % 4] = sums[i % 4] + x * x
            total = _pairwise(sums) + _EPS
            rinv[row] = (1.0 / cute.math.sqrt(total.to(cutlass.Float64))).to(cutlass.Float32)
        cute.arch.sync_threads()
        for idx in cutlass.range(tidx, 2 * _STAGE * head_dim, _THREADS, unroll=1):
            which = idx // (_STAGE * head_dim)
            rem = idx - which * (_STAGE * head_dim)
            s = rem // head_dim
            i = rem - s * head_dim
            y = kq[which, s, i].to(cutlass.Float32) * rinv[which * _STAGE + s]
            if which == 1:
                y = y * scale
            kq[which, s, i] = y.to(cutlass.Float64)
        cute.arch.sync_threads()

        n_steps = cutlass.select_(seqlen - t0 < _STAGE, seqlen - t0, _STAGE)
        for s in cutlass.range(n_steps, unroll=1):
            eg = es[0, s]
            terms = []
            for j in cutlass.range_constexpr(steps):
                for e in cutlass.range_constexpr(vec):
                    kr[e, j] = kq[0, s, (j * lanes + part) * vec + e]
                    terms.append((kr[e, j], s0[e, j] + mm[e, j]))
            old = eg * cute.arch.warp_reduction(_partials(terms), lambda a, b: a + b, threads_in_group=lanes)
            u = bs[s] * (vs[s, group] - old)
            un = es[1, s] * u
            terms = []
            for j in cutlass.range_constexpr(steps):
                for e in cutlass.range_constexpr(vec):
                    mm[e, j] = eg * mm[e, j] + kr[e, j] * u
                    nn[e, j] = nn[e, j] + kr[e, j] * un
                    terms.append((kq[1, s, (j * lanes + part) * vec + e], eg * s0[e, j] + mm[e, j]))
            out = cute.arch.warp_reduction(_partials(terms), lambda a, b: a + b, threads_in_group=lanes)
            if valid and part == 0:
                o[bi, t0 + s, h, col] = out.to(cutlass.Float32).to(cutlass.BFloat16)
            if (t0 + s) % _CHUNK == _CHUNK - 1:  # chunk end: S0 <- exp(g_last) (S0 + N); M, N <- 0
                for j in cutlass.range_constexpr(steps):
                    for e in cutlass.range_constexpr(vec):
                        s0[e, j] = eg * (s0[e, j] + nn[e, j])
                        mm[e, j] = cutlass.Float64(0.0)
                        nn[e, j] = cutlass.Float64(0.0)
        cute.arch.sync_threads()


@cute.jit
def gdr(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, g: cute.Tensor, beta: cute.Tensor, o: cute.Tensor,
        scale: cutlass.Float32, stream: cuda.CUstream):
    batch = cute.size(v, mode=[0])
    heads = cute.size(v, mode=[1])
    head_dim = cute.size(q, mode=[3])
    vec, lanes, steps = _plan(head_dim)
    cols = _THREADS // lanes
    gdr_kernel(q, k, v, g, beta, o, scale, vec, lanes, steps, head_dim).launch(
        grid=[batch * heads, (head_dim + cols - 1) // cols, 1], block=[_THREADS, 1, 1], stream=stream)


def _compile(batch, qk_heads, v_heads, seqlen, head_dim, arch=None, ptx_dir=None):
    def fake(dtype, *shape):
        return make_fake_compact_tensor(dtype, shape, stride_order=tuple(reversed(range(len(shape)))),
                                        assumed_align=16)

    bf16 = cutlass.BFloat16
    qk = fake(bf16, batch, qk_heads, seqlen, head_dim)
    val = fake(bf16, batch, v_heads, seqlen, head_dim)
    gate = fake(bf16, batch, v_heads, seqlen)
    out = fake(bf16, batch, seqlen, v_heads, head_dim)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(gdr, qk, qk, val, gate, gate, out, 1.0, make_fake_stream(), options=options)


def solve(query, key, value, g, beta, scale):
    batch, qk_heads, seqlen, head_dim = query.shape
    v_heads = value.shape[1]
    ins = [t.contiguous() for t in (query, key, value, g, beta)]
    o = torch.empty(batch, seqlen, v_heads, head_dim, dtype=torch.bfloat16, device=value.device)
    if batch * seqlen * v_heads * head_dim == 0:
        return o
    key = (batch, qk_heads, v_heads, seqlen, head_dim)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    _COMPILED[key](*ins, o, float(scale), stream)
    return o


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["batch"], w["qk_heads"], w["v_heads"], w["seqlen"], w["head_dim"], arch,
                         ptx_dir).kernel_info)
