"""TIRx oracle for problem 13: FIBO joint attention block (adaLN-modulated image tokens attending to
themselves and to text tokens), fp32.

The reference is true fp32 (no TF32), so every product runs as CUDA-core fp32 FMAs (TIRx 0.27 has
no WGMMA path for sm_90 either); the GEMMs are shared-memory tiled SIMT GEMMs, slower than cuBLAS's
fp32 GEMMs that the eager reference uses. NVRTC builds TIRx kernels with --use_fast_math, so exp
and the divisions that matter are precise forms written out here: a range-reduced degree-7
polynomial exp (about 1 ulp) and a quotient corrected by one Newton step on the residual.
Four TIRx kernels, nine launches:

1. ``mkb_rowprep`` (three builds): one CTA of 256 threads per row, each thread keeping its strided
   share of the row in fp32 registers; ``T.cuda.cta_sum`` (warp shuffles, then shared memory) gives
   the row sums. silu build: silu(t) = t / (1 + exp(-t)) of the timestep embedding. LayerNorm
   builds (no affine, eps 1e-5): mean = sum / C, var = sum((x - mean)^2) / C, y = (x - mean) *
   rsqrt(var + eps); the image build then applies the modulation y * (1 + scale[b]) + shift[b] in
   the reference's order.
2. ``mkb_gemm`` (C = A W^T + bias; the adaLN linear on the zero-padded silu rows (only its scale,
   shift and gate rows), q, k, v, the text k and v, and the output projection): a 256-thread CTA
   computes a 128 x 128 tile; K advances in slices of 16 (two 16-byte vectors of A and of W per
   thread, the next slice's loads issued before the current slice is computed), stored K-major in
   shared memory; each thread accumulates an 8 x 8 block (rows ty*4 + {0..3} and 64 + ty*4 +
   {0..3}, columns tc*4 + {0..3} and 64 + tc*4 + {0..3}, ty = tid / 16, tc = tid % 16) from float4
   shared-memory reads. The sums are two-level: each chunk of 128 K values is accumulated from zero
   and then added to the running total, keeping the fp32 rounding error near that of a blocked
   library GEMM. The output-projection build's epilogue writes x + gate[b] * (sum + bias).
3. ``mkb_rope``: one CTA per image token; for q and k in place, each thread rotates pairs (d, d + 21)
   of the three 42-dim axis slices of a head: (x1 cos - x2 sin, x2 cos + x1 sin) with cos/sin from
   column j < 21 of the axis table at the token's position on that axis; dims 126, 127 stay.
4. ``mkb_joint_attention``: per (64 query rows, head, batch), 256 threads; the 1024 image keys and
   then the 256 text keys (no mask) are walked in blocks of 64 (keys past the end are masked). S =
   Q K^T goes over head-dim slices of 32 (Q and K slices stored dim-major in shared memory; thread
   (ty, tc) owns S rows ty*4 + {0..3} and keys tc*4 + {0..3}); online softmax in fp32 with the
   precise exp: s = S / sqrt(128) (as a multiplication by its fp32 reciprocal), m_new = max(m,
   rowmax) over the 16 lanes sharing a row (xor shuffles), alpha = exp(m - m_new), p = exp(s -
   m_new), l = l * alpha + (the thread's p sum); P goes to shared memory and P V runs over two V
   slices of 32 keys, each thread accumulating rows ty*4 + {0..3} and dims tc*4 + {0..3}, 64 + tc*4
   + {0..3} of the block from zero before O = O * alpha + block (a two-level sum over the keys).
   Epilogue: the 16 partial row sums are added by xor shuffles and O / l (precise division) is
   stored.
Shapes that are not tile multiples (the small workload) use zero-padded scratch operands; the
graded shapes need none.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 4): 12.7 ms against the
eager reference's 10.9 ms (0.85x). Over the problem's declared arithmetic (0.43 TFLOP, its
physical_floor) that is 33.4 TFLOP/s against eager's 39.1: both issue the fp32 products as CUDA-core
FMAs (the H100 SXM's rate without tensor cores is about 67 TFLOP/s), and the cuBLAS SGEMM kernels that
eager calls issue them faster than these tiled SIMT loops; fusing the elementwise steps does not make up
the difference. The route that would beat eager, not taken here: fp32-accurate products on the tensor
cores by the 3xTF32 split (each fp32 operand as a TF32 high part plus a TF32 residual; three TF32
products summed in fp32), at several times the FMA rate, keeping this kernel's fusion. In TIRx the
products would be mma.sync TF32 instructions written as raw PTX: its tile GEMM takes only f16 and bf16,
and it has no wgmma primitive for sm_90.
"""

