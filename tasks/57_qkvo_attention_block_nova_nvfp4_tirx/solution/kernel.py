"""TIRx oracle for problem 57: NVFP4 attention block (q/k/v projections, RoPE, causal GQA, o_proj).

The NVFP4 steps follow the reference's fp32 semantics exactly; everything between the projections
and the context's quantiser is kept in fp32 (the float64 anchor has no bf16 roundings there, and
the reference's own bf16 roundings are what its error consists of), so the context's NVFP4 codes
track the anchor's at least as well as the reference's do. Kernels (14 launches):

1. ``mkb_nvfp4_amax`` (``_bf16`` for the hidden states): partial maxima of |x| over the flat
   activation, 528 CTAs of 256 threads striding over 4-element vectors; xor-shuffle max, then
   across the 8 warps in shared memory. A maximum is exact in any order.
2. ``mkb_nvfp4_global_scale``: one warp folds the partial maxima and writes g = amax * fl(1 / 2688),
   which is what eager PyTorch computes on the GPU for ``amax / (448 * 6)`` (a tensor divided by a
   Python number is a multiplication by the rounded reciprocal; likewise ``/ 6.0``).
3. ``mkb_nvfp4_act_quant`` (``_bf16`` for the hidden states): one thread per 16-element block:
   s = e4m3(fl(amax_block * fl(1/6)) / g), unit = s * g, r = x / unit (unit 1 for a zero scale);
   NVRTC builds with --use_fast_math, so both divisions are the IEEE instruction by name
   (``div.rn.f32``); ``cvt.rn.satfinite.e4m3x2.f32`` rounds the scale (nearest even); |r| is rounded
   to the E2M1 grid by the midpoints, ties to the even code; code * s is written as bf16 (exact).
   Rows past the token count (padding to whole 128-row tiles) are zeros. The hidden states are
   quantised once for the three projections (the reference quantises them three times, identically).
4. ``mkb_nvfp4_weight_decode``: one thread per 16-element weight block decodes the packed E2M1
   codes (low nibble first) and the e4m3 scale from their bit fields; code * s as bf16.
5. ``mkb_nvfp4_gemm`` (``_bf16`` for the o_proj output): C = (A_q @ W_q^T) * (g_x * g_w) on the
   tensor cores: warp-level ``mma.sync`` m16n8k16 (bf16 operands, fp32 accumulation; every product
   of two decoded values is exact in fp32) issued through TIRx's PTX intrinsic with hand-written
   fragment maps (TIRx 0.27 has no WGMMA path for sm_90); 128 x 128 tiles of 4 x 2 warps, K slices
   of 32 in two padded shared-memory stages, operands read as 32-bit words of bf16 pairs.
6. ``mkb_attn_core``: one CTA of 128 threads per (16-query tile, head, batch row), fp32 SIMT. The
   query tile and, 32 keys at a time, the KV head's keys (h // group) get the rotate-half RoPE in
   fp32 (x * cos + rotate_half(x) * sin) while they are staged in shared memory (rows padded to 129
   words: conflict-free). Scores q . k * fl(128^-0.5) of the causal keys go to a shared score tile
   (thread = query x 4 keys); each warp then normalises 4 rows (lane = keys l, l + 32, ...): max,
   exp2((s - max) * log2 e) (the fast-math exp2, relative error ~2^-22), warp sums, ``div.rn.f32``.
   P @ V: thread = head dim, 16 query accumulators, V staged 32 keys at a time; the fp32 context is
   written as [tokens, heads * 128].
Then steps 1-3 on the context and step 5 with the o_proj weight give the bf16 output.
"""


import torch
import tvm
from tvm.script import tirx as T

