"""CuTe DSL oracle for problem 71: gated delta net (GDN) prefill over packed variable-length
sequences with per-sequence states (Qwen3-Next), bf16 I/O, fp32 states in 'k-last' layout.

The whole computation is one DSL kernel that runs the recurrence token by token (the reference's
chunked form is the same recurrence regrouped). With S [d_k, d_v] (state[i, h, j, :] is column j),
every column evolves on its own: S[:, j] *= g_t; old = k_t.S[:, j]; u = beta_t (v_t[j] - old)
(= beta v + (1 - beta) old - old); S[:, j] += k_t u; o_t[j] = scale q_t.S[:, j]. So:

- CTA (sequence * value head, column block) with 128 threads; the CTA reads its sequence's token
  range from cu_seqlens; value head h reads q/k head h // (value heads / q/k heads). A group of
  ``lanes`` neighbouring threads (8 for head dim 128) owns one column and keeps it in registers for
  the whole sequence: lane l holds the 2-row chunks l, l + lanes, ... (16 rows for 128), so that the
  lanes of a group read 128 contiguous bytes of a staged k or q row per 16-byte shared-memory load.
  A CTA owns 128 / lanes columns; it loads the column from the sequence's initial state and writes
  it back to new_state at the end.
- Per stage of ``_STAGE`` tokens the CTA stages k and q (already L2-normalised, widened exactly),
  its columns of v, and per token the gate and beta, computed in fp64 from the inputs (closer to
  the float64 anchor than the reference's fp32 chain): g = exp(-exp(A_log) softplus(a + dt_bias)),
  softplus = x above 20 else log1p(exp(x)) (torch's threshold), beta = 1 / (1 + exp(-b)).
- The recurrence runs in fp64 (decay, state, dot products, update): a token-by-token fp32
  recurrence rounds its state every token where the reference rounds once per 64-token chunk
  (problem 74's emulation of that fp32 form reached about twice the reference's error against the
  grader's three times). Dot products: 4 interleaved partial sums per lane, added pairwise, then
  butterfly shuffles inside the lane group. o = scale * (q.S) is rounded to fp32 and then to bf16;
  the final state to fp32.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(seqs=4, qk_heads=8, v_heads=16, head_dim=128)
TOTAL_TOKENS = 959  # tokens of the captured sequence layout (the graded one)
_THREADS = 128
_STAGE = 16  # time steps staged in shared memory at once
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
def gdn_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, state: cute.Tensor, a_log: cute.Tensor,
               a: cute.Tensor, dt_bias: cute.Tensor, b: cute.Tensor, cu_seqlens: cute.Tensor, o: cute.Tensor,
               new_state: cute.Tensor, scale: cutlass.Float32, vec: cutlass.Constexpr, lanes: cutlass.Constexpr,
               steps: cutlass.Constexpr, head_dim: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bh, blk, _ = cute.arch.block_idx()
    qk_heads = cute.size(q, mode=[1])
    heads = cute.size(v, mode=[1])
    cols = _THREADS // lanes
    bi = bh // heads
    h = bh - bi * heads
    hq = h // (heads // qk_heads)
    lo = cu_seqlens[bi].to(cutlass.Int32)
    seqlen = cu_seqlens[bi + 1].to(cutlass.Int32) - lo
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
    gs = smem.allocate_tensor(cutlass.Float64, cute.make_layout((_STAGE,)), byte_alignment=16)

    # This group's column of the state, in fp64 registers.
    st = cute.make_rmem_tensor((vec, steps), cutlass.Float64)
    for j in cutlass.range_constexpr(steps):
        for e in cutlass.range_constexpr(vec):
            st[e, j] = state[bi, h, col, (j * lanes + part) * vec + e].to(cutlass.Float64)
    kr = cute.make_rmem_tensor((vec, steps), cutlass.Float64)
    neg_a = -cute.math.exp(a_log[h].to(cutlass.Float64))
    dtb = dt_bias[h].to(cutlass.Float64)

    for t0 in cutlass.range(0, seqlen, _STAGE, unroll=1):
        # Stage k, q (rows t0 .. t0 + _STAGE, zeros past the end), this CTA's v columns, beta and the decay.
        for idx in cutlass.range(tidx, 2 * _STAGE * head_dim, _THREADS, unroll=1):
            which = idx // (_STAGE * head_dim)
            rem = idx - which * (_STAGE * head_dim)
            s = rem // head_dim
            i = rem - s * head_dim
            val = cutlass.Float64(0.0)
            if t0 + s < seqlen:
                if which == 0:
                    val = k[lo + t0 + s, hq, i].to(cutlass.Float64)
                else:
                    val = q[lo + t0 + s, hq, i].to(cutlass.Float64)
            kq[which, s, i] = val
        for idx in cutlass.range(tidx, _STAGE * cols, _THREADS, unroll=1):
            s = idx // cols
            c = idx - s * cols
            val = cutlass.Float64(0.0)
            if t0 + s < seqlen and blk * cols + c < head_dim:
                val = v[lo + t0 + s, h, blk * cols + c].to(cutlass.Float64)
            vs[s, c] = val
        if tidx < _STAGE:
            bv = cutlass.Float64(0.0)
            gv = cutlass.Float64(1.0)
            if t0 + tidx < seqlen:
                x = a[lo + t0 + tidx, h].to(cutlass.Float64) + dtb
                sp = x
                if x <= 20.0:
                    sp = cute.math.log1p(cute.math.exp(x))
                gv = cute.math.exp(neg_a * sp)
                bv = 1.0 / (1.0 + cute.math.exp(-b[lo + t0 + tidx, h].to(cutlass.Float64)))
            bs[tidx] = bv
            gs[tidx] = gv
        cute.arch.sync_threads()
        n_steps = cutlass.select_(seqlen - t0 < _STAGE, seqlen - t0, _STAGE)
        for s in cutlass.range(n_steps, unroll=1):
            terms = []
            dec = gs[s]
            for j in cutlass.range_constexpr(steps):
                for e in cutlass.range_constexpr(vec):
                    st[e, j] = st[e, j] * dec
                    kr[e, j] = kq[0, s, (j * lanes + part) * vec + e]
                    terms.append((kr[e, j], st[e, j]))
            old = cute.arch.warp_reduction(_partials(terms), lambda x, y: x + y, threads_in_group=lanes)
            u = bs[s] * (vs[s, group] - old)
            terms = []
            for j in cutlass.range_constexpr(steps):
                for e in cutlass.range_constexpr(vec):
                    st[e, j] = st[e, j] + kr[e, j] * u
                    terms.append((kq[1, s, (j * lanes + part) * vec + e], st[e, j]))
            out = cute.arch.warp_reduction(_partials(terms), lambda x, y: x + y, threads_in_group=lanes)
            if valid and part == 0:
                o[lo + t0 + s, h, col] = (out * scale.to(cutlass.Float64)).to(cutlass.Float32).to(cutlass.BFloat16)
        cute.arch.sync_threads()

    if valid:
        for j in cutlass.range_constexpr(steps):
            for e in cutlass.range_constexpr(vec):
                new_state[bi, h, col, (j * lanes + part) * vec + e] = st[e, j].to(cutlass.Float32)


@cute.jit
def gdn(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, state: cute.Tensor, a_log: cute.Tensor, a: cute.Tensor,
        dt_bias: cute.Tensor, b: cute.Tensor, cu_seqlens: cute.Tensor, o: cute.Tensor, new_state: cute.Tensor,
        scale: cutlass.Float32, stream: cuda.CUstream):
    batch = cute.size(state, mode=[0])
    heads = cute.size(v, mode=[1])
    head_dim = cute.size(v, mode=[2])
    vec, lanes, steps = _plan(head_dim)
    cols = _THREADS // lanes
    gdn_kernel(q, k, v, state, a_log, a, dt_bias, b, cu_seqlens, o, new_state, scale, vec, lanes, steps,
               head_dim).launch(
        grid=[batch * heads, (head_dim + cols - 1) // cols, 1], block=[_THREADS, 1, 1], stream=stream)


def _compile(tokens, seqs, qk_heads, heads, head_dim, arch=None, ptx_dir=None):
    def fake(dtype, *shape, align=16):
        return make_fake_compact_tensor(dtype, shape, stride_order=tuple(reversed(range(len(shape)))),
                                        assumed_align=align)

    bf16, f32 = cutlass.BFloat16, cutlass.Float32
    qk = fake(bf16, tokens, qk_heads, head_dim)
    v = fake(bf16, tokens, heads, head_dim)
    state = fake(f32, seqs, heads, head_dim, head_dim)
    per_head = fake(f32, heads, align=4)
    gate = fake(bf16, tokens, heads, align=2)
    cu = fake(cutlass.Int64, seqs + 1, align=8)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(gdn, qk, qk, v, state, per_head, gate, per_head, gate, cu, v, state, 1.0, make_fake_stream(),
                        options=options)


def solve(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale):
    tokens, qk_heads, head_dim = q.shape
    heads = v.shape[1]
    seqs = state.shape[0]
    ins = [t.contiguous() for t in (q, k, v, state, A_log, a, dt_bias, b, cu_seqlens)]
    o = torch.empty(tokens, heads, head_dim, dtype=torch.bfloat16, device=v.device)
    new_state = torch.empty_like(ins[3])
    if tokens * seqs * heads * head_dim == 0:
        if seqs:
            new_state.copy_(ins[3])
        return o, new_state
    key = (tokens, seqs, qk_heads, heads, head_dim)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    _COMPILED[key](*ins, o, new_state, float(scale), stream)
    return o, new_state


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(TOTAL_TOKENS, w["seqs"], w["qk_heads"], w["v_heads"], w["head_dim"], arch,
                         ptx_dir).kernel_info)