import math

import torch
import tvm
from tvm.script import tirx as T

HEAD_DIM, AXIS_DIM = 128, 42
BM = 128
BN = 128
BK = 16
FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
THREADS = 256
ROW_THREADS = 256
ROW_WARPS = ROW_THREADS // 32
ROPE_THREADS = 128
QM = 64  # query rows per attention CTA and keys per block
DC = 32  # head-dim slice of the S loop
VK = 32  # keys per V slice
NEG = -1.0e30  # a masked logit (exp of it minus the row max is 0)
EPS = 1e-5
SILU, LN, LN_MOD = 0, 1, 2
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


def silu_precise(g):
    """g / (1 + exp(-g)), torch's silu, with the precise exp and division (0 where exp overflows)."""

    def with_g(gv):
        def with_den(den):
            return T.if_then_else(den > _f32(3.0e38), _f32(0.0), div_precise(gv, den))

        return _let(_f32(1.0) + exp_precise(_f32(0.0) - gv), with_den, "den")

    return _let(g, with_g, "g")


def _rowprep_kernel(rows, width, dst_rows, dst_cols, mod_rows, mod_cols, rows_per_batch, mode):
    """One CTA per row of src [rows, width]; writes dst[row, :width] (silu, LayerNorm, or modulated LayerNorm)."""
    per = (width + ROW_THREADS - 1) // ROW_THREADS

    @T.prim_func
    def mkb_rowprep(s_h: T.handle, d_h: T.handle, m_h: T.handle):
        src = T.match_buffer(s_h, (rows, width), "float32")
        dst = T.match_buffer(d_h, (dst_rows, dst_cols), "float32")
        mod = T.match_buffer(m_h, (mod_rows, mod_cols), "float32")
        T.device_entry()
        row = T.cta_id([rows])
        tx = T.thread_id([ROW_THREADS])
        scratch_sum = T.alloc_buffer((ROW_WARPS,), "float32", scope="shared")
        scratch_sq = T.alloc_buffer((ROW_WARPS,), "float32", scope="shared")
        vals = T.alloc_buffer((per,), "float32", scope="local")
        if mode == SILU:
            for i in T.unroll(per):
                if i * ROW_THREADS + tx < width:
                    dst[row, i * ROW_THREADS + tx] = silu_precise(src[row, i * ROW_THREADS + tx])
        else:
            s: T.f32 = _f32(0.0)
            for i in T.unroll(per):
                vals[i] = _f32(0.0)
                if i * ROW_THREADS + tx < width:
                    vals[i] = src[row, i * ROW_THREADS + tx]
                    s = s + vals[i]
            total: T.f32 = T.cuda.cta_sum(s, ROW_WARPS, scratch_sum.ptr_to([0]))
            mean: T.f32 = div_precise(total, _f32(width))
            sq: T.f32 = _f32(0.0)
            for i in T.unroll(per):
                if i * ROW_THREADS + tx < width:
                    vals[i] = vals[i] - mean
                    sq = sq + vals[i] * vals[i]
            total_sq: T.f32 = T.cuda.cta_sum(sq, ROW_WARPS, scratch_sq.ptr_to([0]))
            rstd: T.f32 = T.rsqrt(div_precise(total_sq, _f32(width)) + _f32(EPS))
            bb: T.let = row // rows_per_batch
            for i in T.unroll(per):
                if i * ROW_THREADS + tx < width:
                    if mode == LN_MOD:  # mod[b] = (scale, shift, gate)
                        dst[row, i * ROW_THREADS + tx] = (vals[i] * rstd) * (
                            _f32(1.0) + mod[bb, i * ROW_THREADS + tx]) + mod[bb, width + i * ROW_THREADS + tx]
                    else:
                        dst[row, i * ROW_THREADS + tx] = vals[i] * rstd

    return mkb_rowprep


