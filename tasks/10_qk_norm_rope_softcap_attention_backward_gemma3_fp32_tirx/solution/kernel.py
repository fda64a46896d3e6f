"""TIRx oracle for problem 10: backward of the Gemma-3 attention core (q/k RMSNorm, RoPE, soft-capped
causal GQA), recomputing the forward, fp32 throughout (no TF32).

Everything runs in fp32 SIMT kernels (the reference is judged at fp32 tolerance, so TF32 tensor cores
would be too coarse, and TIRx 0.27 has no WGMMA path for sm_90). NVRTC builds with --use_fast_math,
so the few transcendental operations and divisions are done in fp64 (untouched by fast math) and
rounded to fp32 once: tanh, exp, sqrt and the softmax division. Eight TIRx kernels:

``mkb_gemm``: a shared-memory tiled SIMT GEMM, C = A B over a batch of matrices (CTA grid: tiles x
batch). A 256-thread CTA computes a 128 x 128 tile; K advances in slices of 16 held K-major in shared
memory, the next slice's global loads issued before the current slice is computed. A is stored [M, K]
(loaded as 8 consecutive K values and transposed on the store) or [K, M]; B is stored [K, N] or
[N, K] (then loaded like an [M, K] A). Each thread accumulates an 8 x 8 block from float4 shared-memory
reads. Sums are two-level: every chunk of 128 K values is summed from zero and then added to the
running total (near the error of a blocked library GEMM). An accumulate build adds the tile to C's
previous contents (grad_hidden = ((dq W_q) + dk W_k) + dv W_v, the reference's order). It is built
for: the q/k/v projections x W^T; the logits Q K^T per (sequence, KV head) with the G query heads of a
group stacked as G*S rows; O = P V; dO = dy W_o; dP = dO V^T; dQ = dS K; dK = dS^T Q and dV = P^T dO
(A read transposed, K = G*S sums the group's heads); the weight gradients dy^T O and d_lin^T x; the
input gradient.

``mkb_normrope``: one thread per (token, head) row: r = 1 / sqrt(mean(x^2) + eps), y = (x r)(1 + w),
rotate-half RoPE y cos + rot(y) sin, stored head-major [B, heads, S, D]. ``mkb_headmajor`` transposes
v to the same layout.

``mkb_softmax``: one warp per logits row (lanes over keys): t = tanh(z fp32(scaling / cap)), c = t cap,
causal mask, row max and sum by xor shuffles, p = exp(c - max) / sum; stores p and t.

``mkb_dsoftmax``: one warp per row: s = sum_j dP P, dS = ((P (dP - s)) (1 - t^2)) scaling.

``mkb_normbwd``: one thread per (token, head) row: the inverse RoPE dn = dq cos + rot^T(dq sin),
x_hat = x r, g = dn (1 + w), d_lin = r (g - x_hat mean(g x_hat)) stored token-major, and dn x_hat
stored per row for the weight gradient.

``mkb_colsum`` / ``mkb_colsum_final``: the norm weights' gradients: per-CTA fp64 column sums of 256
rows, then an fp64 sum of the CTA partials.

Layouts between kernels that the GEMMs cannot address directly (O and dO between token-major and
head-major) are torch permute copies. Shapes that are not tile multiples (the small workload) are
zero-padded by the host: head_dim to 128 per head, seq to a multiple of 128 per sequence, hidden to a
multiple of 128; padded keys are causally masked, padded query rows carry dy = 0, so they add nothing;
results are sliced.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 4): 82.1 ms against the
eager reference's 58.1 ms (0.71x). Over the problem's declared arithmetic (2.24 TFLOP, its
physical_floor) that is 27.3 TFLOP/s against eager's 38.6: both issue the fp32 products as CUDA-core
FMAs (the H100 SXM's rate without tensor cores is about 67 TFLOP/s), and the cuBLAS SGEMM kernels that
eager calls issue them faster than these tiled SIMT loops; fusing the elementwise steps does not make up
the difference. The route that would beat eager, not taken here: fp32-accurate products on the tensor
cores by the 3xTF32 split (each fp32 operand as a TF32 high part plus a TF32 residual; three TF32
products summed in fp32), at several times the FMA rate, keeping this kernel's fusion. In TIRx the
products would be mma.sync TF32 instructions written as raw PTX: its tile GEMM takes only f16 and bf16,
and it has no wgmma primitive for sm_90.
"""

