"""TIRx oracle for problem 72: gated delta rule (GDN) decode, one token per sequence, fp32 state.

One TIRx kernel does the whole computation. With the state in its 'k-last' layout [batch, head, V,
K], each row S[v, :] is independent: the decay, the dot products k.s and q.s' and the rank-1
update of that row need only the row itself, q, k, v[v] and the head's two gates. So:

- CTA (batch*head, row block) with 128 threads; a group of ``lanes`` neighbouring threads (8 for
  head dim 128) owns a state row. Lane l holds the 4-float chunks l, l + lanes, ... of the row
  (16 floats for 128), so each 16-byte vector load or store of a warp covers whole 128-byte
  segments; each thread owns ``ROWS`` rows, all loaded before any is used.
- The head's gates follow the reference's fp32 rounding points, but each transcendental is
  evaluated in fp64 and rounded to fp32 (NVRTC builds with --use_fast_math, which only touches
  fp32 math: fp64 exp/log1p and the fp64 division stay exact-rounded, so each fp32 result is the
  correctly rounded one): g = exp(-exp(A_log) * softplus(a + dt_bias)) with softplus(x) = x above
  20, else log1p(exp(x)); beta = 1 / (1 + exp(-b)).
- Per row, in fp32: s = g * S; old = k.s (per-lane multiply-adds, then xor shuffles inside the
  lane group); new = beta * v + (1 - beta) * old; s += k * (new - old); the row is stored; o = scale
  * q.s, reduced the same way and rounded to bf16 once.
The state is read once and written once. Groups past the last row (small head dims) shuffle on a
clamped row and skip their stores.
"""

import torch
import tvm
from tvm.script import tirx as T

THREADS = 128
ROWS = 2  # state rows per thread
SOFTPLUS_THRESHOLD = 20.0
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _plan(head_dim):
    """(vector width, lanes per row: a power of two <= 8 dividing the chunk count, chunks per lane)."""
    vec = 4 if head_dim % 4 == 0 else 1
    chunks = head_dim // vec
    lanes = 1
    while lanes * 2 <= min(8, chunks) and chunks % (lanes * 2) == 0:
        lanes *= 2
    return vec, lanes, chunks // lanes


def _f32(value):
    return T.float32(value)


def _rounded(fn, x):
    """fp32(fn(x)) with fn evaluated in fp64: the correctly rounded fp32 value (fast math spares fp64)."""
    return T.Cast("float32", fn(T.Cast("float64", x)))


