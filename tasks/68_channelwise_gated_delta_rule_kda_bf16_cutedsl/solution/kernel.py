"""CuTe DSL oracle for problem 68: Kimi Delta Attention (delta rule with a per-key-channel decay)
from a zero state, bf16 I/O, layout [B, T, H, D].

The whole computation is one DSL kernel that runs the recurrence step by step (the reference's
chunked form is the same recurrence regrouped). With S [d_k, d_v], every column S[:, j] evolves on
its own: S[:, j] *= exp(g_t) (per row i); u_j = beta_t (v_t[j] - k_t.S[:, j]); S[:, j] += k_t u_j;
o_t[j] = q_t.S[:, j]. So:

- CTA (batch*head, column block) with 128 threads; a group of ``lanes`` neighbouring threads (8 for
  head dim 128) owns one column and keeps it in registers for the whole sequence: lane l holds the
  2-row chunks l, l + lanes, ... (16 rows for 128), so that the lanes of a group read 128
  contiguous bytes of a staged k, q or decay row per 16-byte shared-memory load (the 4 groups of a
  warp read the same bytes: a broadcast). A CTA owns 128 / lanes columns.
- The sequence is walked in stages of ``_STAGE`` steps. Per stage the CTA stages k, q, the decays
  exp(g) (evaluated in fp64 from the bf16 g), its columns of v and beta in shared memory, then
  L2-normalises the k and q rows at the reference's fp32 rounding points: sum of squares in fp32
  (4 interleaved partial sums per row), rsqrt(sum + 1e-6) evaluated in fp64 and rounded to fp32,
  x * r rounded to fp32, and for q a further * d^-0.5 rounded to fp32. The normalised values are
  kept in shared memory as fp64.
- The recurrence itself runs in fp64 (decay, state, dot products, update). A step-by-step fp32
  recurrence rounds the state once per token, 1024 times, where the reference's chunked form does
  so once per 64-token chunk (problem 74's emulation of that fp32 recurrence reached about twice
  the reference's own error against the grader's three times); fp64 keeps the recurrence's own
  error negligible. Dot products: 4 interleaved partial sums per lane, added pairwise, then
  butterfly shuffles inside the lane group. o is rounded to fp32 and then to bf16.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=8, seqlen=1024, heads=16, head_dim=128)
_THREADS = 128
_STAGE = 8  # time steps staged in shared memory at once
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
def kda_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, g: cute.Tensor, beta: cute.Tensor,
               o: cute.Tensor, scale: cutlass.Float32, vec: cutlass.Constexpr, lanes: cutlass.Constexpr,
               steps: cutlass.Constexpr, head_dim: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bh, blk, _ = cute.arch.block_idx()
    seqlen = cute.size(q, mode=[1])
    heads = cute.size(q, mode=[2])
    cols = _THREADS // lanes
    bi = bh // heads
    h = bh - bi * heads
    part = tidx % lanes
    group = tidx // lanes
    col_raw = blk * cols + group
    valid = col_raw < head_dim
    col = cutlass.select_(valid, col_raw, head_dim - 1)

    smem = cutlass.memory.SmemAllocator()
    kq = smem.allocate_tensor(cutlass.Float64, cute.make_ordered_layout((3, _STAGE, head_dim), order=(2, 1, 0)),
                              byte_alignment=16)
    vs = smem.allocate_tensor(cutlass.Float64, cute.make_ordered_layout((_STAGE, cols), order=(1, 0)),
                              byte_alignment=16)
    bs = smem.allocate_tensor(cutlass.Float64, cute.make_layout((_STAGE,)), byte_alignment=16)
    rinv = smem.allocate_tensor(cutlass.Float32, cute.make_layout((2 * _STAGE,)), byte_alignment=16)

    # This group's column of the state, in fp64 registers, from zero.
    st = cute.make_rmem_tensor((vec, steps), cutlass.Float64)
    st.fill(0.0)
    kr = cute.make_rmem_tensor((vec, steps), cutlass.Float64)

    for t0 in cutlass.range(0, seqlen, _STAGE, unroll=1):
        # Stage k, q, exp(g) (rows t0 .. t0 + _STAGE, zeros past the end), this CTA's v columns and beta.
        for idx in cutlass.range(tidx, 3 * _STAGE * head_dim, _THREADS, unroll=1):
            which = idx // (_STAGE * head_dim)
            rem = idx - which * (_STAGE * head_dim)
            s = rem // head_dim
            i = rem - s * head_dim
            val = cutlass.Float64(0.0)
            if t0 + s < seqlen:
                if which == 0:
                    val = k[bi, t0 + s, h, i].to(cutlass.Float64)
                elif which == 1:
                    val = q[bi, t0 + s, h, i].to(cutlass.Float64)
                else:
                    val = cute.math.exp(g[bi, t0 + s, h, i].to(cutlass.Float64))
            kq[which, s, i] = val
        for idx in cutlass.range(tidx, _STAGE * cols, _THREADS, unroll=1):
            s = idx // cols
            c = idx - s * cols
            val = cutlass.Float64(0.0)
            if t0 + s < seqlen and blk * cols + c < head_dim:
                val = v[bi, t0 + s, h, blk * cols + c].to(cutlass.Float64)
            vs[s, c] = val
        if tidx < _STAGE:
            val = cutlass.Float64(0.0)
            if t0 + tidx < seqlen:
                val = beta[bi, t0 + tidx, h].to(cutlass.Float64)
            bs[tidx] = val
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
            terms = []
            for j in cutlass.range_constexpr(steps):
                for e in cutlass.range_constexpr(vec):
                    st[e, j] = st[e, j] * kq[2, s, (j * lanes + part) * vec + e]
                    kr[e, j] = kq[0, s, (j * lanes + part) * vec + e]
                    terms.append((kr[e, j], st[e, j]))
            old = cute.arch.warp_reduction(_partials(terms), lambda a, b: a + b, threads_in_group=lanes)
            u = bs[s] * (vs[s, group] - old)
            terms = []
            for j in cutlass.range_constexpr(steps):
                for e in cutlass.range_constexpr(vec):
                    st[e, j] = st[e, j] + kr[e, j] * u
                    terms.append((kq[1, s, (j * lanes + part) * vec + e], st[e, j]))
            out = cute.arch.warp_reduction(_partials(terms), lambda a, b: a + b, threads_in_group=lanes)
            if valid and part == 0:
                o[bi, t0 + s, h, col] = out.to(cutlass.Float32).to(cutlass.BFloat16)
        cute.arch.sync_threads()


@cute.jit
def kda(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, g: cute.Tensor, beta: cute.Tensor, o: cute.Tensor,
        scale: cutlass.Float32, stream: cuda.CUstream):
    batch = cute.size(q, mode=[0])
    heads = cute.size(q, mode=[2])
    head_dim = cute.size(q, mode=[3])
    vec, lanes, steps = _plan(head_dim)
    cols = _THREADS // lanes
    kda_kernel(q, k, v, g, beta, o, scale, vec, lanes, steps, head_dim).launch(
        grid=[batch * heads, (head_dim + cols - 1) // cols, 1], block=[_THREADS, 1, 1], stream=stream)


def _compile(batch, seqlen, heads, head_dim, arch=None, ptx_dir=None):
    def fake(dtype, *shape):
        return make_fake_compact_tensor(dtype, shape, stride_order=tuple(reversed(range(len(shape)))),
                                        assumed_align=16)

    bf16 = cutlass.BFloat16
    seq = fake(bf16, batch, seqlen, heads, head_dim)
    gate = fake(bf16, batch, seqlen, heads)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(kda, seq, seq, seq, seq, gate, seq, 1.0, make_fake_stream(), options=options)


def solve(q, k, v, g, beta):
    batch, seqlen, heads, head_dim = q.shape
    ins = [t.contiguous() for t in (q, k, v, g, beta)]
    o = torch.empty_like(ins[0])
    if batch * seqlen * heads * head_dim == 0:
        return o
    key = (batch, seqlen, heads, head_dim)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    _COMPILED[key](*ins, o, float(head_dim ** -0.5), stream)
    return o


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["batch"], w["seqlen"], w["heads"], w["head_dim"], arch, ptx_dir).kernel_info)
