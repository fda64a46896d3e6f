"""TIRx oracle for problem 63: the complete Mamba-2 mixer layer of Nemotron-H (in_proj, causal conv +
SiLU, softplus dt, zero-state SSD scan, gated RMSNorm with the gate applied before the norm,
out_proj), bf16 module with an fp32 scan.

Five launches of four TIRx kernels; torch only allocates (and zero-pads for non-tile shapes).

1. ``mkb_proj_gemm`` (in_proj): zxbcdt = bf16(hidden W_in^T) on the tensor cores through the
   warp-level ``mma.sync.m16n8k16`` (bf16 operands, fp32 accumulation), issued as a TIRx PTX
   intrinsic with the fragments placed by hand. TIRx 0.27 has no WGMMA path for sm_90, so this is
   the Ampere-style instruction, slower than a WGMMA GEMM. A CTA computes a 128 x 128 tile with 8
   warps (2 x 4, each 64 x 32, i.e. 4 x 4 m16n8k16 tiles); K advances in slices of 32: each thread
   loads two 16-byte vectors (8 bf16) of A and two of W per slice into registers (the next slice's
   loads are issued before the current slice is computed) and stores them as 32-bit words holding
   bf16 pairs into shared-memory rows of 16 words padded to 20 (conflict-free fragment reads). A lane
   (g = lane / 4, t = lane % 4) reads A words (row g | g + 8, k-word t | t + 4) and W words
   (column g, k-word t | t + 4); its accumulators are rows g | g + 8, columns 2t, 2t + 1 of each
   16 x 8 tile, as the PTX ISA lays out m16n8k16. Every product of bf16 values is exact, so only the
   summation order differs from the reference's fp32 GEMM.
2. ``mkb_conv_act``: one CTA per token. For each xBC channel: conv = bias + sum_k w_k x_(t-3+k) in
   fp32 (taps before the sequence start are zero), rounded to bf16; sigmoid = 1 / (1 + exp(-conv))
   rounded to bf16; xBC = bf16(conv * sigmoid). For each head: s = bf16(dt_raw + dt_bias),
   dt = clamp(bf16(softplus(s)), min, max), softplus = s above 20, else log1p(exp(s)) (torch's
   threshold), kept in fp32.
3. ``mkb_ssd_scan``: the zero-state SSD scan as the step-by-step recurrence it regroups:
   h_t = exp(A dt_t) h_(t-1) + (x_t dt_t) B_t^T, y_t = h_t C_t, with A = -exp(A_log) and head h
   reading group h mod 8. One CTA per (head, sequence) keeps the whole state [head_dim, state] in
   fp32 registers for the sequence: a thread owns ``rp`` rows (p) and the state columns
   n = l, l + nl, ... of a lane group of nl threads (graded: 4 rows x 16 columns, 256 threads).
   Per stage of 16 steps the CTA stages B_t, C_t (widened to fp32), the head's x_t, dt_t and the
   decay exp(-exp(A_log) dt_t) in shared memory. Per step a thread updates its 64 state values and
   forms its partial sums of y_t[p] = sum_n C_t[n] h_t[p, n]; xor shuffles inside the lane group
   finish them, and y = bf16(y + D x) is written. The reference's chunked form (fp32 cumulative
   sums of A dt, exp of their differences) is the same sum regrouped and is rounded to bf16 at
   once; the CPU emulation of this recurrence meets the grader's comparison with room, so fp32
   suffices (the state decays each step, so its rounding errors do not build up).
4. ``mkb_gated_norm``: one CTA per (token, norm group of inner / 8 channels). g = y * silu(z) in
   fp32, sum of g^2 by ``T.cuda.cta_sum``, r = rsqrt(sum / group + eps), normed = bf16((g r) w).
5. ``mkb_proj_gemm`` (out_proj): output = bf16(normed W_out^T), the same GEMM.
NVRTC builds TIRx kernels with --use_fast_math, so exp and the divisions in sigmoid, softplus, the
decays and silu are precise forms written out here (a range-reduced polynomial exp and a
Newton-corrected quotient); the fast rsqrt (about 2 ulp) is far below the bf16 rounding after it.
Shapes that are not tile multiples (the small workload) use zero-padded scratch GEMM operands; the
graded shapes need none.
"""

