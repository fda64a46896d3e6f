"""TIRx oracle for problem 12: Gemma-3n audio local attention with relative positions and
soft-capping (8 heads x 64), fp32.

The reference is true fp32 (no TF32), so every product runs as CUDA-core fp32 FMAs (TIRx 0.27 has
no WGMMA path for sm_90 either); the projections are shared-memory tiled SIMT GEMMs, slower than
cuBLAS's fp32 GEMMs that the eager reference uses. NVRTC builds TIRx kernels with --use_fast_math,
so the transcendental functions and the divisions that matter are precise forms: fp64 sin, cos,
tanh, exp and log1p (fp64 math is not touched by fast math) rounded to fp32 once, a range-reduced
polynomial fp32 exp, and quotients corrected by one Newton step on the residual.
Three TIRx kernels, six launches:

1. ``mkb_sinusoid``: the timing signal of the 128 relative distances, row j for distance 127 - j:
   angle = fp32(distance) * inv_timescales[k] (the reference's fp32 product), sin in the first half
   of the row and cos in the second.
2. ``mkb_gemm`` (q, k, v = x W^T; and relT = W_pos sinusoid^T, the relative-position table stored as
   [channel, j] so that the attention kernel reads it coalesced): a 256-thread CTA computes a 128 x
   128 tile; K advances in slices of 16 (two 16-byte vectors of each operand per thread, the next
   slice's loads issued before the current slice is computed), stored K-major in shared memory; each
   thread accumulates an 8 x 8 block (rows ty*4 + {0..3}, 64 + ty*4 + {0..3}, columns tc*4 + {0..3},
   64 + tc*4 + {0..3}). The sums are two-level (chunks of 128 K values summed from zero, then added to
   the total). Rows past the end (the token count is not a tile multiple) are clamped on load and not
   stored. The q build scales in the reference's order: (q * fp32(64^-0.5 / ln 2)) * softplus(s[d]).
3. ``mkb_local_attention``: one CTA of 8 warps per (32-frame query block u, head, batch); the context
   window is the 159 frames u*32 - 127 .. u*32 + 31 (160 columns, the last always masked). Q and the
   window's K go through shared memory in head-dim slices of 16 (dim-major; the K rows padded to 161
   floats). Warp r owns query rows 4r .. 4r + 3, lane l owns window columns l + 32 t (t < 5): S = q.k
   for those, and B[w][j] = q_w . r(127 - j) for j = l + 32 t (t < 4), the relative table read from
   global memory. The Transformer-XL shift gives column c the term B[w][c - w]: it lives in lane
   (l - w) mod 32 at t or t - 1, fetched by a warp shuffle. logit = S + B[w][c - w], z = tanh(logit /
   50) * 50, masked (band 0 <= c - w <= 127, frame inside the sequence and not padding); softmax over
   the row in fp32 (row max and sum by xor shuffles), probabilities to shared memory. P V: the
   window's V in slices of 16 frames through shared memory, each thread accumulating its 4 rows at
   dims l + 32 e, summed from zero per 32 frames and then added to the total. Rows of frames past the
   sequence are not written.
Shapes that are not tile multiples in the channel dimension (the small workload) use zero-padded
scratch operands; the graded shapes need none.
"""

import math

import torch
import tvm
from tvm.script import tirx as T

BLOCK, MAX_PAST = 32, 127
SPAN = MAX_PAST + 1  # relative distances 0..127
WIN = 160  # window columns (159 frames and one masked column)
BM = 128
BN = 128
BK = 16
FOLD = 8
THREADS = 256
DS = 16  # head-dim slice of the S loop
VS = 16  # frames per V slice
KPAD = WIN + 1
NEG = -1.0e30
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _let(value, body, name):
    """Bind ``value`` once (a TIR Let) so the expression tree does not repeat it."""
    var = T.Var(name, "float32")
    return T.Let(body(var), where={var: value})


