"""TIRx oracle for problem 67: a complete order-2 Hyena block (d_model 256, L = 256), fp32.

Everything is fp32 on the CUDA cores (judged at fp32 tolerance: no TF32; TIRx 0.27 has no WGMMA
path on sm_90 anyway); torch only allocates (and zero-pads operands of shapes that are not tile
multiples, e.g. the small workload). NVRTC builds with --use_fast_math, so exp, sin/cos, division
and square root are precise forms written out here (range-reduced polynomials, Newton-corrected
quotient and root).

- ``mkb_ln``: LayerNorm, a warp per token (two-pass mean and variance from lane sums and butterfly
  shuffles), zero on padded columns.
- ``mkb_in_proj``, ``mkb_out_proj``, ``mkb_fc1``, ``mkb_fc2``: a shared-memory tiled SIMT GEMM
  C = A W^T + bias (128 x 128 tile per 256-thread CTA, 8 x 8 outputs per thread from float4 shared
  reads, K in slices of 16 with the next slice's loads in flight, two-level sums over 128-value K
  chunks); epilogues: bias (in_proj), residual + (sum + bias) (out_proj onto x, fc2 onto r), and the
  tanh GELU in the form h / (1 + exp(-2u)) (fc1).
- ``mkb_filter``: the implicit filter, a CTA per time step: z = [t, cos(f w), -sin(f w)] with
  torch's fp32 linspace and 2 pi n / L, three sine layers and the final projection through shared
  memory, then h (exp(-t |delta|) + shift) + filter_bias; its [L, d] output read as [d, L] (the
  reference's raw reshape) is the per-channel kernel k.
- ``mkb_conv``: a CTA per (channel, sequence), a thread per time step: the causal depthwise short
  convolution (kernel 3) of the x0, x1 and v channels, g = v x1 into shared memory with k[c, :],
  then the causal long convolution computed directly, y_t = sum_{s <= t} k_s g_{t - s} (fp32, s
  ascending) in place of the reference's zero-padded FFT (the same linear convolution),
  y = (y + g filter_bias) x0, stored token-major for out_proj.
"""

import math

import numpy as np
import torch
import tvm
from tvm.script import tirx as T

# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(batch=32, seqlen=256, d_model=256, filter_dim=64, mlp_dim=1024)
EPS = 1e-5  # the problem's LayerNorm eps and exp-modulation shift; kernels are built for the values called with
SHIFT = 0.05
BM, BN, BK = 128, 128, 16
FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
THREADS = 256
ROW_WARPS = 8
ROOT = 0.7978845608028654
KAPPA = 0.044715
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


def sqrt_precise(a):
    """sqrt(a) for a >= 0: the fast-math root corrected by one Newton step (s + (a - s^2) / 2s)."""

    def with_a(av):
        def with_s(s):
            return T.if_then_else(av > _f32(0.0), s + div_precise(av - s * s, s + s), s)

        return _let(T.sqrt(av), with_s, "s")

    return _let(a, with_a, "a")


def sin_precise(x, cosine=False):
    """sin x (or cos x) in fp32 for moderate |x|: x = q pi/2 + r (pi/2 split in three parts, Cody-Waite),
    Cephes' single-precision minimax polynomials on |r| <= pi/4, quadrant by q mod 4."""

    def with_x(xv):
        def with_q(q):
            def with_r(r):
                def with_r2(r2):
                    sn = r + (r * r2) * (_f32(-1.6666654611e-1) + r2 * (_f32(8.3321608736e-3)
                                                                        + r2 * _f32(-1.9515295891e-4)))
                    cs = (_f32(1.0) - _f32(0.5) * r2) + (r2 * r2) * (
                        _f32(4.166664568298827e-2)
                        + r2 * (_f32(-1.388731625493765e-3) + r2 * _f32(2.443315711809948e-5)))
                    quad = T.bitwise_and(T.int32(q) + (1 if cosine else 0), 3)  # cos x = sin(x + pi/2)
                    return T.if_then_else(quad == 0, sn, T.if_then_else(quad == 1, cs, T.if_then_else(
                        quad == 2, _f32(0.0) - sn, _f32(0.0) - cs)))

                return _let(r * r, with_r2, "r2")

            reduced = (((xv - q * _f32(1.5703125)) - q * _f32(4.837512969970703125e-4))
                       - q * _f32(7.54978995489188216e-8))
            return _let(reduced, with_r, "r")

        return _let(T.floor(xv * _f32(0.6366197723675814) + _f32(0.5)), with_q, "q")

    return _let(x, with_x, "x")