import torch
import tvm
from tvm.script import tirx as T

GROUPS = 8
CONV = 4
BM = 128
BN = 128
BK = 32
PAD = BK // 2 + 4  # 32-bit words per shared-memory row: 16 of data and 4 of padding
THREADS = 256
ACT_THREADS = 256
STAGE = 16  # scan steps staged in shared memory at once
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


def sigmoid_precise(x):
    """1 / (1 + exp(-x)) with the precise exp and division (0 where exp overflows)."""

    def with_den(den):
        return T.if_then_else(den > _f32(3.0e38), _f32(0.0), div_precise(_f32(1.0), den))

    return _let(_f32(1.0) + exp_precise(_f32(0.0) - x), with_den, "den")


def silu_precise(g):
    """g / (1 + exp(-g)), torch's silu, with the precise exp and division (0 where exp overflows)."""

    def with_g(gv):
        def with_den(den):
            return T.if_then_else(den > _f32(3.0e38), _f32(0.0), div_precise(gv, den))

        return _let(_f32(1.0) + exp_precise(_f32(0.0) - gv), with_den, "den")

    return _let(g, with_g, "g")


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return T.float32(T.bfloat16(x))


def _gemm_kernel(m, n, k):
    """C[m, n] = bf16(sum_k A[m, k] B[n, k]); m, n multiples of 128, k of 32."""
    k_tiles = k // BK
    tiles_n = n // BN

    @T.prim_func
    def mkb_proj_gemm(a_h: T.handle, b_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "bfloat16")
        B = T.match_buffer(b_h, (n, k), "bfloat16")
        C = T.match_buffer(c_h, (m, n), "bfloat16")
        T.device_entry()
        cta = T.cta_id([(m // BM) * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BM, PAD), "uint32", scope="shared")
        b_s = T.alloc_buffer((BN, PAD), "uint32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((16,), "uint32", scope="local")
        bfr = T.alloc_buffer((8,), "uint32", scope="local")
        ra = T.alloc_buffer((16,), "bfloat16", scope="local")
        rb = T.alloc_buffer((16,), "bfloat16", scope="local")
        ra_w = T.decl_buffer((8,), "uint32", data=ra.data, scope="local")
        rb_w = T.decl_buffer((8,), "uint32", data=rb.data, scope="local")
        out = T.alloc_buffer((2,), "bfloat16", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wr: T.let = (warp // 4) * 64
        wc: T.let = (warp % 4) * 32
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            for j in T.vectorized(8):
                ra[h * 8 + j] = A[row0 + (tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 8 + j]
            for j in T.vectorized(8):
                rb[h * 8 + j] = B[col0 + (tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 8 + j]
        for kt in range(k_tiles):
            for h in T.unroll(2):
                for j in T.vectorized(4):
                    a_s[(tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 4 + j] = ra_w[h * 4 + j]
                for j in T.vectorized(4):
                    b_s[(tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 4 + j] = rb_w[h * 4 + j]
            T.cuda.cta_sync()
            if kt + 1 < k_tiles:
                for h in T.unroll(2):
                    for j in T.vectorized(8):
                        ra[h * 8 + j] = A[row0 + (tx + h * THREADS) // 4,
                                          (kt + 1) * BK + ((tx + h * THREADS) % 4) * 8 + j]
                    for j in T.vectorized(8):
                        rb[h * 8 + j] = B[col0 + (tx + h * THREADS) // 4,
                                          (kt + 1) * BK + ((tx + h * THREADS) % 4) * 8 + j]
            for ks in T.unroll(2):
                for mt in T.unroll(4):
                    af[mt * 4 + 0] = a_s[wr + mt * 16 + g, ks * 8 + t]
                    af[mt * 4 + 1] = a_s[wr + mt * 16 + g + 8, ks * 8 + t]
                    af[mt * 4 + 2] = a_s[wr + mt * 16 + g, ks * 8 + t + 4]
                    af[mt * 4 + 3] = a_s[wr + mt * 16 + g + 8, ks * 8 + t + 4]
                for nt in T.unroll(4):
                    bfr[nt * 2 + 0] = b_s[wc + nt * 8 + g, ks * 8 + t]
                    bfr[nt * 2 + 1] = b_s[wc + nt * 8 + g, ks * 8 + t + 4]
                for mt in T.unroll(4):
                    for nt in T.unroll(4):
                        T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"](
                            acc[(mt * 4 + nt) * 4 + 0], acc[(mt * 4 + nt) * 4 + 1],
                            acc[(mt * 4 + nt) * 4 + 2], acc[(mt * 4 + nt) * 4 + 3],
                            af[mt * 4 + 0], af[mt * 4 + 1], af[mt * 4 + 2], af[mt * 4 + 3],
                            bfr[nt * 2 + 0], bfr[nt * 2 + 1],
                            acc[(mt * 4 + nt) * 4 + 0], acc[(mt * 4 + nt) * 4 + 1],
                            acc[(mt * 4 + nt) * 4 + 2], acc[(mt * 4 + nt) * 4 + 3])
            T.cuda.cta_sync()
        for mt in T.unroll(4):
            for nt in T.unroll(4):
                for hr in T.unroll(2):
                    for j in T.unroll(2):
                        out[j] = T.bfloat16(acc[(mt * 4 + nt) * 4 + hr * 2 + j])
                    for j in T.vectorized(2):
                        C[row0 + wr + mt * 16 + hr * 8 + g, col0 + wc + nt * 8 + t * 2 + j] = out[j]

    return mkb_proj_gemm


def _conv_kernel(tokens, seqlen, zx_cols, inner, conv_dim, heads):
    """xBC = bf16(conv * bf16(sigmoid(conv))), conv = bf16(causal conv + bias); dt = clamp(bf16(softplus))."""

    @T.prim_func
    def mkb_conv_act(zx_h: T.handle, w_h: T.handle, b_h: T.handle, dtb_h: T.handle, xbc_h: T.handle,
                     dt_h: T.handle, tmin: T.float32, tmax: T.float32):
        zx = T.match_buffer(zx_h, (tokens, zx_cols), "bfloat16")
        cw = T.match_buffer(w_h, (conv_dim, 1, CONV), "bfloat16")
        cb = T.match_buffer(b_h, (conv_dim,), "bfloat16")
        dtb = T.match_buffer(dtb_h, (heads,), "bfloat16")
        xbc = T.match_buffer(xbc_h, (tokens, conv_dim), "bfloat16")
        dt = T.match_buffer(dt_h, (tokens, heads), "float32")
        T.device_entry()
        tok = T.cta_id([tokens])
        tx = T.thread_id([ACT_THREADS])
        acc = T.alloc_buffer((1,), "float32", scope="local")
        t: T.let = tok % seqlen
        for it in range(T.ceildiv(conv_dim, ACT_THREADS)):
            if it * ACT_THREADS + tx < conv_dim:
                acc[0] = T.float32(cb[it * ACT_THREADS + tx])
                for k in T.unroll(CONV):
                    if t >= CONV - 1 - k:
                        acc[0] = acc[0] + T.float32(cw[it * ACT_THREADS + tx, 0, k]) * T.float32(
                            zx[tok - (CONV - 1 - k), inner + it * ACT_THREADS + tx])
                cv: T.f32 = _bf16(acc[0])
                xbc[tok, it * ACT_THREADS + tx] = T.bfloat16(cv * _bf16(sigmoid_precise(cv)))
        for it in range(T.ceildiv(heads, ACT_THREADS)):
            if it * ACT_THREADS + tx < heads:
                s: T.f32 = _bf16(T.float32(zx[tok, inner + conv_dim + it * ACT_THREADS + tx])
                                 + T.float32(dtb[it * ACT_THREADS + tx]))
                v: T.f32 = _bf16(T.if_then_else(s > _f32(20.0), s, T.log1p(exp_precise(s))))
                dt[tok, it * ACT_THREADS + tx] = T.min(T.max(v, tmin), tmax)

    return mkb_conv_act


def _scan_plan(head_dim, state):
    """(rows per thread rp, lanes per row group nl, state columns per lane ns, row groups, threads)."""
    nl = 1
    while nl * 2 <= 16 and state % (nl * 2) == 0:
        nl *= 2
    rp = 4 if head_dim % 4 == 0 else (2 if head_dim % 2 == 0 else 1)
    groups = head_dim // rp
    threads = (groups * nl + 31) // 32 * 32
    return rp, nl, state // nl, groups, threads


def _scan_kernel(tokens, seqlen, conv_dim, heads, head_dim, state):
    rp, nl, ns, groups, threads = _scan_plan(head_dim, state)
    inner = heads * head_dim
    batch = tokens // seqlen
    offsets = []
    offset = nl // 2
    while offset > 0:
        offsets.append(offset)
        offset //= 2

    @T.prim_func
    def mkb_ssd_scan(xbc_h: T.handle, dt_h: T.handle, alog_h: T.handle, d_h: T.handle, y_h: T.handle):
        xbc = T.match_buffer(xbc_h, (tokens, conv_dim), "bfloat16")
        dt = T.match_buffer(dt_h, (tokens, heads), "float32")
        a_log = T.match_buffer(alog_h, (heads,), "bfloat16")
        dsk = T.match_buffer(d_h, (heads,), "bfloat16")
        y = T.match_buffer(y_h, (tokens, inner), "bfloat16")
        T.device_entry()
        h, bi = T.cta_id([heads, batch])
        tx = T.thread_id([threads])
        bs = T.alloc_buffer((STAGE, state), "float32", scope="shared")
        cs = T.alloc_buffer((STAGE, state), "float32", scope="shared")
        xs = T.alloc_buffer((STAGE, head_dim), "float32", scope="shared")
        dts = T.alloc_buffer((STAGE,), "float32", scope="shared")
        das = T.alloc_buffer((STAGE,), "float32", scope="shared")
        st = T.alloc_buffer((rp * ns,), "float32", scope="local")
        yp = T.alloc_buffer((rp,), "float32", scope="local")
        xd = T.alloc_buffer((rp,), "float32", scope="local")
        b_off: T.let = inner + (h % GROUPS) * state
        c_off: T.let = inner + GROUPS * state + (h % GROUPS) * state
        lane: T.let = tx % nl
        grp: T.let = T.min(tx // nl, groups - 1)
        row0: T.let = bi * seqlen
        neg_a: T.f32 = exp_precise(T.float32(a_log[h]))
        dskip: T.f32 = T.float32(dsk[h])
        for i in T.unroll(rp * ns):
            st[i] = _f32(0.0)
        for stage in range(T.ceildiv(seqlen, STAGE)):
            t0: T.let = stage * STAGE
            for it in range(T.ceildiv(STAGE * state, threads)):
                if it * threads + tx < STAGE * state:
                    s: T.let = (it * threads + tx) // state
                    n: T.let = (it * threads + tx) % state
                    bs[s, n] = T.if_then_else(t0 + s < seqlen,
                                              T.float32(xbc[row0 + T.min(t0 + s, seqlen - 1), b_off + n]), _f32(0.0))
                    cs[s, n] = T.if_then_else(t0 + s < seqlen,
                                              T.float32(xbc[row0 + T.min(t0 + s, seqlen - 1), c_off + n]), _f32(0.0))
            for it in range(T.ceildiv(STAGE * head_dim, threads)):
                if it * threads + tx < STAGE * head_dim:
                    sx: T.let = (it * threads + tx) // head_dim
                    p: T.let = (it * threads + tx) % head_dim
                    xs[sx, p] = T.if_then_else(
                        t0 + sx < seqlen, T.float32(xbc[row0 + T.min(t0 + sx, seqlen - 1), h * head_dim + p]),
                        _f32(0.0))
            if tx < STAGE:
                dts[tx] = T.if_then_else(t0 + tx < seqlen, dt[row0 + T.min(t0 + tx, seqlen - 1), h], _f32(0.0))
                das[tx] = exp_precise((_f32(0.0) - neg_a) * dts[tx])
            T.cuda.cta_sync()
            for s3 in range(T.min(seqlen - t0, STAGE)):
                for r in T.unroll(rp):
                    xd[r] = xs[s3, grp * rp + r] * dts[s3]
                    yp[r] = _f32(0.0)
                for j in T.unroll(ns):
                    for r in T.unroll(rp):
                        st[r * ns + j] = st[r * ns + j] * das[s3] + xd[r] * bs[s3, lane + nl * j]
                        yp[r] = yp[r] + cs[s3, lane + nl * j] * st[r * ns + j]
                for r in T.unroll(rp):
                    for m in T.unroll(len(offsets)):
                        yp[r] = yp[r] + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), yp[r],
                                                                T.shift_right(nl, m + 1), 32)
                    if tx // nl < groups and lane == 0:
                        y[row0 + t0 + s3, h * head_dim + grp * rp + r] = T.bfloat16(
                            yp[r] + dskip * xs[s3, grp * rp + r])
            T.cuda.cta_sync()

    return mkb_ssd_scan


def _norm_plan(width):
    threads = min(256, (width + 31) // 32 * 32)
    return threads, (width + threads - 1) // threads


def _norm_kernel(tokens, inner, zx_cols, normed_cols):
    """normed[tok, c] = bf16((g * rsqrt(mean_group(g^2) + eps)) * w), g = y * silu(z), per group of inner / 8."""
    width = inner // GROUPS
    threads, steps = _norm_plan(width)
    warps = threads // 32

    @T.prim_func
    def mkb_gated_norm(y_h: T.handle, zx_h: T.handle, w_h: T.handle, n_h: T.handle, eps: T.float32):
        y = T.match_buffer(y_h, (tokens, inner), "bfloat16")
        zx = T.match_buffer(zx_h, (tokens, zx_cols), "bfloat16")
        w = T.match_buffer(w_h, (inner,), "bfloat16")
        normed = T.match_buffer(n_h, (tokens, normed_cols), "bfloat16")
        T.device_entry()
        gi, tok = T.cta_id([GROUPS, tokens])
        tx = T.thread_id([threads])
        scratch = T.alloc_buffer((warps,), "float32", scope="shared")
        vals = T.alloc_buffer((steps,), "float32", scope="local")
        sq: T.f32 = _f32(0.0)
        for i in T.unroll(steps):
            vals[i] = _f32(0.0)
            if i * threads + tx < width:
                vals[i] = T.float32(y[tok, gi * width + i * threads + tx]) * silu_precise(
                    T.float32(zx[tok, gi * width + i * threads + tx]))
                sq = sq + vals[i] * vals[i]
        total: T.f32 = T.cuda.cta_sum(sq, warps, scratch.ptr_to([0]))
        r: T.f32 = T.rsqrt(div_precise(total, _f32(width)) + eps)
        for i in T.unroll(steps):
            if i * threads + tx < width:
                normed[tok, gi * width + i * threads + tx] = T.bfloat16(
                    (vals[i] * r) * T.float32(w[gi * width + i * threads + tx]))

    return mkb_gated_norm


_MAKERS = {"gemm": _gemm_kernel, "conv": _conv_kernel, "scan": _scan_kernel, "norm": _norm_kernel}


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        func = _MAKERS[kind](*shape)
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline="tirx")
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


def _padded(w, shape):
    if tuple(w.shape) == tuple(shape):
        return w.contiguous()
    p = torch.zeros(*shape, dtype=torch.bfloat16, device=w.device)
    p[tuple(slice(0, s) for s in w.shape)] = w
    return p


def solve(hidden_states, in_proj_weight, conv1d_weight, conv1d_bias, dt_bias, A_log, D, norm_weight,
          out_proj_weight, time_step_limit_min, time_step_limit_max, layer_norm_epsilon):
    batch, seqlen, hidden = hidden_states.shape
    heads, inner, conv_dim = A_log.shape[0], norm_weight.shape[0], conv1d_weight.shape[0]
    head_dim, state = inner // heads, (conv_dim - inner) // (2 * GROUPS)
    proj = in_proj_weight.shape[0]
    tokens = batch * seqlen
    dev = hidden_states.device
    out = torch.empty(batch, seqlen, hidden, dtype=torch.bfloat16, device=dev)
    if tokens == 0:
        return out
    mp, k1, n1 = _up(tokens, BM), _up(hidden, BK), _up(proj, BN)
    k2, n2 = _up(inner, BK), _up(hidden, BN)

    a1 = _padded(hidden_states.reshape(tokens, hidden), (mp, k1))
    zx = torch.empty(mp, n1, dtype=torch.bfloat16, device=dev)
    _kernel_fn("gemm", (mp, n1, k1))(a1, _padded(in_proj_weight, (n1, k1)), zx)

    zx_t = zx[:tokens]
    xbc = torch.empty(tokens, conv_dim, dtype=torch.bfloat16, device=dev)
    dt = torch.empty(tokens, heads, dtype=torch.float32, device=dev)
    _kernel_fn("conv", (tokens, seqlen, n1, inner, conv_dim, heads))(
        zx_t, conv1d_weight.contiguous(), conv1d_bias.contiguous(), dt_bias.contiguous(), xbc, dt,
        float(time_step_limit_min), float(time_step_limit_max))

    y = torch.empty(tokens, inner, dtype=torch.bfloat16, device=dev)
    _kernel_fn("scan", (tokens, seqlen, conv_dim, heads, head_dim, state))(xbc, dt, A_log.contiguous(),
                                                                           D.contiguous(), y)

    if (mp, k2) != (tokens, inner):
        normed = torch.zeros(mp, k2, dtype=torch.bfloat16, device=dev)
    else:
        normed = torch.empty(mp, k2, dtype=torch.bfloat16, device=dev)
    _kernel_fn("norm", (tokens, inner, n1, k2))(y, zx_t, norm_weight.contiguous(), normed[:tokens],
                                                float(layer_norm_epsilon))

    flat = out.view(tokens, hidden)
    c = flat if (mp, n2) == (tokens, hidden) else torch.empty(mp, n2, dtype=torch.bfloat16, device=dev)
    _kernel_fn("gemm", (mp, n2, k2))(normed, _padded(out_proj_weight, (n2, k2)), c)
    if c.data_ptr() != flat.data_ptr():
        flat.copy_(c[:tokens, :hidden])
    return out


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


def _builds(batch, seqlen, hidden, heads, head_dim, state):
    tokens, inner = batch * seqlen, heads * head_dim
    conv_dim = inner + 2 * GROUPS * state
    proj = inner + conv_dim + heads
    return (("gemm", (tokens, proj, hidden)), ("conv", (tokens, seqlen, proj, inner, conv_dim, heads)),
            ("scan", (tokens, seqlen, conv_dim, heads, head_dim, state)), ("norm", (tokens, inner, proj, inner)),
            ("gemm", (tokens, hidden, inner)))


def kernel_sources(arch="sm_90a", batch=8, seqlen=512, hidden=8192, heads=256, head_dim=64, state=256,
                   out_proj=False):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults): in_proj,
    conv, scan and norm kernels, or with out_proj=True the out_proj GEMM build (same symbol)."""
    builds = _builds(batch, seqlen, hidden, heads, head_dim, state)
    builds = builds[4:] if out_proj else builds[:4]
    sources = {}
    for kind, shape in builds:
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    names = list(kernel_sources(arch))
    kernel_sources(arch, out_proj=True)
    return names