def exp_precise(x):
    """exp(x) in fp32 within about 1 ulp from arithmetic that --use_fast_math keeps exact.

    exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split so n * hi is exact);
    exp(r) by a degree-7 Taylor polynomial; 2^n from exponent bits. Inputs below -87 give 0;
    inputs are clamped at 88.
    """

    def with_xc(xc):
        def with_n(n):
            def with_r(r):
                poly = _f32(1.0 / 5040.0)
                for coef in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
                    poly = poly * r + _f32(coef)
                scale = T.reinterpret("float32", T.shift_left(T.int32(n) + 127, 23))
                return poly * scale

            reduced = xc - n * _f32(0.693145751953125) - n * _f32(1.428606765330187e-06)
            return _let(reduced, with_r, "r")

        return _let(T.floor(xc * _f32(1.4426950408889634) + _f32(0.5)), with_n, "n")

    def with_x(xv):
        clamped = T.max(T.min(xv, _f32(88.0)), _f32(-87.0))
        return T.if_then_else(xv < _f32(-87.0), _f32(0.0), _let(clamped, with_xc, "xc"))

    return _let(x, with_x, "x")


def div_precise(num, den):
    """num / den: the fast-math quotient corrected by one Newton step on the residual."""

    def with_operands(n, d):
        def with_r(r):
            return _let(n * r, lambda q: q + (n - d * q) * r, "q")

        return _let(_f32(1.0) / d, with_r, "rcp")

    return _let(num, lambda n: _let(den, lambda d: with_operands(n, d), "den"), "num")


def _sinusoid_kernel(half, cols):
    steps = (half + THREADS - 1) // THREADS

    @T.prim_func
    def mkb_sinusoid(i_h: T.handle, s_h: T.handle):
        inv_ts = T.match_buffer(i_h, (half,), "float32")
        sinus = T.match_buffer(s_h, (SPAN, cols), "float32")
        T.device_entry()
        j = T.cta_id([SPAN])
        tx = T.thread_id([THREADS])
        for it in T.unroll(steps):
            if it * THREADS + tx < half:
                angle: T.f32 = T.float32(MAX_PAST - j) * inv_ts[it * THREADS + tx]  # fp32, as the reference
                sinus[j, it * THREADS + tx] = T.float32(T.sin(T.float64(angle)))
                sinus[j, half + it * THREADS + tx] = T.float32(T.cos(T.float64(angle)))

    return mkb_sinusoid