def _decode_kernel(qk_heads, heads, head_dim):
    """Shape-specialised on the head counts and head dim; the batch is symbolic."""
    vec, lanes, steps = _plan(head_dim)
    group = heads // qk_heads
    groups = THREADS // lanes
    per_cta = groups * ROWS
    blocks = (head_dim + per_cta - 1) // per_cta
    offsets = []
    offset = lanes // 2
    while offset > 0:
        offsets.append(offset)
        offset //= 2

    @T.prim_func
    def mkb_gdn_decode(q_h: T.handle, k_h: T.handle, v_h: T.handle, state_h: T.handle, alog_h: T.handle,
                       a_h: T.handle, dtb_h: T.handle, b_h: T.handle, out_h: T.handle, ns_h: T.handle,
                       scale: T.float32):
        batch = T.int32()
        q = T.match_buffer(q_h, (batch, 1, qk_heads, head_dim), "bfloat16")
        k = T.match_buffer(k_h, (batch, 1, qk_heads, head_dim), "bfloat16")
        v = T.match_buffer(v_h, (batch, 1, heads, head_dim), "bfloat16")
        state = T.match_buffer(state_h, (batch, heads, head_dim, head_dim), "float32")
        a_log = T.match_buffer(alog_h, (heads,), "float32")
        a = T.match_buffer(a_h, (batch, 1, heads), "bfloat16")
        dt_bias = T.match_buffer(dtb_h, (heads,), "float32")
        b = T.match_buffer(b_h, (batch, 1, heads), "bfloat16")
        out = T.match_buffer(out_h, (batch, 1, heads, head_dim), "bfloat16")
        new_state = T.match_buffer(ns_h, (batch, heads, head_dim, head_dim), "float32")
        T.device_entry()
        bh, blk = T.cta_id([batch * heads, blocks])
        tx = T.thread_id([THREADS])
        qraw = T.alloc_buffer((steps, vec), "bfloat16", scope="local")
        kraw = T.alloc_buffer((steps, vec), "bfloat16", scope="local")
        qr = T.alloc_buffer((steps, vec), "float32", scope="local")
        kr = T.alloc_buffer((steps, vec), "float32", scope="local")
        sr = T.alloc_buffer((ROWS, steps, vec), "float32", scope="local")
        vr = T.alloc_buffer((ROWS,), "float32", scope="local")
        old = T.alloc_buffer((ROWS,), "float32", scope="local")
        acc = T.alloc_buffer((ROWS,), "float32", scope="local")
        bi: T.let = bh // heads
        h: T.let = bh % heads
        hq: T.let = h // group
        part: T.let = tx % lanes
        first: T.let = blk * per_cta + tx // lanes

        # The head's gates at the reference's fp32 rounding points.
        xg: T.f32 = T.float32(a[bi, 0, h]) + dt_bias[h]
        ex: T.f32 = _rounded(T.exp, xg)
        softplus: T.f32 = T.if_then_else(xg > _f32(SOFTPLUS_THRESHOLD), xg, _rounded(T.log1p, ex))
        ea: T.f32 = _rounded(T.exp, a_log[h])
        g: T.f32 = _rounded(T.exp, (_f32(0.0) - ea) * softplus)
        eb: T.f32 = _rounded(T.exp, _f32(0.0) - T.float32(b[bi, 0, h]))
        beta: T.f32 = T.Cast("float32", T.float64(1.0) / T.Cast("float64", _f32(1.0) + eb))
        one_minus_beta: T.f32 = _f32(1.0) - beta

        for j in T.unroll(steps):
            for i in T.vectorized(vec):
                qraw[j, i] = q[bi, 0, hq, (j * lanes + part) * vec + i]
            for i in T.vectorized(vec):
                kraw[j, i] = k[bi, 0, hq, (j * lanes + part) * vec + i]
            for i in T.unroll(vec):
                qr[j, i] = T.float32(qraw[j, i])
                kr[j, i] = T.float32(kraw[j, i])
        # Load every owned row first (clamped rows for groups past the end), then work on them.
        for r in T.unroll(ROWS):
            for j in T.unroll(steps):
                for i in T.vectorized(vec):
                    sr[r, j, i] = state[bi, h, T.min(first + r * groups, head_dim - 1),
                                        (j * lanes + part) * vec + i]
            vr[r] = T.float32(v[bi, 0, h, T.min(first + r * groups, head_dim - 1)])

        for r in T.unroll(ROWS):
            old[r] = _f32(0.0)
            for j in T.unroll(steps):
                for i in T.unroll(vec):
                    sr[r, j, i] = sr[r, j, i] * g
                    old[r] = old[r] + kr[j, i] * sr[r, j, i]
        for r in T.unroll(ROWS):
            for o in T.unroll(len(offsets)):
                old[r] = old[r] + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), old[r],
                                                         T.shift_right(lanes, o + 1), 32)
        for r in T.unroll(ROWS):
            delta: T.f32 = (beta * vr[r] + one_minus_beta * old[r]) - old[r]
            acc[r] = _f32(0.0)
            for j in T.unroll(steps):
                for i in T.unroll(vec):
                    sr[r, j, i] = sr[r, j, i] + kr[j, i] * delta
                    acc[r] = acc[r] + qr[j, i] * sr[r, j, i]
            if first + r * groups < head_dim:
                for j in T.unroll(steps):
                    for i in T.vectorized(vec):
                        new_state[bi, h, first + r * groups, (j * lanes + part) * vec + i] = sr[r, j, i]
        for r in T.unroll(ROWS):
            for o in T.unroll(len(offsets)):
                acc[r] = acc[r] + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), acc[r],
                                                         T.shift_right(lanes, o + 1), 32)
        for r in T.unroll(ROWS):
            if first + r * groups < head_dim and part == 0:
                out[bi, 0, h, first + r * groups] = T.bfloat16(scale * acc[r])

    return mkb_gdn_decode


def _build(qk_heads, heads, head_dim, arch):
    """Compile once per (qk_heads, heads, head_dim, arch) and return the tvm Executable."""
    key = (qk_heads, heads, head_dim, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _decode_kernel(qk_heads, heads, head_dim)}),
                                     target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(qk_heads, heads, head_dim):
    key = (qk_heads, heads, head_dim, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def solve(q, k, v, state, A_log, a, dt_bias, b, scale):
    batch, _, qk_heads, head_dim = q.shape
    heads = v.shape[2]
    args = [t.contiguous() for t in (q, k, v, state, A_log, a, dt_bias, b)]
    out = torch.empty(batch, 1, heads, head_dim, dtype=torch.bfloat16, device=q.device)
    new_state = torch.empty_like(args[3])
    if batch > 0:
        _kernel_fn(qk_heads, heads, head_dim)(*args, out, new_state, float(scale))
    return out, new_state


def _symbols(source):
    """Kernel names declared in a generated CUDA source (``<global_symbol>_kernel``)."""
    names = []
    for part in source.split("__global__ void ")[1:]:
        if part.startswith("__launch_bounds__"):
            part = part[part.index(")") + 1:]
        name = part[:part.index("(")].strip()
        if name not in names:
            names.append(name)
    return names


def kernel_sources(arch="sm_90a", qk_heads=8, heads=16, head_dim=128):
    """{kernel symbol: generated CUDA source} for this file's kernels (graded shape by default)."""
    source = _build(qk_heads, heads, head_dim, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