import torch
import tvm
from tvm.script import tirx as T

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=256, hidden=3072, heads=24, kv_heads=8, head_dim=128)
BM = 128
BN = 128
BK = 16
FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
THREADS = 256
ROWS = 128  # threads per CTA of the per-row kernels
CS = 256  # rows per CTA of the column sums
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _gemm_kernel(nb, m, n, k, a_km, b_nk, accumulate):
    """C [nb, m, n] (+)= A B; A stored [nb, m, k] (or [nb, k, m] when a_km), B [nb, k, n] (or [nb, n, k]
    when b_nk); m, n, k multiples of 128."""
    k_tiles = k // BK
    tiles_n = n // BN
    a_shape = (nb, k, m) if a_km else (nb, m, k)
    b_shape = (nb, n, k) if b_nk else (nb, k, n)

    @T.prim_func
    def mkb_gemm(a_h: T.handle, b_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, a_shape, "float32")
        B = T.match_buffer(b_h, b_shape, "float32")
        C = T.match_buffer(c_h, (nb, m, n), "float32")
        T.device_entry()
        cta, bz = T.cta_id([(m // BM) * tiles_n, nb])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK, BM), "float32", scope="shared")
        b_s = T.alloc_buffer((BK, BN), "float32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        part = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "float32", scope="local")
        bf = T.alloc_buffer((8,), "float32", scope="local")
        ra = T.alloc_buffer((8,), "float32", scope="local")
        rb = T.alloc_buffer((8,), "float32", scope="local")
        old = T.alloc_buffer((4,), "float32", scope="local")
        out = T.alloc_buffer((4,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx // 2
        lk: T.let = (tx % 2) * 8
        kr: T.let = tx // 16
        xo: T.let = (tx % 16) * 8
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            if a_km:
                for j in T.vectorized(4):
                    ra[h * 4 + j] = A[bz, kr, row0 + xo + h * 4 + j]
            else:
                for j in T.vectorized(4):
                    ra[h * 4 + j] = A[bz, row0 + lrow, lk + h * 4 + j]
            if b_nk:
                for j in T.vectorized(4):
                    rb[h * 4 + j] = B[bz, col0 + lrow, lk + h * 4 + j]
            else:
                for j in T.vectorized(4):
                    rb[h * 4 + j] = B[bz, kr, col0 + xo + h * 4 + j]
        for kc in range(k_tiles // FOLD):
            for i in T.unroll(64):
                part[i] = T.float32(0.0)
            for ks in range(FOLD):
                if a_km:
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            a_s[kr, xo + h * 4 + j] = ra[h * 4 + j]
                else:
                    for j in T.unroll(8):
                        a_s[lk + j, lrow] = ra[j]
                if b_nk:
                    for j in T.unroll(8):
                        b_s[lk + j, lrow] = rb[j]
                else:
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            b_s[kr, xo + h * 4 + j] = rb[h * 4 + j]
                T.cuda.cta_sync()
                if kc * FOLD + ks + 1 < k_tiles:  # next slice's loads fly while this slice is computed
                    for h in T.unroll(2):
                        if a_km:
                            for j in T.vectorized(4):
                                ra[h * 4 + j] = A[bz, (kc * FOLD + ks + 1) * BK + kr, row0 + xo + h * 4 + j]
                        else:
                            for j in T.vectorized(4):
                                ra[h * 4 + j] = A[bz, row0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                        if b_nk:
                            for j in T.vectorized(4):
                                rb[h * 4 + j] = B[bz, col0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                        else:
                            for j in T.vectorized(4):
                                rb[h * 4 + j] = B[bz, (kc * FOLD + ks + 1) * BK + kr, col0 + xo + h * 4 + j]
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
        for i in T.unroll(8):
            for jh in T.unroll(2):
                if accumulate:
                    for j in T.vectorized(4):
                        old[j] = C[bz, row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j]
                    for j in T.unroll(4):
                        out[j] = old[j] + acc[i * 8 + jh * 4 + j]
                else:
                    for j in T.unroll(4):
                        out[j] = acc[i * 8 + jh * 4 + j]
                for j in T.vectorized(4):
                    C[bz, row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = out[j]

    return mkb_gemm


def _normrope_kernel(tp, nh, batch, seq, seq_p, d, d_p, eps):
    """lin [tp, nh*d_p] token-major -> out [batch, nh, seq_p, d_p] normed and rotated; rr [tp*nh] = r."""
    rows = tp * nh
    half = d // 2

    @T.prim_func
    def mkb_normrope(l_h: T.handle, w_h: T.handle, c_h: T.handle, s_h: T.handle, o_h: T.handle, r_h: T.handle):
        lin = T.match_buffer(l_h, (tp, nh * d_p), "float32")
        w = T.match_buffer(w_h, (d,), "float32")
        cos = T.match_buffer(c_h, (batch, seq, d), "float32")
        sin = T.match_buffer(s_h, (batch, seq, d), "float32")
        out = T.match_buffer(o_h, (batch, nh, seq_p, d_p), "float32")
        rr = T.match_buffer(r_h, (rows,), "float32")
        T.device_entry()
        cta = T.cta_id([(rows + ROWS - 1) // ROWS])
        tx = T.thread_id([ROWS])
        ss = T.alloc_buffer((1,), "float32", scope="local")
        rv = T.alloc_buffer((1,), "float32", scope="local")
        idx: T.let = cta * ROWS + tx
        tok: T.let = idx // nh
        h: T.let = idx % nh
        b: T.let = tok // seq_p
        s: T.let = tok % seq_p
        if idx < rows:
            if s < seq:
                ss[0] = _f32(0.0)
                for e in range(d):
                    ss[0] = ss[0] + lin[tok, h * d_p + e] * lin[tok, h * d_p + e]
                rv[0] = T.float32(T.float64(1.0) / T.sqrt(T.float64(ss[0] * _f32(1.0 / d) + _f32(eps))))
                rr[idx] = rv[0]
                for e in range(d):
                    ep: T.let = T.if_then_else(e < half, e + half, e - half)
                    y: T.let = (lin[tok, h * d_p + e] * rv[0]) * (_f32(1.0) + w[e])
                    yp: T.let = (lin[tok, h * d_p + ep] * rv[0]) * (_f32(1.0) + w[ep])
                    out[b, h, s, e] = y * cos[b, s, e] + T.if_then_else(e < half, _f32(0.0) - yp, yp) * sin[b, s, e]
                for e in range(d_p - d):
                    out[b, h, s, d + e] = _f32(0.0)
            else:
                rr[idx] = _f32(0.0)
                for e in range(d_p):
                    out[b, h, s, e] = _f32(0.0)

    return mkb_normrope


def _headmajor_kernel(tp, nh, batch, seq_p, d_p):
    """lin [tp, nh*d_p] token-major -> out [batch, nh, seq_p, d_p] (v)."""
    rows = tp * nh

    @T.prim_func
    def mkb_headmajor(l_h: T.handle, o_h: T.handle):
        lin = T.match_buffer(l_h, (tp, nh * d_p), "float32")
        out = T.match_buffer(o_h, (batch, nh, seq_p, d_p), "float32")
        T.device_entry()
        cta = T.cta_id([(rows + ROWS - 1) // ROWS])
        tx = T.thread_id([ROWS])
        idx: T.let = cta * ROWS + tx
        tok: T.let = idx // nh
        h: T.let = idx % nh
        if idx < rows:
            for e in range(d_p):
                out[tok // seq_p, h, tok % seq_p, e] = lin[tok, h * d_p + e]

    return mkb_headmajor


def _softmax_kernel(rows, seq_p, sc, cap):
    """lg [rows, seq_p] logits (overwritten by t = tanh), pr [rows, seq_p] probabilities."""
    steps = seq_p // 32

    @T.prim_func
    def mkb_softmax(l_h: T.handle, p_h: T.handle):
        lg = T.match_buffer(l_h, (rows, seq_p), "float32")
        pr = T.match_buffer(p_h, (rows, seq_p), "float32")
        T.device_entry()
        cta = T.cta_id([rows // (ROWS // 32)])
        tx = T.thread_id([ROWS])
        c = T.alloc_buffer((steps,), "float32", scope="local")
        mx = T.alloc_buffer((1,), "float32", scope="local")
        sm = T.alloc_buffer((1,), "float32", scope="local")
        row: T.let = cta * (ROWS // 32) + tx // 32
        lane: T.let = tx % 32
        qi: T.let = row % seq_p
        mx[0] = _f32(-3.0e38)
        for st in T.unroll(steps):
            tv: T.let = T.float32(T.tanh(T.float64(lg[row, st * 32 + lane] * _f32(sc))))
            lg[row, st * 32 + lane] = tv
            c[st] = tv * _f32(cap)
            if st * 32 + lane <= qi:
                mx[0] = T.max(mx[0], c[st])
        for sh in T.unroll(5):
            mx[0] = T.max(mx[0], T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), mx[0], T.shift_left(1, sh), 32))
        sm[0] = _f32(0.0)
        for st in T.unroll(steps):
            c[st] = T.if_then_else(st * 32 + lane <= qi, T.float32(T.exp(T.float64(c[st] - mx[0]))), _f32(0.0))
            sm[0] = sm[0] + c[st]
        for sh in T.unroll(5):
            sm[0] = sm[0] + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), sm[0], T.shift_left(1, sh), 32)
        for st in T.unroll(steps):
            pr[row, st * 32 + lane] = T.float32(T.float64(c[st]) / T.float64(sm[0]))

    return mkb_softmax


def _dsoftmax_kernel(rows, seq_p, scaling):
    """dp [rows, seq_p] (overwritten by dS), pr probabilities, tt = tanh of the scaled logits."""
    steps = seq_p // 32

    @T.prim_func
    def mkb_dsoftmax(d_h: T.handle, p_h: T.handle, t_h: T.handle):
        dp = T.match_buffer(d_h, (rows, seq_p), "float32")
        pr = T.match_buffer(p_h, (rows, seq_p), "float32")
        tt = T.match_buffer(t_h, (rows, seq_p), "float32")
        T.device_entry()
        cta = T.cta_id([rows // (ROWS // 32)])
        tx = T.thread_id([ROWS])
        s = T.alloc_buffer((1,), "float32", scope="local")
        row: T.let = cta * (ROWS // 32) + tx // 32
        lane: T.let = tx % 32
        s[0] = _f32(0.0)
        for st in T.unroll(steps):
            s[0] = s[0] + dp[row, st * 32 + lane] * pr[row, st * 32 + lane]
        for sh in T.unroll(5):
            s[0] = s[0] + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), s[0], T.shift_left(1, sh), 32)
        for st in T.unroll(steps):
            tv: T.let = tt[row, st * 32 + lane]
            dp[row, st * 32 + lane] = ((pr[row, st * 32 + lane] * (dp[row, st * 32 + lane] - s[0]))
                                       * (_f32(1.0) - tv * tv)) * _f32(scaling)

    return mkb_dsoftmax


def _normbwd_kernel(tp, nh, batch, seq, seq_p, d, d_p):
    """dq [batch, nh, seq_p, d_p] -> dlin [tp, nh*d_p] token-major; prod [tp*nh, d_p] = dn x_hat."""
    rows = tp * nh
    half = d // 2

    @T.prim_func
    def mkb_normbwd(q_h: T.handle, l_h: T.handle, r_h: T.handle, w_h: T.handle, c_h: T.handle, s_h: T.handle,
                    o_h: T.handle, p_h: T.handle):
        dq = T.match_buffer(q_h, (batch, nh, seq_p, d_p), "float32")
        lin = T.match_buffer(l_h, (tp, nh * d_p), "float32")
        rr = T.match_buffer(r_h, (rows,), "float32")
        w = T.match_buffer(w_h, (d,), "float32")
        cos = T.match_buffer(c_h, (batch, seq, d), "float32")
        sin = T.match_buffer(s_h, (batch, seq, d), "float32")
        dlin = T.match_buffer(o_h, (tp, nh * d_p), "float32")
        prod = T.match_buffer(p_h, (rows, d_p), "float32")
        T.device_entry()
        cta = T.cta_id([(rows + ROWS - 1) // ROWS])
        tx = T.thread_id([ROWS])
        m = T.alloc_buffer((1,), "float32", scope="local")
        idx: T.let = cta * ROWS + tx
        tok: T.let = idx // nh
        h: T.let = idx % nh
        b: T.let = tok // seq_p
        s: T.let = tok % seq_p
        if idx < rows:
            if s < seq:
                m[0] = _f32(0.0)
                for e in range(d):
                    ep: T.let = T.if_then_else(e < half, e + half, e - half)
                    rot: T.let = dq[b, h, s, ep] * sin[b, s, ep]
                    dn: T.let = dq[b, h, s, e] * cos[b, s, e] + T.if_then_else(e < half, rot, _f32(0.0) - rot)
                    m[0] = m[0] + (dn * (_f32(1.0) + w[e])) * (lin[tok, h * d_p + e] * rr[idx])
                m[0] = m[0] * _f32(1.0 / d)
                for e in range(d):
                    ep: T.let = T.if_then_else(e < half, e + half, e - half)
                    rot: T.let = dq[b, h, s, ep] * sin[b, s, ep]
                    dn: T.let = dq[b, h, s, e] * cos[b, s, e] + T.if_then_else(e < half, rot, _f32(0.0) - rot)
                    xh: T.let = lin[tok, h * d_p + e] * rr[idx]
                    dlin[tok, h * d_p + e] = rr[idx] * (dn * (_f32(1.0) + w[e]) - xh * m[0])
                    prod[idx, e] = dn * xh
                for e in range(d_p - d):
                    dlin[tok, h * d_p + d + e] = _f32(0.0)
                    prod[idx, d + e] = _f32(0.0)
            else:
                for e in range(d_p):
                    dlin[tok, h * d_p + e] = _f32(0.0)
                    prod[idx, e] = _f32(0.0)

    return mkb_normbwd


def _colsum_kernel(rows, d_p):
    """part[cta, c] = fp64 sum of prod[cta*256 .. +255, c] (thread = column)."""
    ctas = (rows + CS - 1) // CS

    @T.prim_func
    def mkb_colsum(p_h: T.handle, o_h: T.handle):
        prod = T.match_buffer(p_h, (rows, d_p), "float32")
        part = T.match_buffer(o_h, (ctas, d_p), "float64")
        T.device_entry()
        cta = T.cta_id([ctas])
        tx = T.thread_id([d_p])
        acc = T.alloc_buffer((1,), "float64", scope="local")
        acc[0] = T.float64(0.0)
        for i in range(CS):
            if cta * CS + i < rows:
                acc[0] = acc[0] + T.float64(prod[cta * CS + i, tx])
        part[cta, tx] = acc[0]

    return mkb_colsum


def _colsum_final_kernel(rows, d_p):
    ctas = (rows + CS - 1) // CS

    @T.prim_func
    def mkb_colsum_final(p_h: T.handle, o_h: T.handle):
        part = T.match_buffer(p_h, (ctas, d_p), "float64")
        out = T.match_buffer(o_h, (d_p,), "float32")
        T.device_entry()
        cta = T.cta_id([1])
        tx = T.thread_id([d_p])
        acc = T.alloc_buffer((1,), "float64", scope="local")
        acc[0] = T.float64(0.0)
        for i in range(ctas):
            acc[0] = acc[0] + part[i + cta, tx]
        out[tx] = T.float32(acc[0])

    return mkb_colsum_final


_MAKERS = {"gemm": _gemm_kernel, "normrope": _normrope_kernel, "headmajor": _headmajor_kernel,
           "softmax": _softmax_kernel, "dsoftmax": _dsoftmax_kernel, "normbwd": _normbwd_kernel,
           "colsum": _colsum_kernel, "colsum_final": _colsum_final_kernel}


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


def _launch(kind, shape, *args):
    key = (kind, shape, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    _FNS[key](*args)


def _up(x, tile):
    return (max(x, 1) + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def _gemm(a, b, c, a_km, b_nk, accumulate):
    """c [nb, m, n] (+)= a b for 3-D operands (see _gemm_kernel)."""
    nb, m, n = c.shape
    k = a.shape[1] if a_km else a.shape[2]
    _launch("gemm", (nb, m, n, k, a_km, b_nk, accumulate), a, b, c)


def _plan(batch, seq, hidden, heads, kv_heads, head_dim):
    seq_p, d_p, c_p = _up(seq, BM), _up(head_dim, 128), _up(hidden, BN)
    return seq_p, d_p, c_p, batch * seq_p


def solve(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight, o_weight, q_norm_weight,
          k_norm_weight, scaling, attn_logit_softcapping, rms_norm_eps):
    batch, seq, hidden = hidden_states.shape
    d = q_norm_weight.shape[0]
    heads, kvh = q_weight.shape[0] // d, k_weight.shape[0] // d
    g = heads // kvh
    seq_p, d_p, c_p, tp = _plan(batch, seq, hidden, heads, kvh, d)
    dev = hidden_states.device
    f32 = torch.float32
    scaling, cap, eps = float(scaling), float(attn_logit_softcapping), float(rms_norm_eps)

    x = _padded(hidden_states, (batch, seq_p, c_p)).view(1, tp, c_p)
    dy = _padded(grad_output, (batch, seq_p, c_p)).view(1, tp, c_p)
    wq = _padded(q_weight.view(heads, d, hidden), (heads, d_p, c_p)).view(1, heads * d_p, c_p)
    wk = _padded(k_weight.view(kvh, d, hidden), (kvh, d_p, c_p)).view(1, kvh * d_p, c_p)
    wv = _padded(v_weight.view(kvh, d, hidden), (kvh, d_p, c_p)).view(1, kvh * d_p, c_p)
    wo = _padded(o_weight.view(hidden, heads, d), (c_p, heads, d_p)).view(1, c_p, heads * d_p)
    cs, sn = cos.contiguous(), sin.contiguous()
    qw, kw = q_norm_weight.contiguous(), k_norm_weight.contiguous()

    # forward: projections, norms + RoPE (head-major), attention probabilities, O
    q_lin = torch.empty(1, tp, heads * d_p, dtype=f32, device=dev)
    k_lin = torch.empty(1, tp, kvh * d_p, dtype=f32, device=dev)
    v_lin = torch.empty(1, tp, kvh * d_p, dtype=f32, device=dev)
    _gemm(x, wq, q_lin, False, True, False)
    _gemm(x, wk, k_lin, False, True, False)
    _gemm(x, wv, v_lin, False, True, False)
    q = torch.empty(batch, heads, seq_p, d_p, dtype=f32, device=dev)
    k = torch.empty(batch, kvh, seq_p, d_p, dtype=f32, device=dev)
    v = torch.empty(batch, kvh, seq_p, d_p, dtype=f32, device=dev)
    q_r = torch.empty(tp * heads, dtype=f32, device=dev)
    k_r = torch.empty(tp * kvh, dtype=f32, device=dev)
    for lin, w, out, rr, nh in ((q_lin, qw, q, q_r, heads), (k_lin, kw, k, k_r, kvh)):
        _launch("normrope", (tp, nh, batch, seq, seq_p, d, d_p, eps), lin[0], w, cs, sn, out, rr)
    _launch("headmajor", (tp, kvh, batch, seq_p, d_p), v_lin[0], v)
    nb, gs = batch * kvh, g * seq_p
    q3, k3, v3 = q.view(nb, gs, d_p), k.view(nb, seq_p, d_p), v.view(nb, seq_p, d_p)
    tt = torch.empty(nb, gs, seq_p, dtype=f32, device=dev)
    pr = torch.empty(nb, gs, seq_p, dtype=f32, device=dev)
    _gemm(q3, k3, tt, False, True, False)
    rows = nb * gs
    _launch("softmax", (rows, seq_p, scaling / cap, cap), tt.view(rows, seq_p), pr.view(rows, seq_p))
    o = torch.empty(nb, gs, d_p, dtype=f32, device=dev)
    _gemm(pr, v3, o, False, False, False)
    o_flat = o.view(batch, heads, seq_p, d_p).permute(0, 2, 1, 3).reshape(1, tp, heads * d_p)

    # backward through o_proj, PV, softmax, soft cap and scaling
    dwo = torch.empty(1, c_p, heads * d_p, dtype=f32, device=dev)
    _gemm(dy, o_flat, dwo, True, False, False)
    d_attn = torch.empty(1, tp, heads * d_p, dtype=f32, device=dev)
    _gemm(dy, wo, d_attn, False, False, False)
    do3 = d_attn.view(batch, seq_p, heads, d_p).permute(0, 2, 1, 3).reshape(nb, gs, d_p)
    ds = torch.empty(nb, gs, seq_p, dtype=f32, device=dev)
    _gemm(do3, v3, ds, False, True, False)
    _launch("dsoftmax", (rows, seq_p, scaling), ds.view(rows, seq_p), pr.view(rows, seq_p), tt.view(rows, seq_p))
    dq = torch.empty(nb, gs, d_p, dtype=f32, device=dev)
    dk = torch.empty(nb, seq_p, d_p, dtype=f32, device=dev)
    dv = torch.empty(nb, seq_p, d_p, dtype=f32, device=dev)
    _gemm(ds, k3, dq, False, False, False)
    _gemm(ds, q3, dk, True, False, False)
    _gemm(pr, do3, dv, True, False, False)

    # inverse RoPE and RMSNorm backward, norm-weight gradients
    dq_lin = torch.empty(1, tp, heads * d_p, dtype=f32, device=dev)
    dk_lin = torch.empty(1, tp, kvh * d_p, dtype=f32, device=dev)
    gqw = torch.empty(d_p, dtype=f32, device=dev)
    gkw = torch.empty(d_p, dtype=f32, device=dev)
    for dgrad, lin, rr, w, dlin, gw, nh in ((dq, q_lin, q_r, qw, dq_lin, gqw, heads),
                                             (dk, k_lin, k_r, kw, dk_lin, gkw, kvh)):
        prod = torch.empty(tp * nh, d_p, dtype=f32, device=dev)
        part = torch.empty((tp * nh + CS - 1) // CS, d_p, dtype=torch.float64, device=dev)
        _launch("normbwd", (tp, nh, batch, seq, seq_p, d, d_p), dgrad.view(batch, nh, seq_p, d_p), lin[0], rr, w,
                cs, sn, dlin[0], prod)
        _launch("colsum", (tp * nh, d_p), prod, part)
        _launch("colsum_final", (tp * nh, d_p), part, gw)
    dv_lin = dv.view(batch, kvh, seq_p, d_p).permute(0, 2, 1, 3).reshape(1, tp, kvh * d_p)

    # input and weight gradients of the projections
    dx = torch.empty(1, tp, c_p, dtype=f32, device=dev)
    _gemm(dq_lin, wq, dx, False, False, False)
    _gemm(dk_lin, wk, dx, False, False, True)
    _gemm(dv_lin, wv, dx, False, False, True)
    dwq = torch.empty(1, heads * d_p, c_p, dtype=f32, device=dev)
    dwk = torch.empty(1, kvh * d_p, c_p, dtype=f32, device=dev)
    dwv = torch.empty(1, kvh * d_p, c_p, dtype=f32, device=dev)
    _gemm(dq_lin, x, dwq, True, False, False)
    _gemm(dk_lin, x, dwk, True, False, False)
    _gemm(dv_lin, x, dwv, True, False, False)

    def wgrad(t, nh):
        return t.view(nh, d_p, c_p)[:, :d, :hidden].reshape(nh * d, hidden).contiguous()

    return (dx.view(batch, seq_p, c_p)[:, :seq, :hidden].contiguous(), wgrad(dwq, heads), wgrad(dwk, kvh),
            wgrad(dwv, kvh), dwo.view(c_p, heads, d_p)[:hidden, :, :d].reshape(hidden, heads * d).contiguous(),
            gqw[:d].contiguous(), gkw[:d].contiguous())


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


def _builds(batch=64, seq=256, hidden=3072, heads=24, kv_heads=8, head_dim=128):
    """The distinct (kind, shape) builds of a workload (the graded one by default), in launch order."""
    seq_p, d_p, c_p, tp = _plan(batch, seq, hidden, heads, kv_heads, head_dim)
    nb, gs, hd, kd = batch * kv_heads, heads // kv_heads * seq_p, heads * d_p, kv_heads * d_p
    scaling, cap, eps = head_dim ** -0.5, 50.0, 1e-6
    builds = [("gemm", (1, tp, hd, c_p, False, True, False)), ("gemm", (1, tp, kd, c_p, False, True, False)),
              ("normrope", (tp, heads, batch, seq, seq_p, head_dim, d_p, eps)),
              ("normrope", (tp, kv_heads, batch, seq, seq_p, head_dim, d_p, eps)),
              ("headmajor", (tp, kv_heads, batch, seq_p, d_p)),
              ("gemm", (nb, gs, seq_p, d_p, False, True, False)), ("softmax", (nb * gs, seq_p, scaling / cap, cap)),
              ("gemm", (nb, gs, d_p, seq_p, False, False, False)), ("gemm", (1, c_p, hd, tp, True, False, False)),
              ("gemm", (1, tp, hd, c_p, False, False, False)), ("dsoftmax", (nb * gs, seq_p, scaling)),
              ("gemm", (nb, seq_p, d_p, gs, True, False, False)),
              ("normbwd", (tp, heads, batch, seq, seq_p, head_dim, d_p)),
              ("colsum", (tp * heads, d_p)), ("colsum_final", (tp * heads, d_p)),
              ("normbwd", (tp, kv_heads, batch, seq, seq_p, head_dim, d_p)),
              ("colsum", (tp * kv_heads, d_p)), ("colsum_final", (tp * kv_heads, d_p)),
              ("gemm", (1, tp, c_p, hd, False, False, False)), ("gemm", (1, tp, c_p, kd, False, False, True)),
              ("gemm", (1, hd, c_p, tp, True, False, False)), ("gemm", (1, kd, c_p, tp, True, False, False))]
    return list(dict.fromkeys(builds))


def kernel_sources(arch="sm_90a", builds=None):
    """{kernel symbol: generated CUDA source} at the graded workload: the first build of each kernel kind
    (the GEMM's is the q projection, B stored [N, K]), or the listed build indices."""
    sources = {}
    graded = _builds()
    for kind, shape in (graded[i] for i in builds) if builds is not None else graded:
        if builds is None and any(name.startswith(f"mkb_{kind}_kernel") for name in sources):
            continue
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
