"""CuTe DSL oracle for problem 72: gated delta rule (GDN) decode, one token per sequence, fp32 state.

The whole computation is one DSL kernel. With the state in its 'k-last' layout [batch, head, V, K],
each row S[v, :] is independent: the decay, the two dot products k.s and q.s' and the rank-1
update of that row need only the row itself, q, k, v[v] and the head's two gates. So:

- CTA (batch*head, row block) with 128 threads; a group of ``lanes`` neighbouring threads (8 for
  head dim 128) owns a state row. Lane l holds the 4-float chunks l, l + lanes, ... of the row
  (16 floats for 128), so each load and store of a warp covers whole 128-byte segments; every
  thread owns ``_ROWS`` rows, all loaded before any is used so that several loads are in flight.
- Each thread forms the head's gates in fp32 as torch's CUDA kernels do (accurate expf/log1pf,
  IEEE division): g = exp(-exp(A_log) * softplus(a + dt_bias)) with softplus(x) = x above 20,
  else log1p(exp(x)); beta = 1 / (1 + exp(-b)).
- Per row, in fp32: s = g * S; old = k.s (per-lane fused multiply-adds, then butterfly shuffles
  inside the lane group); new = beta * v + (1 - beta) * old; s += k * (new - old); the updated row
  is stored; o = scale * q.s reduced the same way and rounded to bf16 once.
The state is read once and written once; nothing else touches it.
Groups past the last row (small head dims) still run the shuffles on a clamped row and skip stores.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, qk_heads=8, v_heads=16, head_dim=128)
_THREADS = 128
_ROWS = 2  # state rows per thread
_SOFTPLUS_THRESHOLD = 20.0
_COMPILED = {}


def _plan(head_dim):
    """(vector width, lanes per row: a power of two <= 8 dividing the chunk count, chunks per lane)."""
    vec = 4 if head_dim % 4 == 0 else 1
    chunks = head_dim // vec
    lanes = 1
    while lanes * 2 <= min(8, chunks) and chunks % (lanes * 2) == 0:
        lanes *= 2
    return vec, lanes, chunks // lanes


@cute.kernel
def gdn_decode_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, state: cute.Tensor,
                      a_log: cute.Tensor, a: cute.Tensor, dt_bias: cute.Tensor, b: cute.Tensor,
                      out: cute.Tensor, new_state: cute.Tensor, scale: cutlass.Float32,
                      vec: cutlass.Constexpr, lanes: cutlass.Constexpr, steps: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bh, blk, _ = cute.arch.block_idx()
    heads = cute.size(v, mode=[2])
    rows = cute.size(state, mode=[2])
    group = heads // cute.size(q, mode=[2])
    groups = _THREADS // lanes
    bi = bh // heads
    h = bh - bi * heads
    hq = h // group
    part = tidx % lanes
    first_row = blk * (groups * _ROWS) + tidx // lanes

    # The head's gates, as torch forms them in fp32.
    x = a[bi, 0, h].to(cutlass.Float32) + dt_bias[h]
    softplus = cutlass.Float32(cutlass.select_(x > _SOFTPLUS_THRESHOLD, x, cute.math.log1p(cute.math.exp(x))))
    g = cute.math.exp(-cute.math.exp(a_log[h]) * softplus)
    beta = 1.0 / (1.0 + cute.math.exp(-b[bi, 0, h].to(cutlass.Float32)))
    one_minus_beta = 1.0 - beta

    gq = cute.zipped_divide(q[bi, 0, hq, None], (vec,))
    gk = cute.zipped_divide(k[bi, 0, hq, None], (vec,))
    qr = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    kr = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    for j in cutlass.range_constexpr(steps):
        qr[None, j].store(gq[None, j * lanes + part].load().to(cutlass.Float32))
        kr[None, j].store(gk[None, j * lanes + part].load().to(cutlass.Float32))

    # Load every owned row first (clamped rows for groups past the end), then work on them.
    sr = cute.make_rmem_tensor((vec, steps, _ROWS), cutlass.Float32)
    vr = []
    for r in cutlass.range_constexpr(_ROWS):
        row = cutlass.select_(first_row + r * groups < rows, first_row + r * groups, rows - 1)
        gs = cute.zipped_divide(state[bi, h, row, None], (vec,))
        for j in cutlass.range_constexpr(steps):
            sr[None, j, r].store(gs[None, j * lanes + part].load())
        vr.append(v[bi, 0, h, row].to(cutlass.Float32))

    olds = []
    for r in cutlass.range_constexpr(_ROWS):
        acc = cutlass.Float32(0.0)
        for j in cutlass.range_constexpr(steps):
            for i in cutlass.range_constexpr(vec):
                sr[i, j, r] = sr[i, j, r] * g
                acc = acc + kr[i, j] * sr[i, j, r]
        olds.append(acc)
    for r in cutlass.range_constexpr(_ROWS):
        olds[r] = cute.arch.warp_reduction(olds[r], lambda p, o: p + o, threads_in_group=lanes)

    outs = []
    for r in cutlass.range_constexpr(_ROWS):
        row = first_row + r * groups
        new = beta * vr[r] + one_minus_beta * olds[r]
        delta = new - olds[r]
        acc = cutlass.Float32(0.0)
        for j in cutlass.range_constexpr(steps):
            for i in cutlass.range_constexpr(vec):
                sr[i, j, r] = sr[i, j, r] + kr[i, j] * delta
                acc = acc + qr[i, j] * sr[i, j, r]
        outs.append(acc)
        if row < rows:
            gn = cute.zipped_divide(new_state[bi, h, row, None], (vec,))
            for j in cutlass.range_constexpr(steps):
                gn[None, j * lanes + part].store(sr[None, j, r].load())
    for r in cutlass.range_constexpr(_ROWS):
        outs[r] = cute.arch.warp_reduction(outs[r], lambda p, o: p + o, threads_in_group=lanes)
    for r in cutlass.range_constexpr(_ROWS):
        row = first_row + r * groups
        if row < rows and part == 0:
            out[bi, 0, h, row] = (scale * outs[r]).to(cutlass.BFloat16)


@cute.jit
def gdn_decode(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, state: cute.Tensor, a_log: cute.Tensor,
               a: cute.Tensor, dt_bias: cute.Tensor, b: cute.Tensor, out: cute.Tensor,
               new_state: cute.Tensor, scale: cutlass.Float32, stream: cuda.CUstream):
    batch = cute.size(state, mode=[0])
    heads = cute.size(state, mode=[1])
    rows = cute.size(state, mode=[2])
    vec, lanes, steps = _plan(cute.size(state, mode=[3]))
    per_cta = (_THREADS // lanes) * _ROWS
    gdn_decode_kernel(q, k, v, state, a_log, a, dt_bias, b, out, new_state, scale, vec, lanes, steps).launch(
        grid=[batch * heads, (rows + per_cta - 1) // per_cta, 1], block=[_THREADS, 1, 1], stream=stream)


def _compile(batch, qk_heads, v_heads, head_dim, arch=None, ptx_dir=None):
    def fake(dtype, *shape):
        return make_fake_compact_tensor(dtype, shape, stride_order=tuple(reversed(range(len(shape)))),
                                        assumed_align=16)

    bf16, f32 = cutlass.BFloat16, cutlass.Float32
    qk = fake(bf16, batch, 1, qk_heads, head_dim)
    vv = fake(bf16, batch, 1, v_heads, head_dim)
    st = fake(f32, batch, v_heads, head_dim, head_dim)
    per_head = fake(f32, v_heads)
    gate = fake(bf16, batch, 1, v_heads)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(gdn_decode, qk, qk, vv, st, per_head, gate, per_head, gate, vv, st, 1.0,
                        make_fake_stream(), options=options)


def solve(q, k, v, state, A_log, a, dt_bias, b, scale):
    batch, _, qk_heads, head_dim = q.shape
    v_heads = v.shape[2]
    ins = [t.contiguous() for t in (q, k, v, state, A_log, a, dt_bias, b)]
    out = torch.empty(batch, 1, v_heads, head_dim, dtype=torch.bfloat16, device=q.device)
    new_state = torch.empty_like(ins[3])
    if batch == 0:
        return out, new_state
    key = (batch, qk_heads, v_heads, head_dim)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](*ins, out, new_state, float(scale), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out, new_state


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["batch"], w["qk_heads"], w["v_heads"], w["head_dim"], arch, ptx_dir).kernel_info)
