"""TIRx oracle for problem 45: capacity-limited MoE expert execution (routing given), SwiGLU experts
with weights stored [E, in, out], bf16.

The dispatch gather, the three expert GEMMs, the SwiGLU and the weighted combine run in TIRx kernels;
torch only sorts the (token, k) assignments and builds index tables.

- Capacity rule (glue, as the reference): the assignments flattened token-major are stably sorted
  by expert; an expert keeps its first C = floor(T k / E * 1.25) sorted assignments and drops the
  rest. The kept rows of expert e are sorted positions starts[e] .. starts[e] + min(count, C) - 1;
  they are cut into 64-row tiles listed in a fixed table of E * ceil(C / 64) entries (empty entries
  do nothing, so there is no host sync). Zero rows of the reference's padded buffer are not run:
  their outputs are never used.
- ``mkb_moe_cap_tc_glu`` / ``mkb_moe_cap_tc_down`` (the graded shapes: hidden and inter multiples
  of 128), tensor cores through the warp-level ``mma.sync.m16n8k16`` (bf16 operands, fp32
  accumulation) issued as a TIRx PTX intrinsic with the fragments placed by hand: a CTA (8 warps,
  2 x 4, each 32 x 32) owns one tile of up to 64 rows of one expert and 128 output columns, K in
  slices of 32 with the next slice's global loads in flight while the current one is computed. A
  rows (tokens gathered through an index table; rows past the tile's end repeat its last row and
  are not stored) go to shared rows of 16 words padded to 20; the N-major weights are read as
  32-bit words (two columns) from K rows 2p and 2p + 1 and repacked into (K 2p, K 2p + 1) words per
  column, the B fragment layout. A lane (g = lane / 4, t = lane % 4) reads A words (row g | g + 8,
  k-word t | t + 4) and B words (column g, k-word t | t + 4); its accumulators are rows g | g + 8,
  columns 2t, 2t + 1 of each 16 x 8 tile. The gate/up kernel keeps two accumulators for the same
  columns and writes h = bf16(bf16(silu(bf16(gate))) * bf16(up)); the down kernel writes
  y = bf16(h W_d[e]).
- ``mkb_moe_cap_swiglu`` / ``mkb_moe_cap_down`` (other shapes): the same tiles on SIMT: bf16
  operands read as 32-bit words and widened exactly to fp32 into shared memory, 256 threads each
  with a 4 x 8 fp32 accumulator updated by fp32 multiply-adds, and the same epilogues.
- ``mkb_moe_cap_combine``: one CTA per token; per column, the token's kept contributions
  bf16(y * weight) in ascending expert order (dropped ones add zero) are summed with a bf16
  rounding after each add, as the reference.
silu uses a precise exp and a Newton-corrected division (NVRTC builds with --use_fast_math).
TIRx 0.27 has no WGMMA path on sm_90, so the tensor-core kernels use the Ampere-style mma.sync,
below cuBLAS's WGMMA GEMMs. ``_TENSOR_CORES = False`` routes every shape through the SIMT kernels.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 23): 51.1 ms against
the eager reference's 22.2 ms (0.44x). The grader's profiled call puts 99.6 % of the GPU time in DSL
kernels: the gate/up GEMM with the SwiGLU 30.8 ms, the down GEMM 17.5 ms, the combine 0.35 ms (the
torch sort and index tables about 0.2 ms). At most T k = 65,536 rows are kept, so the gate/up GEMM
is at most 4.12 TFLOP and the down GEMM 2.06 TFLOP: these mma.sync loops issue at most 134 and 118
TFLOP/s. The reference runs its batched cuBLAS GEMMs over the whole capacity-padded buffer (160
experts x 512 slots = 81,920 rows, 7.73 TFLOP) in 22.2 ms, at least 348 TFLOP/s of WGMMA. The route
that would beat eager, not taken here: WGMMA (``wgmma.mma_async`` as a PTX intrinsic, operands in
128-byte-swizzled shared memory loaded by TMA, a warpgroup per 64-row tile, several stages in
flight) on the same expert-sorted tiles; at the reference's rate the kept rows alone take at most
17.8 ms.
"""