def _gemm_kernel(m, n, k, s_len, head_dim, scaled):
    """C [m, n] = A [m, k] W [n, k]^T (scaled: (C * q_const) * softplus(s[col % head_dim])); any m, n a
    multiple of 128, k of 128."""
    k_tiles = k // BK
    tiles_n = n // BN
    tiles_m = (m + BM - 1) // BM

    @T.prim_func
    def mkb_gemm(a_h: T.handle, b_h: T.handle, c_h: T.handle, s_h: T.handle, q_const: T.float32):
        A = T.match_buffer(a_h, (m, k), "float32")
        B = T.match_buffer(b_h, (n, k), "float32")
        C = T.match_buffer(c_h, (m, n), "float32")
        S = T.match_buffer(s_h, (s_len,), "float32")
        T.device_entry()
        cta = T.cta_id([tiles_m * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK, BM), "float32", scope="shared")
        b_s = T.alloc_buffer((BK, BN), "float32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        part = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "float32", scope="local")
        bf = T.alloc_buffer((8,), "float32", scope="local")
        ra = T.alloc_buffer((8,), "float32", scope="local")
        rb = T.alloc_buffer((8,), "float32", scope="local")
        sc = T.alloc_buffer((8,), "float32", scope="local")
        out = T.alloc_buffer((4,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx // 2
        arow: T.let = T.min(row0 + lrow, m - 1)  # rows past m clamped
        lk: T.let = (tx % 2) * 8
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            for j in T.vectorized(4):
                ra[h * 4 + j] = A[arow, lk + h * 4 + j]
            for j in T.vectorized(4):
                rb[h * 4 + j] = B[col0 + lrow, lk + h * 4 + j]
        for kc in range(k_tiles // FOLD):
            for i in T.unroll(64):
                part[i] = T.float32(0.0)
            for ks in range(FOLD):
                for j in T.unroll(8):
                    a_s[lk + j, lrow] = ra[j]
                    b_s[lk + j, lrow] = rb[j]
                T.cuda.cta_sync()
                if kc * FOLD + ks + 1 < k_tiles:  # next slice's loads fly while this slice is computed
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            ra[h * 4 + j] = A[arow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                        for j in T.vectorized(4):
                            rb[h * 4 + j] = B[col0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                for kk in T.unroll(BK):
                    for i in T.vectorized(4):
                        af[i] = a_s[kk, ty * 4 + i]
                    for i in T.vectorized(4):
                        af[4 + i] = a_s[kk, 64 + ty * 4 + i]
                    for j in T.vectorized(4):
                        bf[j] = b_s[kk, tc * 4 + j]
                    for j in T.vectorized(4):
                        bf[4 + j] = b_s[kk, 64 + tc * 4 + j]
                    for i in T.unroll(8):
                        for j in T.unroll(8):
                            part[i * 8 + j] = part[i * 8 + j] + af[i] * bf[j]
                T.cuda.cta_sync()
            for i in T.unroll(64):  # fold the chunk's partial sums into the total
                acc[i] = acc[i] + part[i]
        if scaled:  # softplus(s) = log1p(exp(s)) in fp64, rounded once
            for jh in T.unroll(2):
                for j in T.unroll(4):
                    sc[jh * 4 + j] = T.float32(T.log1p(T.exp(T.float64(S[(col0 + jh * 64 + tc * 4 + j) % head_dim]))))
        for i in T.unroll(8):
            if row0 + (i // 4) * 64 + ty * 4 + i % 4 < m:
                for jh in T.unroll(2):
                    for j in T.unroll(4):
                        if scaled:
                            out[j] = (acc[i * 8 + jh * 4 + j] * q_const) * sc[jh * 4 + j]
                        else:
                            out[j] = acc[i * 8 + jh * 4 + j]
                    for j in T.vectorized(4):
                        C[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = out[j]

    return mkb_gemm


def _attention_kernel(batch, frames, cols, rel_rows, heads, head_dim):
    rows = batch * frames
    count = (frames + BLOCK - 1) // BLOCK
    dpl = (head_dim + 31) // 32  # output dims per lane
    v_iters = (VS * head_dim + THREADS - 1) // THREADS

    @T.prim_func
    def mkb_local_attention(q_h: T.handle, k_h: T.handle, v_h: T.handle, r_h: T.handle, m_h: T.handle,
                            o_h: T.handle, cap: T.float32):
        q = T.match_buffer(q_h, (rows, cols), "float32")
        k = T.match_buffer(k_h, (rows, cols), "float32")
        v = T.match_buffer(v_h, (rows, cols), "float32")
        rel_t = T.match_buffer(r_h, (rel_rows, SPAN), "float32")
        mask = T.match_buffer(m_h, (batch, frames), "int32")
        out = T.match_buffer(o_h, (rows, cols), "float32")
        T.device_entry()
        u, head, b = T.cta_id([count, heads, batch])
        tx = T.thread_id([THREADS])
        q_s = T.alloc_buffer((DS, BLOCK + 1), "float32", scope="shared")
        k_s = T.alloc_buffer((DS, KPAD), "float32", scope="shared")
        p_s = T.alloc_buffer((BLOCK, WIN), "float32", scope="shared")
        v_s = T.alloc_buffer((VS, head_dim), "float32", scope="shared")
        s = T.alloc_buffer((20,), "float32", scope="local")  # [row i][column t]
        bq = T.alloc_buffer((16,), "float32", scope="local")  # [row i][distance column t]
        qa = T.alloc_buffer((4,), "float32", scope="local")
        kb = T.alloc_buffer((5,), "float32", scope="local")
        rl = T.alloc_buffer((4,), "float32", scope="local")
        z = T.alloc_buffer((5,), "float32", scope="local")
        acc = T.alloc_buffer((4 * dpl,), "float32", scope="local")
        part = T.alloc_buffer((4 * dpl,), "float32", scope="local")
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        col0: T.let = head * head_dim
        f0: T.let = u * BLOCK - MAX_PAST  # frame of window column 0
        for i in T.unroll(20):
            s[i] = _f32(0.0)
        for i in T.unroll(16):
            bq[i] = _f32(0.0)
        # ---- S = q.k over the window and B = q.r over the distances, in head-dim slices of 16
        for dc in range(head_dim // DS):
            for it in T.unroll(BLOCK * DS // THREADS):
                qw: T.let = (it * THREADS + tx) // DS
                qd: T.let = (it * THREADS + tx) % DS
                q_s[qd, qw] = T.if_then_else(u * BLOCK + qw < frames,
                                             q[T.min(b * frames + u * BLOCK + qw, rows - 1), col0 + dc * DS + qd],
                                             _f32(0.0))
            for it in T.unroll(WIN * DS // THREADS):
                kc: T.let = (it * THREADS + tx) // DS
                kd: T.let = (it * THREADS + tx) % DS
                k_s[kd, kc] = T.if_then_else(
                    f0 + kc >= 0 and f0 + kc < frames,
                    k[b * frames + T.max(T.min(f0 + kc, frames - 1), 0), col0 + dc * DS + kd], _f32(0.0))
            T.cuda.cta_sync()
            for dd in T.unroll(DS):
                for i in T.unroll(4):
                    qa[i] = q_s[dd, warp * 4 + i]
                for t in T.unroll(5):
                    kb[t] = k_s[dd, lane + 32 * t]
                for t in T.unroll(4):
                    rl[t] = rel_t[col0 + dc * DS + dd, lane + 32 * t]
                for i in T.unroll(4):
                    for t in T.unroll(5):
                        s[i * 5 + t] = s[i * 5 + t] + qa[i] * kb[t]
                    for t in T.unroll(4):
                        bq[i * 4 + t] = bq[i * 4 + t] + qa[i] * rl[t]
            T.cuda.cta_sync()
        # ---- relative shift, soft cap, mask, softmax; P to shared memory
        for i in T.unroll(4):
            w: T.let = warp * 4 + i
            src: T.let = (lane - w + 32) % 32
            for t in T.unroll(5):
                cur: T.f32 = _f32(0.0)
                prev: T.f32 = _f32(0.0)
                if t < 4:
                    cur = bq[i * 4 + t]
                if t >= 1:
                    prev = bq[i * 4 + t - 1]
                cur = T.cuda.__shfl_sync(T.uint32(0xFFFFFFFF), cur, src, 32)
                prev = T.cuda.__shfl_sync(T.uint32(0xFFFFFFFF), prev, src, 32)
                cw: T.let = lane + 32 * t - w  # window column minus query row
                ff: T.let = f0 + lane + 32 * t
                zc: T.f32 = T.float32(T.tanh(T.float64(div_precise(
                    s[i * 5 + t] + T.if_then_else(lane >= w, cur, prev), cap)))) * cap
                z[t] = T.if_then_else(
                    cw >= 0 and cw <= MAX_PAST and lane + 32 * t < WIN - 1 and ff >= 0 and ff < frames
                    and mask[b, T.max(T.min(ff, frames - 1), 0)] == 0, zc, _f32(NEG))
            mx: T.f32 = T.max(T.max(T.max(z[0], z[1]), T.max(z[2], z[3])), z[4])
            for sh in T.unroll(5):
                mx = T.max(mx, T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), mx, T.shift_left(1, sh), 32))
            tot: T.f32 = _f32(0.0)
            for t in T.unroll(5):
                z[t] = exp_precise(z[t] - mx)
                tot = tot + z[t]
            for sh in T.unroll(5):
                tot = tot + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), tot, T.shift_left(1, sh), 32)
            for t in T.unroll(5):
                p_s[w, lane + 32 * t] = div_precise(z[t], tot)
        # ---- O = P V over V slices of 16 frames, summed from zero per 32 frames
        for i in T.unroll(4 * dpl):
            acc[i] = _f32(0.0)
            part[i] = _f32(0.0)
        for vs in range(WIN // VS):
            for it in T.unroll(v_iters):
                if it * THREADS + tx < VS * head_dim:
                    vc: T.let = (it * THREADS + tx) // head_dim
                    vd: T.let = (it * THREADS + tx) % head_dim
                    v_s[vc, vd] = T.if_then_else(
                        f0 + vs * VS + vc >= 0 and f0 + vs * VS + vc < frames,
                        v[b * frames + T.max(T.min(f0 + vs * VS + vc, frames - 1), 0), col0 + vd], _f32(0.0))
            T.cuda.cta_sync()  # V slice visible (and P, before the first)
            for cc in T.unroll(VS):
                for i in T.unroll(4):
                    for e in T.unroll(dpl):
                        part[i * dpl + e] = part[i * dpl + e] + p_s[warp * 4 + i, vs * VS + cc] * v_s[
                            cc, T.min(lane + 32 * e, head_dim - 1)]
            T.cuda.cta_sync()  # every thread is done with the V slice
            if vs % 2 == 1:
                for i in T.unroll(4 * dpl):
                    acc[i] = acc[i] + part[i]
                    part[i] = _f32(0.0)
        for i in T.unroll(4):
            if u * BLOCK + warp * 4 + i < frames:
                for e in T.unroll(dpl):
                    if lane + 32 * e < head_dim:
                        out[b * frames + u * BLOCK + warp * 4 + i, col0 + lane + 32 * e] = acc[i * dpl + e]

    return mkb_local_attention


_MAKERS = {"sinusoid": _sinusoid_kernel, "gemm": _gemm_kernel, "attention": _attention_kernel}


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _MAKERS[kind](*shape)}), target=target,
                                     tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(kind, shape):
    key = (kind, shape, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def solve(hidden_states, mask, q_proj_weight, k_proj_weight, v_proj_weight, pos_proj_weight, per_dim_scale,
          inv_timescales, attention_logits_soft_cap):
    batch, frames, channels = hidden_states.shape
    head_dim = per_dim_scale.shape[0]
    heads = channels // head_dim
    dev = hidden_states.device
    assert head_dim % DS == 0 and head_dim * heads == channels and channels % 2 == 0
    rows = batch * frames
    cp, kp = _up(channels, BN), _up(channels, BK * FOLD)
    x = _padded(hidden_states.reshape(rows, channels), (rows, kp))
    scale = per_dim_scale.contiguous()
    q_const = float(torch.tensor(head_dim ** -0.5 / math.log(2.0), dtype=torch.float32))
    proj = []
    for w, scaled in ((q_proj_weight, True), (k_proj_weight, False), (v_proj_weight, False)):
        c = torch.empty(rows, cp, dtype=torch.float32, device=dev)
        _kernel_fn("gemm", (rows, cp, kp, head_dim, head_dim, scaled))(x, _padded(w, (cp, kp)), c, scale, q_const)
        proj.append(c)
    sinus = torch.zeros(SPAN, kp, dtype=torch.float32, device=dev)
    _kernel_fn("sinusoid", (channels // 2, kp))(inv_timescales.contiguous(), sinus)
    rel_t = torch.empty(cp, SPAN, dtype=torch.float32, device=dev)  # relT[channel, j]
    _kernel_fn("gemm", (cp, SPAN, kp, head_dim, head_dim, False))(_padded(pos_proj_weight, (cp, kp)), sinus, rel_t,
                                                                 scale, q_const)
    out = torch.empty(rows, cp, dtype=torch.float32, device=dev)
    _kernel_fn("attention", (batch, frames, cp, cp, heads, head_dim))(*proj, rel_t, mask.to(torch.int32).contiguous(),
                                                                    out, float(attention_logits_soft_cap))
    out = out if cp == channels else out[:, :channels].contiguous()
    return out.view(batch, frames, heads, head_dim)


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


def _builds(batch=64, frames=1721, channels=512, heads=8):
    """The (kind, shape) builds of the graded workload (the problem's defaults), in launch order."""
    head_dim, rows = channels // heads, batch * frames
    return (("gemm", (rows, channels, channels, head_dim, head_dim, True)),
            ("gemm", (rows, channels, channels, head_dim, head_dim, False)),
            ("sinusoid", (channels // 2, channels)),
            ("gemm", (channels, SPAN, channels, head_dim, head_dim, False)),
            ("attention", (batch, frames, channels, channels, heads, head_dim)))


def kernel_sources(arch="sm_90a"):
    """{kernel symbol: generated CUDA source} of every kernel at the graded workload (for the GEMM, the
    source of the q build with its softplus scaling)."""
    sources = {}
    for kind, shape in _builds():
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        for name in _symbols(source):
            sources.setdefault(name, source)
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    names = list(kernel_sources(arch))
    for kind, shape in _builds():
        _build(kind, shape, arch)
    return names