def gelu_tanh_precise(h):
    """0.5 h (1 + tanh(u)) = h / (1 + exp(-2u)), u = sqrt(2/pi) (h + 0.044715 h^3)."""

    def with_h(hv):
        u = _f32(ROOT) * (hv + _f32(KAPPA) * (hv * hv * hv))
        return div_precise(hv, _f32(1.0) + exp_precise(_f32(-2.0) * u))

    return _let(h, with_h, "h")


def _shfl_xor(value, mask):
    return T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), value, mask, 32)


def _ln_kernel(tp, dp, dim, eps):
    per = dp // 128
    inv_dim = 1.0 / dim

    @T.prim_func
    def mkb_ln(x_h: T.handle, w_h: T.handle, b_h: T.handle, y_h: T.handle):
        x = T.match_buffer(x_h, (tp, dp), "float32")
        w = T.match_buffer(w_h, (dp,), "float32")
        b = T.match_buffer(b_h, (dp,), "float32")
        y = T.match_buffer(y_h, (tp, dp), "float32")
        T.device_entry()
        bx = T.cta_id([tp // ROW_WARPS])
        tx = T.thread_id([ROW_WARPS * 32])
        xv = T.alloc_buffer((per * 4,), "float32", scope="local")
        wv = T.alloc_buffer((4,), "float32", scope="local")
        bv = T.alloc_buffer((4,), "float32", scope="local")
        red = T.alloc_buffer((2,), "float32", scope="local")
        sc = T.alloc_buffer((2,), "float32", scope="local")
        out = T.alloc_buffer((4,), "float32", scope="local")
        row: T.let = bx * ROW_WARPS + tx // 32
        lane: T.let = tx % 32
        red[0] = T.float32(0.0)
        for j in T.unroll(per):
            for e in T.vectorized(4):
                xv[j * 4 + e] = x[row, j * 128 + lane * 4 + e]
            for e in T.unroll(4):
                red[0] = red[0] + xv[j * 4 + e]
        for i in T.unroll(5):
            red[0] = red[0] + _shfl_xor(red[0], T.shift_right(16, i))
        sc[0] = red[0] * _f32(inv_dim)  # mean
        red[1] = T.float32(0.0)
        for j in T.unroll(per):
            for e in T.unroll(4):
                red[1] = red[1] + T.if_then_else(j * 128 + lane * 4 + e < dim,
                                                  (xv[j * 4 + e] - sc[0]) * (xv[j * 4 + e] - sc[0]), _f32(0.0))
        for i in T.unroll(5):
            red[1] = red[1] + _shfl_xor(red[1], T.shift_right(16, i))
        sc[1] = div_precise(_f32(1.0), sqrt_precise(red[1] * _f32(inv_dim) + _f32(eps)))  # rstd
        for j in T.unroll(per):
            for e in T.vectorized(4):
                wv[e] = w[j * 128 + lane * 4 + e]
            for e in T.vectorized(4):
                bv[e] = b[j * 128 + lane * 4 + e]
            for e in T.unroll(4):
                out[e] = T.if_then_else(j * 128 + lane * 4 + e < dim,
                                        ((xv[j * 4 + e] - sc[0]) * sc[1]) * wv[e] + bv[e], _f32(0.0))
            for e in T.vectorized(4):
                y[row, j * 128 + lane * 4 + e] = out[e]

    return mkb_ln


def _gemm_kernel(name, m, n, k, epi):
    """C [m, n] = epilogue(A [m, k] W [n, k]^T + bias [n]); epi: "bias", "gelu" or "res" (R + (sum + bias))."""
    k_tiles = k // BK
    tiles_n = n // BN

    @T.prim_func
    def gemm(a_h: T.handle, b_h: T.handle, bias_h: T.handle, c_h: T.handle, r_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "float32")
        B = T.match_buffer(b_h, (n, k), "float32")
        bias = T.match_buffer(bias_h, (n,), "float32")
        C = T.match_buffer(c_h, (m, n), "float32")
        R = T.match_buffer(r_h, (m, n), "float32")
        T.device_entry()
        cta = T.cta_id([(m // BM) * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK, BM), "float32", scope="shared")
        b_s = T.alloc_buffer((BK, BN), "float32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        part = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "float32", scope="local")
        bf = T.alloc_buffer((8,), "float32", scope="local")
        ra = T.alloc_buffer((8,), "float32", scope="local")
        rb = T.alloc_buffer((8,), "float32", scope="local")
        bv = T.alloc_buffer((8,), "float32", scope="local")
        rv = T.alloc_buffer((4,), "float32", scope="local")
        out = T.alloc_buffer((4,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx // 2
        lk: T.let = (tx % 2) * 8
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            for j in T.vectorized(4):
                ra[h * 4 + j] = A[row0 + lrow, lk + h * 4 + j]
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
                            ra[h * 4 + j] = A[row0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
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
        for jh in T.unroll(2):
            for j in T.vectorized(4):
                bv[jh * 4 + j] = bias[col0 + jh * 64 + tc * 4 + j]
        for i in T.unroll(8):
            for jh in T.unroll(2):
                if epi == "res":
                    for j in T.vectorized(4):
                        rv[j] = R[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j]
                    for j in T.unroll(4):
                        out[j] = rv[j] + (acc[i * 8 + jh * 4 + j] + bv[jh * 4 + j])
                elif epi == "gelu":
                    for j in T.unroll(4):
                        out[j] = gelu_tanh_precise(acc[i * 8 + jh * 4 + j] + bv[jh * 4 + j])
                else:
                    for j in T.unroll(4):
                        out[j] = acc[i * 8 + jh * 4 + j] + bv[jh * 4 + j]
                for j in T.vectorized(4):
                    C[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = out[j]

    return gemm.with_attr("global_symbol", name)


def _filter_kernel(seqlen, d, fdim, shift):
    step = float(np.float32(1.0) / np.float32(seqlen - 1))  # torch.linspace's fp32 step
    fo = (fdim + THREADS - 1) // THREADS
    do = (d + THREADS - 1) // THREADS

    @T.prim_func
    def mkb_filter(w1_h: T.handle, b1_h: T.handle, fr_h: T.handle, w2_h: T.handle, b2_h: T.handle, w3_h: T.handle,
                   b3_h: T.handle, wf_h: T.handle, fb_h: T.handle, dl_h: T.handle, kf_h: T.handle):
        w1 = T.match_buffer(w1_h, (fdim, 5), "float32")
        b1 = T.match_buffer(b1_h, (fdim,), "float32")
        freq = T.match_buffer(fr_h, (1, fdim), "float32")
        w2 = T.match_buffer(w2_h, (fdim, fdim), "float32")
        b2 = T.match_buffer(b2_h, (fdim,), "float32")
        w3 = T.match_buffer(w3_h, (fdim, fdim), "float32")
        b3 = T.match_buffer(b3_h, (fdim,), "float32")
        wf = T.match_buffer(wf_h, (d, fdim), "float32")
        fbias = T.match_buffer(fb_h, (d,), "float32")
        deltas = T.match_buffer(dl_h, (d,), "float32")
        kf = T.match_buffer(kf_h, (seqlen, d), "float32")
        T.device_entry()
        t = T.cta_id([seqlen])
        tx = T.thread_id([THREADS])
        ha = T.alloc_buffer((fdim,), "float32", scope="shared")
        hb = T.alloc_buffer((fdim,), "float32", scope="shared")
        z = T.alloc_buffer((7,), "float32", scope="local")  # t, cos(a0), cos(w), -sin(a0), -sin(w); w, a0
        acc = T.alloc_buffer((1,), "float32", scope="local")
        # torch.linspace(0, 1, L) in fp32: start + i step below the midpoint, end - (L - 1 - i) step above
        z[0] = T.if_then_else(t < seqlen // 2, T.float32(t) * _f32(step),
                              _f32(1.0) - T.float32(seqlen - 1 - t) * _f32(step))
        z[5] = div_precise(_f32(2.0 * math.pi) * T.float32(t), _f32(float(seqlen)))
        z[6] = _f32(1e-4) * z[5]
        z[1] = sin_precise(z[6], cosine=True)
        z[2] = sin_precise(z[5], cosine=True)
        z[3] = _f32(0.0) - sin_precise(z[6])
        z[4] = _f32(0.0) - sin_precise(z[5])
        for oi in range(fo):
            if oi * THREADS + tx < fdim:
                acc[0] = T.float32(0.0)
                for j in T.unroll(5):
                    acc[0] = acc[0] + z[j] * w1[oi * THREADS + tx, j]
                ha[oi * THREADS + tx] = sin_precise(freq[0, oi * THREADS + tx] * (acc[0] + b1[oi * THREADS + tx]))
        T.cuda.cta_sync()
        for oi in range(fo):
            if oi * THREADS + tx < fdim:
                acc[0] = T.float32(0.0)
                for j in range(fdim):
                    acc[0] = acc[0] + ha[j] * w2[oi * THREADS + tx, j]
                hb[oi * THREADS + tx] = sin_precise(freq[0, oi * THREADS + tx] * (acc[0] + b2[oi * THREADS + tx]))
        T.cuda.cta_sync()
        for oi in range(fo):
            if oi * THREADS + tx < fdim:
                acc[0] = T.float32(0.0)
                for j in range(fdim):
                    acc[0] = acc[0] + hb[j] * w3[oi * THREADS + tx, j]
                ha[oi * THREADS + tx] = sin_precise(freq[0, oi * THREADS + tx] * (acc[0] + b3[oi * THREADS + tx]))
        T.cuda.cta_sync()
        for oi in range(do):
            if oi * THREADS + tx < d:
                acc[0] = T.float32(0.0)
                for j in range(fdim):
                    acc[0] = acc[0] + ha[j] * wf[oi * THREADS + tx, j]
                kf[t, oi * THREADS + tx] = acc[0] * (
                    exp_precise((_f32(0.0) - z[0]) * T.fabs(deltas[oi * THREADS + tx])) + _f32(shift)
                ) + fbias[oi * THREADS + tx]

    return mkb_filter


def _conv_kernel(batch, seqlen, d, tp, up3, dp):
    lp = (seqlen + 31) // 32 * 32

    @T.prim_func
    def mkb_conv(u_h: T.handle, cw_h: T.handle, cb_h: T.handle, k_h: T.handle, fb_h: T.handle, y_h: T.handle):
        u = T.match_buffer(u_h, (tp, up3), "float32")
        cw = T.match_buffer(cw_h, (3 * d, 3), "float32")
        cb = T.match_buffer(cb_h, (3 * d,), "float32")
        kflat = T.match_buffer(k_h, (seqlen * d,), "float32")
        fbias = T.match_buffer(fb_h, (d,), "float32")
        y = T.match_buffer(y_h, (tp, dp), "float32")
        T.device_entry()
        c, b = T.cta_id([d, batch])
        t = T.thread_id([lp])
        g_s = T.alloc_buffer((seqlen,), "float32", scope="shared")
        k_s = T.alloc_buffer((seqlen,), "float32", scope="shared")
        sc = T.alloc_buffer((4,), "float32", scope="local")  # x0, x1, v, total
        row: T.let = b * seqlen + t
        if t < seqlen:
            for p in T.unroll(3):
                sc[p] = cw[p * d + c, 2] * u[row, p * d + c]
                if t >= 1:
                    sc[p] = cw[p * d + c, 1] * u[row - 1, p * d + c] + sc[p]
                if t >= 2:
                    sc[p] = cw[p * d + c, 0] * u[row - 2, p * d + c] + sc[p]
                sc[p] = sc[p] + cb[p * d + c]
            g_s[t] = sc[2] * sc[1]
            k_s[t] = kflat[c * seqlen + t]
        T.cuda.cta_sync()
        if t < seqlen:
            sc[3] = T.float32(0.0)
            for s in range(seqlen):
                if s <= t:
                    sc[3] = sc[3] + k_s[s] * g_s[t - s]
            y[row, c] = (sc[3] + g_s[t] * fbias[c]) * sc[0]

    return mkb_conv


_NAMES = ("ln", "in_proj", "filter", "conv", "out_proj", "fc1", "fc2")


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _shape(batch, seqlen, d, fdim, mlp):
    tokens = batch * seqlen
    return (batch, seqlen, d, fdim, mlp, _up(tokens, BM), _up(d, BN), _up(3 * d, BN), _up(mlp, BN))


def _exported(funcs):
    """An IRModule whose functions are exported under their keys (a prim_func otherwise exports its
    own global_symbol, and the runtime module would have no function by the key's name); the device
    kernels are then named ``<key>_kernel``."""
    return tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})


def _build(shape, eps, shift, arch):
    """Compile every kernel once per shape, eps, shift and arch; return the tvm Executable."""
    key = (shape, eps, shift, arch)
    if key not in _EXES:
        batch, seqlen, d, fdim, _, tp, dp, up3, mp = shape
        funcs = {"ln": _ln_kernel(tp, dp, d, eps),
                 "in_proj": _gemm_kernel("mkb_in_proj", tp, up3, dp, "bias"),
                 "filter": _filter_kernel(seqlen, d, fdim, shift),
                 "conv": _conv_kernel(batch, seqlen, d, tp, up3, dp),
                 "out_proj": _gemm_kernel("mkb_out_proj", tp, dp, dp, "res"),
                 "fc1": _gemm_kernel("mkb_fc1", tp, mp, dp, "gelu"),
                 "fc2": _gemm_kernel("mkb_fc2", tp, dp, mp, "res")}
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(_exported(funcs), target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fns(shape, eps, shift):
    key = (shape, eps, shift, _device_arch())
    if key not in _FNS:
        mod = _build(*key).mod
        _FNS[key] = {name: mod[name] for name in _NAMES}
    return _FNS[key]


def _padded(t, shape):
    t = t.contiguous()
    if tuple(t.shape) == tuple(shape):
        return t
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def solve(hidden_states, norm1_weight, norm1_bias, norm2_weight, norm2_bias, in_proj_weight, in_proj_bias,
          short_conv_weight, short_conv_bias, filter_linear1_weight, filter_linear1_bias, sin_freq,
          filter_linear2_weight, filter_linear2_bias, filter_linear3_weight, filter_linear3_bias,
          filter_linear_final_weight, filter_bias, exp_mod_deltas, out_proj_weight, out_proj_bias, mlp_fc1_weight,
          mlp_fc1_bias, mlp_fc2_weight, mlp_fc2_bias, layer_norm_eps, exp_mod_shift):
    batch, seqlen, d = hidden_states.shape
    fdim = filter_linear1_weight.shape[0]
    mlp = mlp_fc1_weight.shape[0]
    tokens = batch * seqlen
    shape = _shape(batch, seqlen, d, fdim, mlp)
    _, _, _, _, _, tp, dp, up3, mp = shape
    k = _kernel_fns(shape, float(layer_norm_eps), float(exp_mod_shift))
    dev = hidden_states.device
    f32 = torch.float32
    x = _padded(hidden_states.reshape(tokens, d), (tp, dp))
    n1 = torch.empty(tp, dp, dtype=f32, device=dev)
    k["ln"](x, _padded(norm1_weight, (dp,)), _padded(norm1_bias, (dp,)), n1)
    u = torch.empty(tp, up3, dtype=f32, device=dev)
    k["in_proj"](n1, _padded(in_proj_weight, (up3, dp)), _padded(in_proj_bias, (up3,)), u, u)
    kf = torch.empty(seqlen, d, dtype=f32, device=dev)
    k["filter"](filter_linear1_weight.contiguous(), filter_linear1_bias.contiguous(), sin_freq.contiguous(),
                filter_linear2_weight.contiguous(), filter_linear2_bias.contiguous(),
                filter_linear3_weight.contiguous(), filter_linear3_bias.contiguous(),
                filter_linear_final_weight.contiguous(), filter_bias.contiguous(),
                exp_mod_deltas.reshape(d).contiguous(), kf)
    padded = (tp, dp) != (tokens, d)
    y = torch.zeros(tp, dp, dtype=f32, device=dev) if padded else torch.empty(tp, dp, dtype=f32, device=dev)
    k["conv"](u, short_conv_weight.reshape(3 * d, 3).contiguous(), short_conv_bias.contiguous(), kf.view(-1),
              filter_bias.contiguous(), y)
    r = torch.empty(tp, dp, dtype=f32, device=dev)
    k["out_proj"](y, _padded(out_proj_weight, (dp, dp)), _padded(out_proj_bias, (dp,)), r, x)
    n2 = torch.empty(tp, dp, dtype=f32, device=dev)
    k["ln"](r, _padded(norm2_weight, (dp,)), _padded(norm2_bias, (dp,)), n2)
    m = torch.empty(tp, mp, dtype=f32, device=dev)
    k["fc1"](n2, _padded(mlp_fc1_weight, (mp, dp)), _padded(mlp_fc1_bias, (mp,)), m, m)
    out = torch.empty(tp, dp, dtype=f32, device=dev)
    k["fc2"](m, _padded(mlp_fc2_weight, (dp, mp)), _padded(mlp_fc2_bias, (dp,)), out, r)
    if padded:
        out = out[:tokens, :d].contiguous()
    return out.reshape(batch, seqlen, d)


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


def kernel_sources(arch="sm_90a"):
    """{kernel symbol: generated CUDA source} at the graded workload."""
    w = WORKLOAD
    shape = _shape(w["batch"], w["seqlen"], w["d_model"], w["filter_dim"], w["mlp_dim"])
    source = _build(shape, EPS, SHIFT, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