import torch
import tvm
from tvm.script import tirx as T

CAPACITY_FACTOR = 1.25
# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(tokens=8192, hidden=6144, inter=2560, experts=160, top_k=8)
BM, BN, BK = 64, 128, 32  # rows per tile, columns per CTA (SwiGLU: 64 gate + 64 up), K step
HALF = BN // 2
THREADS = 256
A_STRIDE = BM + 1  # shared tiles are K-major, padded by one word
B_STRIDE = BN + 1
TBM, TBN, TBK = 64, 128, 32  # tensor-core tiles: rows, columns (of gate and of up), K step
PAD = TBK // 2 + 4  # 32-bit words per shared-memory row of the tensor-core tiles: 16 of data, 4 of padding
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
_TENSOR_CORES = True  # False: the SIMT kernels for every shape
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


def _lo(word):
    """The bf16 in the low half of an int32 word, as fp32 (exact)."""
    return T.reinterpret("float32", T.shift_left(word, 16))


def _hi(word):
    """The bf16 in the high half of an int32 word, as fp32 (exact)."""
    return T.reinterpret("float32", word & T.int32(-65536))


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return T.float32(T.bfloat16(x))


def _swiglu_kernel(hidden, inter):
    """h[p, j] = bf16(bf16(silu(bf16(A_p . G_e[:, j]))) * bf16(A_p . U_e[:, j])) over the rows p of each tile."""
    kwords = hidden // 2
    nwords = inter // 2
    hw = HALF // 2  # words per K row of one half

    @T.prim_func
    def mkb_moe_cap_swiglu(a_h: T.handle, idx_h: T.handle, g_h: T.handle, u_h: T.handle, tiles_h: T.handle,
                           h_h: T.handle):
        tokens = T.int32()
        rows = T.int32()
        n_experts = T.int32()
        max_tiles = T.int32()
        a_words = T.match_buffer(a_h, (tokens, kwords), "int32")
        rowidx = T.match_buffer(idx_h, (rows,), "int32")
        g_words = T.match_buffer(g_h, (n_experts, hidden, nwords), "int32")
        u_words = T.match_buffer(u_h, (n_experts, hidden, nwords), "int32")
        tiles = T.match_buffer(tiles_h, (max_tiles, 3), "int32")
        h_out = T.match_buffer(h_h, (rows, inter), "bfloat16")
        T.device_entry()
        nb, tb = T.cta_id([(inter + HALF - 1) // HALF, max_tiles])
        tid = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK * A_STRIDE,), "float32", scope="shared")
        b_s = T.alloc_buffer((BK * B_STRIDE,), "float32", scope="shared")
        acc = T.alloc_buffer((32,), "float32", scope="local")
        expert: T.let = tiles[tb, 0]
        row_begin: T.let = tiles[tb, 1]
        row_end: T.let = tiles[tb, 2]
        n0: T.let = nb * HALF
        ty: T.let = tid // 16
        tx: T.let = tid % 16
        if row_end > row_begin:  # uniform over the CTA
            for i in T.unroll(32):
                acc[i] = T.float32(0.0)
            for kt in range((hidden + BK - 1) // BK):
                for q in T.unroll(BM * BK // 2 // THREADS):
                    r: T.let = (tid + q * THREADS) // (BK // 2)
                    w: T.let = (tid + q * THREADS) % (BK // 2)
                    if row_begin + r < row_end and kt * (BK // 2) + w < kwords:
                        word: T.let = a_words[rowidx[row_begin + r], kt * (BK // 2) + w]
                        a_s[2 * w * A_STRIDE + r] = _lo(word)
                        a_s[(2 * w + 1) * A_STRIDE + r] = _hi(word)
                    else:
                        a_s[2 * w * A_STRIDE + r] = T.float32(0.0)
                        a_s[(2 * w + 1) * A_STRIDE + r] = T.float32(0.0)
                for q in T.unroll(HALF * BK // 2 // THREADS):
                    kk: T.let = (tid + q * THREADS) // hw
                    w2: T.let = (tid + q * THREADS) % hw
                    if kt * BK + kk < hidden and nb * hw + w2 < nwords:
                        gword: T.let = g_words[expert, kt * BK + kk, nb * hw + w2]
                        uword: T.let = u_words[expert, kt * BK + kk, nb * hw + w2]
                        b_s[kk * B_STRIDE + 2 * w2] = _lo(gword)
                        b_s[kk * B_STRIDE + 2 * w2 + 1] = _hi(gword)
                        b_s[kk * B_STRIDE + HALF + 2 * w2] = _lo(uword)
                        b_s[kk * B_STRIDE + HALF + 2 * w2 + 1] = _hi(uword)
                    else:
                        b_s[kk * B_STRIDE + 2 * w2] = T.float32(0.0)
                        b_s[kk * B_STRIDE + 2 * w2 + 1] = T.float32(0.0)
                        b_s[kk * B_STRIDE + HALF + 2 * w2] = T.float32(0.0)
                        b_s[kk * B_STRIDE + HALF + 2 * w2 + 1] = T.float32(0.0)
                T.cuda.cta_sync()
                for k in T.unroll(BK):
                    for jj in T.unroll(8):
                        for ii in T.unroll(4):
                            acc[ii * 8 + jj] = acc[ii * 8 + jj] + (
                                a_s[k * A_STRIDE + ty + 16 * ii] * b_s[k * B_STRIDE + tx + 16 * jj])
                T.cuda.cta_sync()
            for ii in T.unroll(4):
                if row_begin + ty + 16 * ii < row_end:
                    for jj in T.unroll(4):
                        if n0 + tx + 16 * jj < inter:
                            act: T.f32 = _bf16(silu_precise(_bf16(acc[ii * 8 + jj])))
                            h_out[row_begin + ty + 16 * ii, n0 + tx + 16 * jj] = T.bfloat16(
                                act * _bf16(acc[ii * 8 + jj + 4]))

    return mkb_moe_cap_swiglu


def _down_kernel(hidden, inter):
    """y[p, n] = bf16(sum_k h[p, k] * W_d[e, k, n]) over the rows p of each tile's expert e."""
    kwords = inter // 2
    nwords = hidden // 2
    bw = BN // 2  # words per K row of the B tile

    @T.prim_func
    def mkb_moe_cap_down(a_h: T.handle, b_h: T.handle, tiles_h: T.handle, out_h: T.handle):
        rows = T.int32()
        n_experts = T.int32()
        max_tiles = T.int32()
        a_words = T.match_buffer(a_h, (rows, kwords), "int32")
        b_words = T.match_buffer(b_h, (n_experts, inter, nwords), "int32")
        tiles = T.match_buffer(tiles_h, (max_tiles, 3), "int32")
        out = T.match_buffer(out_h, (rows, hidden), "bfloat16")
        T.device_entry()
        nb, tb = T.cta_id([(hidden + BN - 1) // BN, max_tiles])
        tid = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK * A_STRIDE,), "float32", scope="shared")
        b_s = T.alloc_buffer((BK * B_STRIDE,), "float32", scope="shared")
        acc = T.alloc_buffer((32,), "float32", scope="local")
        expert: T.let = tiles[tb, 0]
        row_begin: T.let = tiles[tb, 1]
        row_end: T.let = tiles[tb, 2]
        n0: T.let = nb * BN
        ty: T.let = tid // 16
        tx: T.let = tid % 16
        if row_end > row_begin:  # uniform over the CTA
            for i in T.unroll(32):
                acc[i] = T.float32(0.0)
            for kt in range((inter + BK - 1) // BK):
                for q in T.unroll(BM * BK // 2 // THREADS):
                    r: T.let = (tid + q * THREADS) // (BK // 2)
                    w: T.let = (tid + q * THREADS) % (BK // 2)
                    if row_begin + r < row_end and kt * (BK // 2) + w < kwords:
                        word: T.let = a_words[row_begin + r, kt * (BK // 2) + w]
                        a_s[2 * w * A_STRIDE + r] = _lo(word)
                        a_s[(2 * w + 1) * A_STRIDE + r] = _hi(word)
                    else:
                        a_s[2 * w * A_STRIDE + r] = T.float32(0.0)
                        a_s[(2 * w + 1) * A_STRIDE + r] = T.float32(0.0)
                for q in T.unroll(BN * BK // 2 // THREADS):
                    kk: T.let = (tid + q * THREADS) // bw
                    w2: T.let = (tid + q * THREADS) % bw
                    if kt * BK + kk < inter and nb * bw + w2 < nwords:
                        bword: T.let = b_words[expert, kt * BK + kk, nb * bw + w2]
                        b_s[kk * B_STRIDE + 2 * w2] = _lo(bword)
                        b_s[kk * B_STRIDE + 2 * w2 + 1] = _hi(bword)
                    else:
                        b_s[kk * B_STRIDE + 2 * w2] = T.float32(0.0)
                        b_s[kk * B_STRIDE + 2 * w2 + 1] = T.float32(0.0)
                T.cuda.cta_sync()
                for k in T.unroll(BK):
                    for jj in T.unroll(8):
                        for ii in T.unroll(4):
                            acc[ii * 8 + jj] = acc[ii * 8 + jj] + (
                                a_s[k * A_STRIDE + ty + 16 * ii] * b_s[k * B_STRIDE + tx + 16 * jj])
                T.cuda.cta_sync()
            for ii in T.unroll(4):
                if row_begin + ty + 16 * ii < row_end:
                    for jj in T.unroll(8):
                        if n0 + tx + 16 * jj < hidden:
                            out[row_begin + ty + 16 * ii, n0 + tx + 16 * jj] = T.bfloat16(acc[ii * 8 + jj])

    return mkb_moe_cap_down


def _tc_kernel(k, n, glu, name):
    """Tensor-core tile GEMM over one expert's rows: A [rows, k] gathered through rowidx, B [e, k, n] N-major.

    glu: out[p, j] = bf16(bf16(silu(bf16(A_p . B0_e[:, j]))) * bf16(A_p . B1_e[:, j]));
    otherwise out[p, j] = bf16(A_p . B0_e[:, j]). n a multiple of 128, k of 32.
    """
    k_tiles = k // TBK
    nmat = 2 if glu else 1

    @T.prim_func
    def tc_gemm(a_h: T.handle, idx_h: T.handle, b0_h: T.handle, b1_h: T.handle, tiles_h: T.handle,
                out_h: T.handle):
        rows_a = T.int32()
        rows = T.int32()
        n_experts = T.int32()
        max_tiles = T.int32()
        A = T.match_buffer(a_h, (rows_a, k), "bfloat16")
        rowidx = T.match_buffer(idx_h, (rows,), "int32")
        B0 = T.match_buffer(b0_h, (n_experts, k, n // 2), "int32")  # bf16 pairs along N (int32 offsets fit)
        B1 = T.match_buffer(b1_h, (n_experts, k, n // 2), "int32")
        tiles = T.match_buffer(tiles_h, (max_tiles, 3), "int32")
        out = T.match_buffer(out_h, (rows, n), "bfloat16")
        T.device_entry()
        tb, nb = T.cta_id([max_tiles, n // TBN])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((TBM, PAD), "uint32", scope="shared")
        b_s = T.alloc_buffer((nmat * TBN, PAD), "uint32", scope="shared")
        acc = T.alloc_buffer((nmat * 32,), "float32", scope="local")
        af = T.alloc_buffer((8,), "uint32", scope="local")
        bfr = T.alloc_buffer((2,), "uint32", scope="local")
        ra = T.alloc_buffer((8,), "bfloat16", scope="local")
        ra_w = T.decl_buffer((4,), "uint32", data=ra.data, scope="local")
        rb = T.alloc_buffer((nmat * 8,), "int32", scope="local")  # [matrix][K row parity][4 words]
        res = T.alloc_buffer((2,), "bfloat16", scope="local")
        expert: T.let = tiles[tb, 0]
        row_begin: T.let = tiles[tb, 1]
        row_end: T.let = tiles[tb, 2]
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wr: T.let = (warp // 4) * 32  # the warp's 32 rows
        wc: T.let = (warp % 4) * 32  # the warp's 32 columns (of each matrix)
        kp: T.let = tx % 16  # B staging: K rows 2 kp, 2 kp + 1 of the slice
        cc: T.let = tx // 16  # B staging: columns 8 cc .. 8 cc + 7
        n0: T.let = nb * TBN
        if row_end > row_begin:  # uniform over the CTA
            arow: T.let = rowidx[T.min(row_begin + tx // 4, row_end - 1)]  # past the end: the last row, not stored
            for i in T.unroll(nmat * 32):
                acc[i] = T.float32(0.0)
            for e in T.vectorized(8):
                ra[e] = A[arow, (tx % 4) * 8 + e]
            for par in T.unroll(2):
                for e in T.vectorized(4):
                    rb[par * 4 + e] = B0[expert, kp * 2 + par, n0 // 2 + cc * 4 + e]
                if glu:
                    for e in T.vectorized(4):
                        rb[8 + par * 4 + e] = B1[expert, kp * 2 + par, n0 // 2 + cc * 4 + e]
            for kt in range(k_tiles):
                for e in T.vectorized(4):
                    a_s[tx // 4, (tx % 4) * 4 + e] = ra_w[e]
                for mat in T.unroll(nmat):  # b_s[column, K pair] = (B[2 kp, column], B[2 kp + 1, column])
                    for e in T.unroll(4):
                        b_s[mat * TBN + cc * 8 + 2 * e, kp] = T.Cast("uint32", T.bitwise_or(
                            T.bitwise_and(rb[mat * 8 + e], T.int32(0xFFFF)), T.shift_left(rb[mat * 8 + 4 + e], 16)))
                        b_s[mat * TBN + cc * 8 + 2 * e + 1, kp] = T.Cast("uint32", T.bitwise_or(
                            T.bitwise_and(T.shift_right(rb[mat * 8 + e], 16), T.int32(0xFFFF)),
                            T.bitwise_and(rb[mat * 8 + 4 + e], T.int32(-65536))))
                T.cuda.cta_sync()
                if kt + 1 < k_tiles:  # the next slice's loads fly while this one is computed
                    for e in T.vectorized(8):
                        ra[e] = A[arow, (kt + 1) * TBK + (tx % 4) * 8 + e]
                    for par in T.unroll(2):
                        for e in T.vectorized(4):
                            rb[par * 4 + e] = B0[expert, (kt + 1) * TBK + kp * 2 + par, n0 // 2 + cc * 4 + e]
                        if glu:
                            for e in T.vectorized(4):
                                rb[8 + par * 4 + e] = B1[expert, (kt + 1) * TBK + kp * 2 + par, n0 // 2 + cc * 4 + e]
                for ks in T.unroll(2):
                    for mt in T.unroll(2):
                        af[mt * 4 + 0] = a_s[wr + mt * 16 + g, ks * 8 + t]
                        af[mt * 4 + 1] = a_s[wr + mt * 16 + g + 8, ks * 8 + t]
                        af[mt * 4 + 2] = a_s[wr + mt * 16 + g, ks * 8 + t + 4]
                        af[mt * 4 + 3] = a_s[wr + mt * 16 + g + 8, ks * 8 + t + 4]
                    for mat in T.unroll(nmat):
                        for nt in T.unroll(4):
                            bfr[0] = b_s[mat * TBN + wc + nt * 8 + g, ks * 8 + t]
                            bfr[1] = b_s[mat * TBN + wc + nt * 8 + g, ks * 8 + t + 4]
                            for mt in T.unroll(2):
                                T.ptx[MMA](
                                    acc[mat * 32 + (mt * 4 + nt) * 4 + 0], acc[mat * 32 + (mt * 4 + nt) * 4 + 1],
                                    acc[mat * 32 + (mt * 4 + nt) * 4 + 2], acc[mat * 32 + (mt * 4 + nt) * 4 + 3],
                                    af[mt * 4 + 0], af[mt * 4 + 1], af[mt * 4 + 2], af[mt * 4 + 3], bfr[0], bfr[1],
                                    acc[mat * 32 + (mt * 4 + nt) * 4 + 0], acc[mat * 32 + (mt * 4 + nt) * 4 + 1],
                                    acc[mat * 32 + (mt * 4 + nt) * 4 + 2], acc[mat * 32 + (mt * 4 + nt) * 4 + 3])
                T.cuda.cta_sync()
            # epilogue: accumulator (mt, nt) holds rows g | g + 8, columns 2t, 2t + 1 of its 16 x 8 tile
            for mt in T.unroll(2):
                for hr in T.unroll(2):
                    if row_begin + wr + mt * 16 + hr * 8 + g < row_end:
                        for nt in T.unroll(4):
                            for j in T.unroll(2):
                                if glu:
                                    res[j] = T.bfloat16(
                                        _bf16(silu_precise(_bf16(acc[(mt * 4 + nt) * 4 + hr * 2 + j])))
                                        * _bf16(acc[32 + (mt * 4 + nt) * 4 + hr * 2 + j]))
                                else:
                                    res[j] = T.bfloat16(acc[(mt * 4 + nt) * 4 + hr * 2 + j])
                            for j in T.vectorized(2):
                                out[row_begin + wr + mt * 16 + hr * 8 + g, n0 + wc + nt * 8 + t * 2 + j] = res[j]

    return tc_gemm.with_attr("global_symbol", name)


def _combine_kernel(hidden, top_k):
    @T.prim_func
    def mkb_moe_cap_combine(y_h: T.handle, sw_h: T.handle, slots_h: T.handle, out_h: T.handle):
        tokens = T.int32()
        pairs = T.int32()
        y = T.match_buffer(y_h, (pairs, hidden), "bfloat16")
        sorted_w = T.match_buffer(sw_h, (pairs,), "float32")
        slots = T.match_buffer(slots_h, (tokens, top_k), "int32")
        out = T.match_buffer(out_h, (tokens, hidden), "bfloat16")
        T.device_entry()
        t = T.cta_id([tokens])
        tid = T.thread_id([THREADS])
        rows = T.alloc_buffer((top_k,), "int32", scope="local")
        wts = T.alloc_buffer((top_k,), "float32", scope="local")
        for k in T.unroll(top_k):
            rows[k] = slots[t, k]  # -1: dropped
            wts[k] = T.float32(0.0)
            if rows[k] >= 0:
                wts[k] = sorted_w[rows[k]]
        for it in range((hidden + THREADS - 1) // THREADS):
            c: T.let = it * THREADS + tid
            if c < hidden:
                total: T.f32 = T.float32(0.0)
                for k in T.unroll(top_k):
                    if rows[k] >= 0:
                        total = _bf16(total + _bf16(T.float32(y[rows[k], c]) * wts[k]))
                out[t, c] = T.bfloat16(total)

    return mkb_moe_cap_combine


def _use_tensor_cores(hidden, inter):
    """The tensor-core kernels need whole 128-column tiles (and so whole 32-wide K steps)."""
    return _TENSOR_CORES and hidden % TBN == 0 and inter % TBN == 0


def _exported(funcs):
    """An IRModule whose functions are exported under their keys (a prim_func otherwise exports its
    own global_symbol, and the runtime module would have no function by the key's name); the device
    kernels are then named ``<key>_kernel``."""
    return tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})


def _build(hidden, inter, top_k, arch):
    """Compile every kernel once per shape and arch; return the tvm Executable."""
    key = (hidden, inter, top_k, arch)
    if key not in _EXES:
        funcs = {"swiglu": _swiglu_kernel(hidden, inter), "down": _down_kernel(hidden, inter),
                 "combine": _combine_kernel(hidden, top_k)}
        if _use_tensor_cores(hidden, inter):
            funcs["tc_glu"] = _tc_kernel(hidden, inter, True, "mkb_moe_cap_tc_glu")
            funcs["tc_down"] = _tc_kernel(inter, hidden, False, "mkb_moe_cap_tc_down")
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


def _kernel_fns(hidden, inter, top_k):
    key = (hidden, inter, top_k, _device_arch())
    if key not in _FNS:
        mod = _build(*key).mod
        names = ("tc_glu", "tc_down") if _use_tensor_cores(hidden, inter) else ("swiglu", "down")
        _FNS[key] = tuple(mod[name] for name in names + ("combine",))
    return _FNS[key]


def _capacity(tokens, top_k, experts):
    return int(tokens * top_k / experts * CAPACITY_FACTOR)


def _max_tiles(capacity, experts):
    return experts * ((capacity + BM - 1) // BM)


def _plan(selected, weights, experts, capacity):
    """Sorted assignments, the kept rows' tile table and each token's kept rows in expert order.

    Returns the token of each sorted position, the routing weight (fp32) of each sorted position,
    the [E * ceil(C / BM), 3] tile table (expert, first row, end row) and [T, k] sorted positions
    of each token's assignments in ascending expert order, -1 where the assignment was dropped.
    """
    tokens, top_k = selected.shape
    pairs = tokens * top_k
    device = selected.device
    flat = selected.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    kept_n = torch.clamp(counts, max=capacity)
    per_e = (capacity + BM - 1) // BM
    e = torch.arange(experts, device=device).repeat_interleave(per_e)
    j = torch.arange(per_e, device=device).repeat(experts)
    begin = starts[e] + j * BM
    end = torch.minimum(begin + BM, starts[e] + kept_n[e])
    tiles = torch.stack([e, begin, torch.maximum(end, begin)], 1).to(torch.int32).contiguous()
    sorted_e = flat[order]
    position = torch.arange(pairs, device=device) - starts[sorted_e]
    rows = torch.where(position < capacity, torch.arange(pairs, device=device), -1)
    slot_of_pair = torch.empty_like(rows)
    slot_of_pair[order] = rows
    by_expert = selected.argsort(dim=-1)
    slots = slot_of_pair.view(tokens, top_k).gather(1, by_expert)
    sorted_tok = (order // top_k).to(torch.int32).contiguous()
    sorted_w = weights.flatten()[order].float().contiguous()
    return sorted_tok, sorted_w, tiles, slots.to(torch.int32).contiguous()


def _words(t):
    """A bf16 tensor's values as int32 words (two consecutive values each, low half first)."""
    return t.contiguous().view(torch.int32)


def solve(hidden_states, selected_experts, routing_weights, expert_gate_weights, expert_up_weights,
          expert_down_weights):
    tokens, hidden = hidden_states.shape
    top_k = selected_experts.shape[1]
    experts, _, inter = expert_gate_weights.shape
    pairs = tokens * top_k
    capacity = _capacity(tokens, top_k, experts)
    device = hidden_states.device
    bf16 = torch.bfloat16
    out = torch.zeros(tokens, hidden, dtype=bf16, device=device)
    if capacity == 0:
        return out
    swiglu, down, combine = _kernel_fns(hidden, inter, top_k)
    sorted_tok, sorted_w, tiles, slots = _plan(selected_experts, routing_weights, experts, capacity)
    h = torch.empty(pairs, inter, dtype=bf16, device=device)
    y = torch.empty(pairs, hidden, dtype=bf16, device=device)
    if _use_tensor_cores(hidden, inter):
        wd = _words(expert_down_weights)
        swiglu(hidden_states.contiguous(), sorted_tok, _words(expert_gate_weights), _words(expert_up_weights), tiles, h)
        down(h, torch.arange(pairs, dtype=torch.int32, device=device), wd, wd, tiles, y)
    else:
        swiglu(_words(hidden_states), sorted_tok, _words(expert_gate_weights), _words(expert_up_weights), tiles, h)
        down(_words(h), _words(expert_down_weights), tiles, y)
    combine(y, sorted_w, slots, out)
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


def kernel_sources(arch="sm_90a"):
    """{kernel symbol: generated CUDA source} at the graded workload."""
    w = WORKLOAD
    source = _build(w["hidden"], w["inter"], w["top_k"], arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