def _gemm_kernel(m, n, k, gate_rows, gate_cols, rows_per_batch, gate_off, gated):
    """C [m, n] = A [m, k] W [n, k]^T + bias (gated: X + G[row // rows_per_batch, gate_off + col] * that);
    m, n multiples of 128, k of 128."""
    k_tiles = k // BK
    tiles_n = n // BN

    @T.prim_func
    def mkb_gemm(a_h: T.handle, b_h: T.handle, bias_h: T.handle, c_h: T.handle, x_h: T.handle, g_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "float32")
        B = T.match_buffer(b_h, (n, k), "float32")
        bias = T.match_buffer(bias_h, (n,), "float32")
        C = T.match_buffer(c_h, (m, n), "float32")
        X = T.match_buffer(x_h, (m, n), "float32")
        G = T.match_buffer(g_h, (gate_rows, gate_cols), "float32")
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
        for i in T.unroll(8):
            for jh in T.unroll(2):
                for j in T.unroll(4):
                    if gated:  # x + gate[b] * (attn W^T + b)
                        out[j] = X[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] + G[
                            (row0 + (i // 4) * 64 + ty * 4 + i % 4) // rows_per_batch,
                            gate_off + col0 + jh * 64 + tc * 4 + j] * (
                            acc[i * 8 + jh * 4 + j] + bias[col0 + jh * 64 + tc * 4 + j])
                    else:
                        out[j] = acc[i * 8 + jh * 4 + j] + bias[col0 + jh * 64 + tc * 4 + j]
                for j in T.vectorized(4):
                    C[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = out[j]

    return mkb_gemm


def _rope_kernel(rows, cols, tokens, heads, positions):
    """q, k [rows, cols] in place; row r is image token r % tokens. Pair e < heads * 63 of a tensor: head
    e // 63, axis (e % 63) // 21, column j = e % 21."""
    half = AXIS_DIM // 2
    pairs = heads * 3 * half
    steps = (2 * pairs + ROPE_THREADS - 1) // ROPE_THREADS
    n0, n1, n2 = positions

    @T.prim_func
    def mkb_rope(q_h: T.handle, k_h: T.handle, p0_h: T.handle, p1_h: T.handle, p2_h: T.handle, c0_h: T.handle,
                 s0_h: T.handle, c1_h: T.handle, s1_h: T.handle, c2_h: T.handle, s2_h: T.handle):
        q = T.match_buffer(q_h, (rows, cols), "float32")
        k = T.match_buffer(k_h, (rows, cols), "float32")
        pos0 = T.match_buffer(p0_h, (tokens,), "int32")
        pos1 = T.match_buffer(p1_h, (tokens,), "int32")
        pos2 = T.match_buffer(p2_h, (tokens,), "int32")
        c0 = T.match_buffer(c0_h, (n0, AXIS_DIM), "float32")
        s0 = T.match_buffer(s0_h, (n0, AXIS_DIM), "float32")
        c1 = T.match_buffer(c1_h, (n1, AXIS_DIM), "float32")
        s1 = T.match_buffer(s1_h, (n1, AXIS_DIM), "float32")
        c2 = T.match_buffer(c2_h, (n2, AXIS_DIM), "float32")
        s2 = T.match_buffer(s2_h, (n2, AXIS_DIM), "float32")
        T.device_entry()
        row = T.cta_id([rows])
        tx = T.thread_id([ROPE_THREADS])
        cs = T.alloc_buffer((2,), "float32", scope="local")
        xv = T.alloc_buffer((2,), "float32", scope="local")
        tok: T.let = row % tokens
        for it in range(steps):
            e: T.let = it * ROPE_THREADS + tx
            if e < 2 * pairs:
                which: T.let = e // pairs
                r: T.let = e % pairs
                h: T.let = r // (3 * half)
                axis: T.let = (r % (3 * half)) // half
                j: T.let = r % half
                if axis == 0:
                    cs[0] = c0[pos0[tok], j]
                    cs[1] = s0[pos0[tok], j]
                elif axis == 1:
                    cs[0] = c1[pos1[tok], j]
                    cs[1] = s1[pos1[tok], j]
                else:
                    cs[0] = c2[pos2[tok], j]
                    cs[1] = s2[pos2[tok], j]
                i1: T.let = h * HEAD_DIM + axis * AXIS_DIM + j
                if which == 0:
                    xv[0] = q[row, i1]
                    xv[1] = q[row, i1 + half]
                    q[row, i1] = xv[0] * cs[0] - xv[1] * cs[1]
                    q[row, i1 + half] = xv[1] * cs[0] + xv[0] * cs[1]
                else:
                    xv[0] = k[row, i1]
                    xv[1] = k[row, i1 + half]
                    k[row, i1] = xv[0] * cs[0] - xv[1] * cs[1]
                    k[row, i1 + half] = xv[1] * cs[0] + xv[0] * cs[1]

    return mkb_rope


def _attention_kernel(rows, cols, text_rows, batch, tokens, text, heads):
    """q, k, v [rows, cols] (image rows b * tokens + t), kt, vt [text_rows, cols] (rows b * text + t)."""
    keys = tokens + text
    n_blocks = (keys + QM - 1) // QM
    n_tiles = (tokens + QM - 1) // QM

    @T.prim_func
    def mkb_joint_attention(q_h: T.handle, k_h: T.handle, v_h: T.handle, kt_h: T.handle, vt_h: T.handle,
                            o_h: T.handle, scale: T.float32):
        q = T.match_buffer(q_h, (rows, cols), "float32")
        k = T.match_buffer(k_h, (rows, cols), "float32")
        v = T.match_buffer(v_h, (rows, cols), "float32")
        kt = T.match_buffer(kt_h, (text_rows, cols), "float32")
        vt = T.match_buffer(vt_h, (text_rows, cols), "float32")
        out = T.match_buffer(o_h, (rows, cols), "float32")
        T.device_entry()
        tile, head, b = T.cta_id([n_tiles, heads, batch])
        tx = T.thread_id([THREADS])
        q_s = T.alloc_buffer((DC, QM), "float32", scope="shared")  # [d][row]
        k_s = T.alloc_buffer((DC, QM), "float32", scope="shared")  # [d][key]
        v_s = T.alloc_buffer((VK, HEAD_DIM), "float32", scope="shared")  # [key][d]
        p_s = T.alloc_buffer((QM, QM), "float32", scope="shared")  # [key][row]
        s = T.alloc_buffer((16,), "float32", scope="local")
        acc_o = T.alloc_buffer((32,), "float32", scope="local")
        part = T.alloc_buffer((32,), "float32", scope="local")
        m_run = T.alloc_buffer((4,), "float32", scope="local")
        l_run = T.alloc_buffer((4,), "float32", scope="local")
        alpha = T.alloc_buffer((4,), "float32", scope="local")
        vec = T.alloc_buffer((4,), "float32", scope="local")
        af = T.alloc_buffer((4,), "float32", scope="local")
        bf = T.alloc_buffer((8,), "float32", scope="local")
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        r0: T.let = tile * QM
        col0: T.let = head * HEAD_DIM
        for i in T.unroll(4):
            m_run[i] = _f32(NEG)
            l_run[i] = _f32(0.0)
        for i in T.unroll(32):
            acc_o[i] = _f32(0.0)
        for nb in range(n_blocks):
            # ---- S = Q K^T over head-dim slices of 32
            for i in T.unroll(16):
                s[i] = _f32(0.0)
            for dc in range(HEAD_DIM // DC):
                for it in T.unroll(QM * DC // 4 // THREADS):
                    lr: T.let = (it * THREADS + tx) // (DC // 4)
                    c4: T.let = (it * THREADS + tx) % (DC // 4)
                    for e in T.vectorized(4):
                        vec[e] = q[b * tokens + T.min(r0 + lr, tokens - 1), col0 + dc * DC + c4 * 4 + e]
                    for e in T.unroll(4):
                        q_s[c4 * 4 + e, lr] = vec[e]
                    key: T.let = T.min(nb * QM + lr, keys - 1)
                    if key < tokens:
                        for e in T.vectorized(4):
                            vec[e] = k[b * tokens + key, col0 + dc * DC + c4 * 4 + e]
                    else:
                        for e in T.vectorized(4):
                            vec[e] = kt[b * text + key - tokens, col0 + dc * DC + c4 * 4 + e]
                    for e in T.unroll(4):
                        k_s[c4 * 4 + e, lr] = vec[e]
                T.cuda.cta_sync()
                for d in T.unroll(DC):
                    for i in T.vectorized(4):
                        af[i] = q_s[d, ty * 4 + i]
                    for j in T.vectorized(4):
                        bf[j] = k_s[d, tc * 4 + j]
                    for i in T.unroll(4):
                        for j in T.unroll(4):
                            s[i * 4 + j] = s[i * 4 + j] + af[i] * bf[j]
                T.cuda.cta_sync()
            # ---- online softmax (fp32, precise exp); P to shared memory as [key][row]
            for i in T.unroll(4):
                for j in T.unroll(4):
                    s[i * 4 + j] = T.if_then_else(nb * QM + tc * 4 + j < keys, s[i * 4 + j] * scale, _f32(NEG))
                mx: T.f32 = T.max(T.max(s[i * 4], s[i * 4 + 1]), T.max(s[i * 4 + 2], s[i * 4 + 3]))
                for sh in T.unroll(4):  # the 16 lanes sharing a row
                    mx = T.max(mx, T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), mx, T.shift_left(1, sh), 32))
                m_new: T.f32 = T.max(m_run[i], mx)
                alpha[i] = exp_precise(m_run[i] - m_new)
                p_sum: T.f32 = _f32(0.0)
                for j in T.unroll(4):
                    s[i * 4 + j] = exp_precise(s[i * 4 + j] - m_new)
                    p_s[tc * 4 + j, ty * 4 + i] = s[i * 4 + j]
                    p_sum = p_sum + s[i * 4 + j]
                l_run[i] = l_run[i] * alpha[i] + p_sum
                m_run[i] = m_new
            # ---- block P V from zero over two V slices of 32 keys, then O = O * alpha + block
            for i in T.unroll(32):
                part[i] = _f32(0.0)
            for vs in range(QM // VK):
                for it in T.unroll(VK * HEAD_DIM // 4 // THREADS):
                    lk: T.let = (it * THREADS + tx) // (HEAD_DIM // 4)
                    c4v: T.let = (it * THREADS + tx) % (HEAD_DIM // 4)
                    key2: T.let = T.min(nb * QM + vs * VK + lk, keys - 1)
                    if key2 < tokens:
                        for e in T.vectorized(4):
                            vec[e] = v[b * tokens + key2, col0 + c4v * 4 + e]
                    else:
                        for e in T.vectorized(4):
                            vec[e] = vt[b * text + key2 - tokens, col0 + c4v * 4 + e]
                    for e in T.vectorized(4):
                        v_s[lk, c4v * 4 + e] = vec[e]
                T.cuda.cta_sync()  # V slice (and P) visible
                for kk in T.unroll(VK):
                    for i in T.vectorized(4):
                        af[i] = p_s[vs * VK + kk, ty * 4 + i]
                    for j in T.vectorized(4):
                        bf[j] = v_s[kk, tc * 4 + j]
                    for j in T.vectorized(4):
                        bf[4 + j] = v_s[kk, 64 + tc * 4 + j]
                    for i in T.unroll(4):
                        for j in T.unroll(8):
                            part[i * 8 + j] = part[i * 8 + j] + af[i] * bf[j]
                T.cuda.cta_sync()  # every thread is done with the V slice (and, after the last, P)
            for i in T.unroll(4):
                for j in T.unroll(8):
                    acc_o[i * 8 + j] = acc_o[i * 8 + j] * alpha[i] + part[i * 8 + j]
        # ---- epilogue: O / l (precise division), float4 stores
        for i in T.unroll(4):
            tot: T.f32 = l_run[i]
            for sh in T.unroll(4):
                tot = tot + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), tot, T.shift_left(1, sh), 32)
            if r0 + ty * 4 + i < tokens:
                for jh in T.unroll(2):
                    for j in T.unroll(4):
                        vec[j] = div_precise(acc_o[i * 8 + jh * 4 + j], tot)
                    for j in T.vectorized(4):
                        out[b * tokens + r0 + ty * 4 + i, col0 + jh * 64 + tc * 4 + j] = vec[j]

    return mkb_joint_attention


_MAKERS = {"rowprep": _rowprep_kernel, "gemm": _gemm_kernel, "rope": _rope_kernel, "attention": _attention_kernel}


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


def _gemm(a, w, bias, x=None, gate=None, rows_per_batch=1, gate_off=0):
    """a [mp, kp] (tile-padded) times w^T plus bias (x + gate * that when x is given): [mp, n padded]."""
    mp, kp, n_p = a.shape[0], a.shape[1], _up(w.shape[0], BN)
    c = torch.empty(mp, n_p, dtype=torch.float32, device=a.device)
    gated = x is not None
    g_shape = tuple(gate.shape) if gated else (mp, n_p)
    _kernel_fn("gemm", (mp, n_p, kp, *g_shape, rows_per_batch, gate_off, gated))(
        a, _padded(w, (n_p, kp)), _padded(bias, (n_p,)), c, x if gated else c, gate if gated else c)
    return c


def solve(hidden_states, timestep_embedding, encoder_hidden_states, adaln_linear_weight, adaln_linear_bias,
          to_q_weight, to_q_bias, to_k_weight, to_k_bias, to_v_weight, to_v_bias, to_k_context_weight,
          to_k_context_bias, to_v_context_weight, to_v_context_bias, to_out_weight, to_out_bias, pos_idx_axis0,
          pos_idx_axis1, pos_idx_axis2, rope_cos_axis0, rope_sin_axis0, rope_cos_axis1, rope_sin_axis1,
          rope_cos_axis2, rope_sin_axis2, is_joint_block):
    if is_joint_block != 1:
        raise ValueError("only the joint block (is_joint_block = 1) is defined")
    batch, tokens, hidden = hidden_states.shape
    heads = hidden // HEAD_DIM
    text, text_dim = encoder_hidden_states.shape[1], encoder_hidden_states.shape[2]
    dev = hidden_states.device
    assert hidden % BN == 0 and text >= 1
    rows, text_rows = batch * tokens, batch * text
    mp, bp, tp, dp = _up(rows, BM), _up(batch, BM), _up(text_rows, BM), _up(text_dim, BK * FOLD)

    # adaLN: mod = silu(temb) W^T + b, only the scale, shift and gate rows
    temb = timestep_embedding.contiguous()
    silu = torch.zeros(bp, hidden, dtype=torch.float32, device=dev)
    _kernel_fn("rowprep", (batch, hidden, bp, hidden, batch, hidden, 1, SILU))(temb, silu, temb)
    mod = _gemm(silu, adaln_linear_weight[:3 * hidden], adaln_linear_bias[:3 * hidden])  # [bp, 3 hidden]

    x = hidden_states.reshape(rows, hidden).contiguous()
    x_mod = torch.zeros(mp, hidden, dtype=torch.float32, device=dev) if mp != rows else torch.empty_like(x)
    _kernel_fn("rowprep", (rows, hidden, mp, hidden, bp, 3 * hidden, tokens, LN_MOD))(x, x_mod, mod)
    q = _gemm(x_mod, to_q_weight, to_q_bias)
    k = _gemm(x_mod, to_k_weight, to_k_bias)
    v = _gemm(x_mod, to_v_weight, to_v_bias)
    pos = [p.to(torch.int32).contiguous() for p in (pos_idx_axis0, pos_idx_axis1, pos_idx_axis2)]
    tables = [t.contiguous() for t in (rope_cos_axis0, rope_sin_axis0, rope_cos_axis1, rope_sin_axis1,
                                       rope_cos_axis2, rope_sin_axis2)]
    positions = tuple(t.shape[0] for t in tables[::2])
    _kernel_fn("rope", (mp, hidden, tokens, heads, positions))(q, k, *pos, *tables)

    enc = encoder_hidden_states.reshape(text_rows, text_dim).contiguous()
    t_ln = torch.zeros(tp, dp, dtype=torch.float32, device=dev) if (tp, dp) != (text_rows, text_dim) else \
        torch.empty_like(enc)
    _kernel_fn("rowprep", (text_rows, text_dim, tp, dp, text_rows, text_dim, 1, LN))(enc, t_ln, enc)
    k_text = _gemm(t_ln, to_k_context_weight, to_k_context_bias)
    v_text = _gemm(t_ln, to_v_context_weight, to_v_context_bias)

    attn = torch.zeros(mp, hidden, dtype=torch.float32, device=dev) if mp != rows else torch.empty_like(x)
    _kernel_fn("attention", (mp, hidden, tp, batch, tokens, text, heads))(
        q, k, v, k_text, v_text, attn, float(1.0 / math.sqrt(HEAD_DIM)))
    out = _gemm(attn, to_out_weight, to_out_bias, x=_padded(x, (mp, hidden)), gate=mod, rows_per_batch=tokens,
                gate_off=2 * hidden)
    return out[:rows].view(batch, tokens, hidden)


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


def _builds(batch=4, grid=(4, 16, 16), text_tokens=256, heads=24, text_dim=4096):
    """The (kind, shape) builds of the graded workload (the problem's defaults), in launch order."""
    tokens = grid[0] * grid[1] * grid[2]
    hidden = heads * HEAD_DIM
    rows, text_rows, bp = batch * tokens, batch * text_tokens, _up(batch, BM)
    return (("rowprep", (batch, hidden, bp, hidden, batch, hidden, 1, SILU)),
            ("gemm", (bp, 3 * hidden, hidden, bp, 3 * hidden, 1, 0, False)),
            ("rowprep", (rows, hidden, rows, hidden, bp, 3 * hidden, tokens, LN_MOD)),
            ("gemm", (rows, hidden, hidden, rows, hidden, 1, 0, False)),
            ("rope", (rows, hidden, tokens, heads, (16, 56, 56))),
            ("rowprep", (text_rows, text_dim, text_rows, text_dim, text_rows, text_dim, 1, LN)),
            ("gemm", (text_rows, hidden, text_dim, text_rows, hidden, 1, 0, False)),
            ("attention", (rows, hidden, text_rows, batch, tokens, text_tokens, heads)),
            ("gemm", (rows, hidden, hidden, bp, 3 * hidden, tokens, 2 * hidden, True)))


def kernel_sources(arch="sm_90a"):
    """{kernel symbol: generated CUDA source} at the graded workload; for a kernel built several times
    (row kernel, GEMM), the source of its last build (the LayerNorm build, the gated GEMM)."""
    sources = {}
    for kind, shape in _builds():
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