BLOCK = 16
HEAD_DIM = 128
INV_2688 = 0.00037202381645329297  # fl32(1 / 2688)
INV_6 = 0.1666666716337204  # fl32(1 / 6)
SCALE = 0.08838834764831845  # 128 ** -0.5 (an fp32 constant, as in the reference's product)
LOG2E = 1.4426950408889634
BM = 128
BN = 128
BK = 32
THREADS = 256
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
KW = 16  # 32-bit words (bf16 pairs) per row of one 32-wide K slice
PADW = 20  # shared-memory row stride in words (16 + 4 keeps the fragment reads conflict-free)
AMAX_CTAS = 528
QT = 16  # queries per attention CTA
KC = 32  # keys staged per step
ATT_THREADS = 128
PAD = HEAD_DIM + 1  # shared row stride (words)
# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(batch=64, seq=128, hidden=8192, heads=64, kv_heads=8)
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def e4m3_to_f32(code):
    """The fp32 value of a finite e4m3fn byte given as an int32 in [0, 255] (exact)."""
    sign = T.shift_left(T.shift_right(code, 7), 31)
    exponent = T.bitwise_and(T.shift_right(code, 3), 15)
    mantissa = T.bitwise_and(code, 7)
    normal = T.reinterpret("float32", T.bitwise_or(
        sign, T.bitwise_or(T.shift_left(exponent + 120, 23), T.shift_left(mantissa, 20))))
    tiny = T.float32(mantissa) * T.float32(0.001953125)  # mantissa * 2^-9
    subnormal = T.if_then_else(code >= 128, tiny * T.float32(-1.0), tiny)
    return T.if_then_else(exponent == 0, subnormal, normal)


def e2m1_to_f32(code):
    """Signed E2M1 value of a 4-bit code (bit 3 sign, bits 0-2 magnitude index)."""
    mag = code & 7
    value = T.if_then_else(
        mag < 4,
        T.if_then_else(mag < 2, T.if_then_else(mag == 0, _f32(0.0), _f32(0.5)),
                       T.if_then_else(mag == 2, _f32(1.0), _f32(1.5))),
        T.if_then_else(mag < 6, T.if_then_else(mag == 4, _f32(2.0), _f32(3.0)),
                       T.if_then_else(mag == 6, _f32(4.0), _f32(6.0))))
    return T.if_then_else(code >= 8, value * _f32(-1.0), value)


def e2m1_round(a):
    """|r| (>= 0) rounded to the E2M1 grid, ties to the even code."""
    v = T.if_then_else(a > _f32(0.25), _f32(0.5), _f32(0.0))
    v = T.if_then_else(a >= _f32(0.75), _f32(1.0), v)
    v = T.if_then_else(a > _f32(1.25), _f32(1.5), v)
    v = T.if_then_else(a >= _f32(1.75), _f32(2.0), v)
    v = T.if_then_else(a > _f32(2.5), _f32(3.0), v)
    v = T.if_then_else(a >= _f32(3.5), _f32(4.0), v)
    return T.if_then_else(a > _f32(5.0), _f32(6.0), v)


def _shfl_xor(value, mask):
    return T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), value, mask, 32)


def _amax_kernel(n, dtype):
    """P[cta] = max |X| over the 4-element vectors the CTA strides over (n % 4 == 0)."""
    n4 = n // 4
    iters = (n4 + AMAX_CTAS * THREADS - 1) // (AMAX_CTAS * THREADS)

    @T.prim_func
    def mkb_nvfp4_amax(x_h: T.handle, p_h: T.handle):
        X = T.match_buffer(x_h, (n,), dtype)
        P = T.match_buffer(p_h, (AMAX_CTAS,), "float32")
        T.device_entry()
        cta = T.cta_id([AMAX_CTAS])
        tx = T.thread_id([THREADS])
        red = T.alloc_buffer((THREADS // 32,), "float32", scope="shared")
        vals = T.alloc_buffer((4,), "float32", scope="local")
        amax: T.f32 = T.float32(0.0)
        for it in T.serial(iters):
            v4: T.let = (it * AMAX_CTAS + cta) * THREADS + tx
            if v4 < n4:
                for j in T.unroll(4):
                    vals[j] = T.float32(X[v4 * 4 + j])
                for j in T.unroll(4):
                    amax = T.max(amax, T.abs(vals[j]))
        for i in T.unroll(5):
            amax = T.max(amax, _shfl_xor(amax, T.shift_right(16, i)))
        if tx % 32 == 0:
            red[tx // 32] = amax
        T.cuda.cta_sync()
        if tx == 0:
            for i in T.unroll(THREADS // 32):
                amax = T.max(amax, red[i])
            P[cta] = amax

    if dtype == "float32":
        return mkb_nvfp4_amax
    return mkb_nvfp4_amax.with_attr("global_symbol", "mkb_nvfp4_amax_bf16")


def _global_scale_kernel():
    """G[0] = max(P) * fl(1/2688), one warp."""

    @T.prim_func
    def mkb_nvfp4_global_scale(p_h: T.handle, g_h: T.handle):
        P = T.match_buffer(p_h, (AMAX_CTAS,), "float32")
        G = T.match_buffer(g_h, (1,), "float32")
        T.device_entry()
        T.cta_id([1])
        tx = T.thread_id([32])
        amax: T.f32 = T.float32(0.0)
        for it in T.serial((AMAX_CTAS + 31) // 32):
            if it * 32 + tx < AMAX_CTAS:
                amax = T.max(amax, P[it * 32 + tx])
        for i in T.unroll(5):
            amax = T.max(amax, _shfl_xor(amax, T.shift_right(16, i)))
        if tx == 0:
            G[0] = amax * _f32(INV_2688)

    return mkb_nvfp4_global_scale


def _act_quant_kernel(rows, padded, k, dtype):
    """Q[r, 16b : 16b + 16] = code * s (bf16) of X's block (r, b); zeros for r >= rows."""
    blocks = k // BLOCK
    total = padded * blocks

    @T.prim_func
    def mkb_nvfp4_act_quant(x_h: T.handle, g_h: T.handle, q_h: T.handle):
        X = T.match_buffer(x_h, (rows, k), dtype)
        G = T.match_buffer(g_h, (1,), "float32")
        Q = T.match_buffer(q_h, (padded, k), "bfloat16")
        T.device_entry()
        bx = T.cta_id([(total + THREADS - 1) // THREADS])
        tx = T.thread_id([THREADS])
        vals = T.alloc_buffer((BLOCK,), "float32", scope="local")
        outv = T.alloc_buffer((BLOCK,), "bfloat16", scope="local")
        tmp = T.alloc_buffer((4,), "float32", scope="local")
        rr = T.alloc_buffer((2,), "float32", scope="local")
        pair = T.alloc_buffer((1,), "uint16", scope="local")
        idx: T.let = bx * THREADS + tx
        if idx < total:
            r: T.let = idx // blocks
            b: T.let = idx % blocks
            for j in T.unroll(BLOCK):
                outv[j] = T.bfloat16(0.0)
            if r < rows:
                for j in T.unroll(BLOCK):
                    vals[j] = T.float32(X[r, b * BLOCK + j])
                g: T.let = G[0]
                amax: T.f32 = T.float32(0.0)
                for j in T.unroll(BLOCK):
                    amax = T.max(amax, T.abs(vals[j]))
                tmp[0] = amax * _f32(INV_6)
                T.ptx["div.rn.f32"](tmp[1], tmp[0], g)
                T.ptx["cvt.rn.satfinite.e4m3x2.f32"](pair[0], tmp[1], _f32(0.0))  # first operand: high byte
                tmp[2] = e4m3_to_f32(T.Cast("int32", T.shift_right(pair[0], T.uint16(8))))
                tmp[3] = tmp[2] * g
                tmp[3] = T.if_then_else(tmp[3] > _f32(0.0), tmp[3], _f32(1.0))
                for j in T.unroll(BLOCK):
                    T.ptx["div.rn.f32"](rr[0], vals[j], tmp[3])
                    rr[1] = e2m1_round(T.abs(rr[0]))
                    outv[j] = T.bfloat16(T.if_then_else(rr[0] < _f32(0.0), rr[1] * _f32(-1.0), rr[1]) * tmp[2])
            for c in T.unroll(2):
                for j in T.vectorized(8):
                    Q[r, b * BLOCK + c * 8 + j] = outv[c * 8 + j]

    if dtype == "float32":
        return mkb_nvfp4_act_quant
    return mkb_nvfp4_act_quant.with_attr("global_symbol", "mkb_nvfp4_act_quant_bf16")


def _weight_decode_kernel(rows, padded, k):
    """Q[r, 16b : 16b + 16] = code * s (bf16) of the weight's block (r, b); zeros for padding rows."""
    blocks = k // BLOCK
    total = padded * blocks

    @T.prim_func
    def mkb_nvfp4_weight_decode(c_h: T.handle, s_h: T.handle, q_h: T.handle):
        CODES = T.match_buffer(c_h, (rows, k // 2), "uint8")
        SCALES = T.match_buffer(s_h, (rows, blocks), "uint8")
        Q = T.match_buffer(q_h, (padded, k), "bfloat16")
        T.device_entry()
        bx = T.cta_id([(total + THREADS - 1) // THREADS])
        tx = T.thread_id([THREADS])
        raw = T.alloc_buffer((BLOCK // 2,), "uint8", scope="local")
        outv = T.alloc_buffer((BLOCK,), "bfloat16", scope="local")
        idx: T.let = bx * THREADS + tx
        if idx < total:
            r: T.let = idx // blocks
            b: T.let = idx % blocks
            for j in T.unroll(BLOCK):
                outv[j] = T.bfloat16(0.0)
            if r < rows:
                for j in T.vectorized(BLOCK // 2):
                    raw[j] = CODES[r, b * (BLOCK // 2) + j]
                s: T.let = e4m3_to_f32(T.int32(SCALES[r, b]))
                for j in T.unroll(BLOCK // 2):
                    outv[2 * j] = T.bfloat16(e2m1_to_f32(T.int32(raw[j]) & 15) * s)
                    outv[2 * j + 1] = T.bfloat16(e2m1_to_f32(T.shift_right(T.int32(raw[j]), 4)) * s)
            for c in T.unroll(2):
                for j in T.vectorized(8):
                    Q[r, b * BLOCK + c * 8 + j] = outv[c * 8 + j]

    return mkb_nvfp4_weight_decode


def _gemm_kernel(out_dtype, m, n, k):
    """C[m, n] = (sum_k A[m, k] B[n, k]) * (G[0] * w_scale): bf16 operands given as 32-bit words of bf16 pairs
    (A32 [m, k / 2], B32 [n, k / 2]); m, n multiples of 128, k of 32."""
    k_tiles = k // 32
    tiles_n = n // 128
    tiles_m = m // 128

    @T.prim_func
    def mkb_nvfp4_gemm(a_h: T.handle, b_h: T.handle, g_h: T.handle, w_scale: T.float32, c_h: T.handle):
        A32 = T.match_buffer(a_h, (m, k // 2), "uint32")
        B32 = T.match_buffer(b_h, (n, k // 2), "uint32")
        G = T.match_buffer(g_h, (1,), "float32")
        C = T.match_buffer(c_h, (m, n), out_dtype)
        T.device_entry()
        cta = T.cta_id([tiles_m * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((2, 128, PADW), "uint32", scope="shared")
        b_s = T.alloc_buffer((2, 128, PADW), "uint32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "uint32", scope="local")
        bfr = T.alloc_buffer((16,), "uint32", scope="local")
        ra = T.alloc_buffer((8,), "uint32", scope="local")
        rb = T.alloc_buffer((8,), "uint32", scope="local")
        row0: T.let = (cta // tiles_n) * 128
        col0: T.let = (cta % tiles_n) * 128
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wm: T.let = (warp % 4) * 32
        wn: T.let = (warp // 4) * 64
        lrow: T.let = tx // 2
        lw: T.let = (tx % 2) * 8
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for c in T.unroll(2):
            for j in T.vectorized(4):
                ra[c * 4 + j] = A32[row0 + lrow, lw + c * 4 + j]
            for j in T.vectorized(4):
                rb[c * 4 + j] = B32[col0 + lrow, lw + c * 4 + j]
        for j in T.unroll(8):
            a_s[0, lrow, lw + j] = ra[j]
            b_s[0, lrow, lw + j] = rb[j]
        T.cuda.cta_sync()
        for kt in range(k_tiles):
            st: T.let = kt % 2
            if kt + 1 < k_tiles:  # the next slice's loads fly while this one is multiplied
                for c in T.unroll(2):
                    for j in T.vectorized(4):
                        ra[c * 4 + j] = A32[row0 + lrow, (kt + 1) * KW + lw + c * 4 + j]
                    for j in T.vectorized(4):
                        rb[c * 4 + j] = B32[col0 + lrow, (kt + 1) * KW + lw + c * 4 + j]
            for ks in T.unroll(2):
                # fragments: a(mi) = rows g / g + 8 x words t / t + 4 of the warp's 16-row tile mi; b(ni) = row g
                for mi in T.unroll(2):
                    for h in T.unroll(2):
                        for q in T.unroll(2):
                            af[mi * 4 + q * 2 + h] = a_s[st, wm + mi * 16 + h * 8 + g, ks * 8 + q * 4 + t]
                for ni in T.unroll(8):
                    for q in T.unroll(2):
                        bfr[ni * 2 + q] = b_s[st, wn + ni * 8 + g, ks * 8 + q * 4 + t]
                for mi in T.unroll(2):
                    for ni in T.unroll(8):
                        T.ptx[MMA](acc[mi * 32 + ni * 4], acc[mi * 32 + ni * 4 + 1], acc[mi * 32 + ni * 4 + 2],
                                   acc[mi * 32 + ni * 4 + 3], af[mi * 4], af[mi * 4 + 1], af[mi * 4 + 2],
                                   af[mi * 4 + 3], bfr[ni * 2], bfr[ni * 2 + 1], acc[mi * 32 + ni * 4],
                                   acc[mi * 32 + ni * 4 + 1], acc[mi * 32 + ni * 4 + 2], acc[mi * 32 + ni * 4 + 3])
            if kt + 1 < k_tiles:  # the other stage was last read before the previous barrier
                for j in T.unroll(8):
                    a_s[1 - st, lrow, lw + j] = ra[j]
                    b_s[1 - st, lrow, lw + j] = rb[j]
            T.cuda.cta_sync()
        gs: T.let = G[0] * w_scale
        for mi in T.unroll(2):
            for h in T.unroll(2):
                for ni in T.unroll(8):
                    for c in T.unroll(2):  # accumulators 2h, 2h + 1: row g (+ 8), columns 2t, 2t + 1
                        C[row0 + wm + mi * 16 + h * 8 + g, col0 + wn + ni * 8 + 2 * t + c] = T.Cast(
                            out_dtype, acc[mi * 32 + ni * 4 + 2 * h + c] * gs)

    if out_dtype == "float32":
        return mkb_nvfp4_gemm
    return mkb_nvfp4_gemm.with_attr("global_symbol", "mkb_nvfp4_gemm_bf16")


def _attn_kernel(batch, seq, heads, kv_heads, mp):
    """CTX[b*seq + i, h*128 + d] = softmax_{j<=i}(q_i . k_j * scale) @ v in fp32, RoPE on q and k."""
    group = heads // kv_heads
    spad = (seq + KC - 1) // KC * KC
    tokens = batch * seq
    nq, nkv = heads * HEAD_DIM, kv_heads * HEAD_DIM
    half = HEAD_DIM // 2
    rows_per_warp = QT // (ATT_THREADS // 32)

    @T.prim_func
    def mkb_attn_core(q_h: T.handle, k_h: T.handle, v_h: T.handle, cos_h: T.handle, sin_h: T.handle,
                      ctx_h: T.handle):
        Q = T.match_buffer(q_h, (mp, nq), "float32")
        K = T.match_buffer(k_h, (mp, nkv), "float32")
        V = T.match_buffer(v_h, (mp, nkv), "float32")
        COS = T.match_buffer(cos_h, (tokens, HEAD_DIM), "bfloat16")
        SIN = T.match_buffer(sin_h, (tokens, HEAD_DIM), "bfloat16")
        CTX = T.match_buffer(ctx_h, (tokens, nq), "float32")
        T.device_entry()
        qt, h, b = T.cta_id([(seq + QT - 1) // QT, heads, batch])
        tx = T.thread_id([ATT_THREADS])
        q_s = T.alloc_buffer((QT, PAD), "float32", scope="shared")
        kv_s = T.alloc_buffer((KC, PAD), "float32", scope="shared")
        s_s = T.alloc_buffer((QT, spad), "float32", scope="shared")
        acc = T.alloc_buffer((QT,), "float32", scope="local")
        st = T.alloc_buffer((4,), "float32", scope="local")  # row max, row sum, divisor, quotient
        kh: T.let = h // group
        row0: T.let = b * seq
        q0: T.let = qt * QT
        lane: T.let = tx % 32
        warp: T.let = tx // 32
        # the query tile with RoPE (rows past the sequence are zeros)
        for i in T.unroll(QT):
            if q0 + i < seq:
                xq: T.f32 = Q[row0 + q0 + i, h * HEAD_DIM + tx]
                xo: T.f32 = Q[row0 + q0 + i, h * HEAD_DIM + (tx + half) % HEAD_DIM]
                q_s[i, tx] = xq * T.float32(COS[row0 + q0 + i, tx]) + T.if_then_else(
                    tx < half, _f32(0.0) - xo, xo) * T.float32(SIN[row0 + q0 + i, tx])
            else:
                q_s[i, tx] = _f32(0.0)
        n_keys: T.let = T.min(q0 + QT, seq)
        qi: T.let = tx // 8
        kg: T.let = tx % 8
        # scores of the causal keys, 32 keys at a time: thread = query qi x keys kg + 8u
        for kc in range((n_keys + KC - 1) // KC):
            T.cuda.cta_sync()
            for j in T.unroll(KC):
                if kc * KC + j < seq:
                    xk: T.f32 = K[row0 + kc * KC + j, kh * HEAD_DIM + tx]
                    xko: T.f32 = K[row0 + kc * KC + j, kh * HEAD_DIM + (tx + half) % HEAD_DIM]
                    kv_s[j, tx] = xk * T.float32(COS[row0 + kc * KC + j, tx]) + T.if_then_else(
                        tx < half, _f32(0.0) - xko, xko) * T.float32(SIN[row0 + kc * KC + j, tx])
                else:
                    kv_s[j, tx] = _f32(0.0)
            T.cuda.cta_sync()
            for u in T.unroll(KC // 8):
                dot: T.f32 = _f32(0.0)
                for d in T.unroll(HEAD_DIM):
                    dot = dot + q_s[qi, d] * kv_s[kg + 8 * u, d]
                s_s[qi, kc * KC + kg + 8 * u] = dot * _f32(SCALE)
        T.cuda.cta_sync()
        # softmax of each query row over keys j <= i: warp w owns rows 4w .. 4w + 3
        for rr in T.unroll(rows_per_warp):
            st[0] = _f32(-3.0e38)
            for c in T.unroll(spad // 32):
                if c * 32 + lane <= q0 + warp * rows_per_warp + rr:
                    if q0 + warp * rows_per_warp + rr < seq:
                        st[0] = T.max(st[0], s_s[warp * rows_per_warp + rr, c * 32 + lane])
            for i in T.unroll(5):
                other: T.f32 = T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), st[0], T.shift_right(16, i), 32)
                st[0] = T.max(st[0], other)
            st[1] = _f32(0.0)
            for c in T.unroll(spad // 32):
                if c * 32 + lane <= q0 + warp * rows_per_warp + rr and q0 + warp * rows_per_warp + rr < seq:
                    st[2] = T.exp2((s_s[warp * rows_per_warp + rr, c * 32 + lane] - st[0]) * _f32(LOG2E))
                else:
                    st[2] = _f32(0.0)
                s_s[warp * rows_per_warp + rr, c * 32 + lane] = st[2]
                st[1] = st[1] + st[2]
            total: T.f32 = T.cuda.warp_sum(st[1])
            st[2] = T.if_then_else(total > _f32(0.0), total, _f32(1.0))
            for c in T.unroll(spad // 32):
                T.ptx["div.rn.f32"](st[3], s_s[warp * rows_per_warp + rr, c * 32 + lane], st[2])
                s_s[warp * rows_per_warp + rr, c * 32 + lane] = st[3]
        # P @ V: thread = head dim, one accumulator per query of the tile
        for r in T.unroll(QT):
            acc[r] = _f32(0.0)
        for kc in range((n_keys + KC - 1) // KC):
            T.cuda.cta_sync()
            for j in T.unroll(KC):
                kv_s[j, tx] = T.if_then_else(kc * KC + j < seq,
                                             V[T.min(row0 + kc * KC + j, mp - 1), kh * HEAD_DIM + tx], _f32(0.0))
            T.cuda.cta_sync()
            for j in T.unroll(KC):
                for r in T.unroll(QT):
                    acc[r] = acc[r] + s_s[r, kc * KC + j] * kv_s[j, tx]
        for r in T.unroll(QT):
            if q0 + r < seq:
                CTX[row0 + q0 + r, h * HEAD_DIM + tx] = acc[r]

    return mkb_attn_core


def _make(kind, shape):
    if kind == "amax":
        return _amax_kernel(*shape)
    if kind == "gscale":
        return _global_scale_kernel()
    if kind == "act":
        return _act_quant_kernel(*shape)
    if kind == "weight":
        return _weight_decode_kernel(*shape)
    if kind == "attn":
        return _attn_kernel(*shape)
    return _gemm_kernel(*shape)


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _make(kind, shape)}), target=target,
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


def _plan(batch, seq, hidden, heads, kv_heads):
    """(kind, shape) of every launch, in order."""
    m = batch * seq
    mp = _up(m, BM)
    nq, nkv = heads * HEAD_DIM, kv_heads * HEAD_DIM
    return [("amax", (m * hidden, "bfloat16")), ("gscale", ()), ("act", (m, mp, hidden, "bfloat16")),
            ("weight", (nq, _up(nq, BN), hidden)), ("weight", (nkv, _up(nkv, BN), hidden)),
            ("weight", (hidden, _up(hidden, BN), nq)),
            ("gemm", ("float32", mp, _up(nq, BN), hidden)), ("gemm", ("float32", mp, _up(nkv, BN), hidden)),
            ("attn", (batch, seq, heads, kv_heads, mp)), ("amax", (m * nq, "float32")),
            ("act", (m, mp, nq, "float32")), ("gemm", ("bfloat16", mp, _up(hidden, BN), nq))]


def solve(hidden_states, cos, sin, q_weight_fp4, q_scale, q_global_decode_scale, k_weight_fp4, k_scale,
          k_global_decode_scale, v_weight_fp4, v_scale, v_global_decode_scale, o_weight_fp4, o_scale,
          o_global_decode_scale):
    batch, seq, hidden = hidden_states.shape
    heads = q_weight_fp4.shape[0] // HEAD_DIM
    kv_heads = k_weight_fp4.shape[0] // HEAD_DIM
    nq, nkv = heads * HEAD_DIM, kv_heads * HEAD_DIM
    m = batch * seq
    dev = hidden_states.device
    assert hidden % BK == 0 and nq % BK == 0 and heads % kv_heads == 0
    mp = _up(m, BM)
    f32 = torch.float32

    def weight(packed, scale, rows, k):
        qw = torch.empty(_up(rows, BN), k, dtype=torch.bfloat16, device=dev)
        _kernel_fn("weight", (rows, _up(rows, BN), k))(packed.contiguous(), scale.contiguous().view(torch.uint8), qw)
        return qw

    def project(qa, qw, gbuf, g_w, k, out_dtype):
        dtype = torch.float32 if out_dtype == "float32" else torch.bfloat16
        out = torch.empty(mp, qw.shape[0], dtype=dtype, device=dev)
        _kernel_fn("gemm", (out_dtype, mp, qw.shape[0], k))(qa.view(torch.uint32), qw.view(torch.uint32), gbuf,
                                                           float(g_w), out)
        return out

    def quantise(x, k, dtype):
        partial = torch.empty(AMAX_CTAS, dtype=f32, device=dev)
        gbuf = torch.empty(1, dtype=f32, device=dev)
        _kernel_fn("amax", (m * k, dtype))(x.view(m * k), partial)
        _kernel_fn("gscale", ())(partial, gbuf)
        qa = torch.empty(mp, k, dtype=torch.bfloat16, device=dev)
        _kernel_fn("act", (m, mp, k, dtype))(x, gbuf, qa)
        return qa, gbuf

    x = hidden_states.contiguous().view(m, hidden)
    qa, gx = quantise(x, hidden, "bfloat16")
    q = project(qa, weight(q_weight_fp4, q_scale, nq, hidden), gx, q_global_decode_scale, hidden, "float32")
    k = project(qa, weight(k_weight_fp4, k_scale, nkv, hidden), gx, k_global_decode_scale, hidden, "float32")
    v = project(qa, weight(v_weight_fp4, v_scale, nkv, hidden), gx, v_global_decode_scale, hidden, "float32")
    ctx = torch.empty(m, nq, dtype=f32, device=dev)
    _kernel_fn("attn", (batch, seq, heads, kv_heads, mp))(q, k, v, cos.contiguous().view(m, HEAD_DIM),
                                                          sin.contiguous().view(m, HEAD_DIM), ctx)
    qc, gc = quantise(ctx, nq, "float32")
    out = project(qc, weight(o_weight_fp4, o_scale, hidden, nq), gc, o_global_decode_scale, nq, "bfloat16")
    return out[:m, :hidden].reshape(batch, seq, hidden)


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


def kernel_sources(arch="sm_90a", **workload):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    sources = {}
    for kind, shape in dict.fromkeys(_plan(**(workload or WORKLOAD))):
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
