"""TIRx oracle for problem 56: FP8 block-quantised MLA kv_a / kv_b projections with a mid-chain RMSNorm.

Six TIRx kernel launches (four kernel templates, the weight quantiser and the GEMM built once per
projection).

1. ``mkb_fp8_act_quant``: the activation's 1 x 128 blocks, one warp per block (4 values per lane),
   absmax by xor-shuffle max. In fp32, as the reference: scale = max(absmax / 448, 1e-12) and
   q = clamp(x / scale, -448, 448). NVRTC builds TIRx kernels with --use_fast_math, so both
   divisions are the IEEE instruction by name (``div.rn.f32``). ``cvt.rn.satfinite.e4m3x2.f32``
   rounds two values at a time to e4m3 (nearest even; the first operand lands in the high byte),
   and the bytes are decoded exactly from their bit fields back to fp32 and stored as bf16 (every
   e4m3 value is a bf16 value), with the fp32 scale per block. Padding rows (up to whole 128-row
   GEMM tiles) get zeros.
2. ``mkb_kv_a_weight_quant`` / ``mkb_kv_b_weight_quant``: the same for the weight's 128 x 128
   blocks, one 256-thread CTA per block (64 contiguous values per thread; shuffle max, then across
   the 8 warps in shared memory).
3. ``mkb_kv_a_gemm`` / ``mkb_kv_b_gemm``: C = bf16(dequant(A) @ dequant(B)^T) on the tensor cores:
   warp-level ``mma.sync`` m16n8k16 (bf16 operands, the exact e4m3 values, fp32 accumulation) issued
   through TIRx's PTX intrinsic with hand-written fragment maps (TIRx 0.27 has no WGMMA path for
   sm_90). A 256-thread CTA (4 x 2 warps, each 32 x 64) computes a 128 x 128 tile; K advances in
   slices of 32 through two shared-memory stages (rows padded to 20 words so the 32-bit fragment
   reads are conflict-free); the next slice's 16-byte global loads are issued before the current
   slice is multiplied and stored to the other stage after it, one barrier per slice. The operands
   reach the kernel as 32-bit words of bf16 pairs. Every product of two e4m3 values is exact in
   fp32, so the raw sums of one 128-wide K block are accumulated in separate fp32 registers, then
   multiplied by the row's activation scale times the tile's weight scale and added to the fp32
   accumulator: the reference's dequantised fp32 GEMM up to summation order. kv_b's sums are rounded
   to bf16 once (the output); kv_a's stay fp32 for the RMSNorm.
4. ``mkb_rms_requant``: one CTA per token row of the first GEMM's fp32 output, a thread per 4 of the
   kv_lora values (so a warp per 128-wide quantisation block). The fp32 sum of squares is reduced
   by shuffles and across warps in shared memory; r = 1 / sqrt(mean + eps) with ``div.rn.f32``
   and ``sqrt.rn.f32``; (x * r) * weight in fp32, re-quantised per block as in kernel 1. The
   reference rounds x, x * r and the product to bf16 before its quantiser; the float64 anchor does
   not (the problem's grading note), and those roundings move e4m3 codes and block scales away from
   the anchor's: with them the kernel's kv_expanded rows missed the 3x allowance by up to 1.03x on
   the H200, while an emulation of the fp32 path on 4096 tokens stayed at 0.25x of the allowance
   (0.39x with the roundings). The same kernel writes k_pe (columns kv_lora .. kv_lora + 63)
   rounded to bf16.
The first GEMM runs over kv_a's 640 rows (576 live plus 64 padding rows, which only affect k_pe's
block scale, as in the reference); the second writes kv_expanded directly.
"""

import torch
import tvm
from tvm.script import tirx as T

FP8_MAX = 448.0
MIN_SCALE = 1e-12
QBLOCK = 128
ROPE_DIM = 64
HEAD_PAIR = 256
BM = 128
BN = 128
BKW = 16  # K slice of the tensor-core GEMM: 32 bf16 = 16 32-bit words
PADW = 20  # its shared-memory row stride in words (16 + 4 keeps the fragment reads conflict-free)
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
THREADS = 256
ACT_WARPS = 4
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=256, hidden=7168, kv_lora=512, heads=128)
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


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


def _shfl_xor(value, mask):
    return T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), value, mask, 32)


def _named(func, name):
    return func.with_attr("global_symbol", name)


def _act_quant_kernel(rows, padded, k):
    """Q[r, :] / S[r, kb]: e4m3 values (as bf16) and scales of X's 1 x 128 blocks; zeros for r >= rows."""
    nkb = k // QBLOCK
    grid_y = (nkb + ACT_WARPS - 1) // ACT_WARPS

    @T.prim_func
    def mkb_fp8_act_quant(x_h: T.handle, q_h: T.handle, s_h: T.handle):
        X = T.match_buffer(x_h, (rows, k), "bfloat16")
        Q = T.match_buffer(q_h, (padded, k), "bfloat16")
        S = T.match_buffer(s_h, (padded, nkb), "float32")
        T.device_entry()
        row, by = T.cta_id([padded, grid_y])
        tx = T.thread_id([32 * ACT_WARPS])
        raw = T.alloc_buffer((4,), "bfloat16", scope="local")
        vals = T.alloc_buffer((4,), "float32", scope="local")
        outv = T.alloc_buffer((4,), "bfloat16", scope="local")
        pair = T.alloc_buffer((1,), "uint16", scope="local")
        tmp = T.alloc_buffer((2,), "float32", scope="local")
        kb: T.let = by * ACT_WARPS + tx // 32
        lane: T.let = tx % 32
        if kb < nkb:
            for j in T.unroll(4):
                raw[j] = T.bfloat16(0.0)
            if row < rows:
                for j in T.vectorized(4):
                    raw[j] = X[row, kb * QBLOCK + lane * 4 + j]
            amax: T.f32 = T.float32(0.0)
            for j in T.unroll(4):
                vals[j] = T.float32(raw[j])
                amax = T.max(amax, T.abs(vals[j]))
            for i in T.unroll(5):
                amax = T.max(amax, _shfl_xor(amax, T.shift_right(16, i)))
            T.ptx["div.rn.f32"](tmp[0], amax, T.float32(FP8_MAX))
            tmp[0] = T.max(tmp[0], T.float32(MIN_SCALE))
            for j in T.unroll(4):
                T.ptx["div.rn.f32"](tmp[1], vals[j], tmp[0])
                vals[j] = T.min(T.max(tmp[1], T.float32(-FP8_MAX)), T.float32(FP8_MAX))
            for j in T.unroll(2):
                T.ptx["cvt.rn.satfinite.e4m3x2.f32"](pair[0], vals[2 * j], vals[2 * j + 1])
                outv[2 * j] = T.bfloat16(e4m3_to_f32(T.Cast("int32", T.shift_right(pair[0], T.uint16(8)))))
                outv[2 * j + 1] = T.bfloat16(e4m3_to_f32(T.Cast("int32", T.bitwise_and(pair[0], T.uint16(255)))))
            for j in T.vectorized(4):
                Q[row, kb * QBLOCK + lane * 4 + j] = outv[j]
            if lane == 0:
                S[row, kb] = tmp[0]

    return mkb_fp8_act_quant


def _weight_quant_kernel(n, k, name):
    """Q / S: e4m3 values (as bf16) and scales of W's 128 x 128 blocks; one CTA per block."""
    nkb = k // QBLOCK

    @T.prim_func
    def mkb_fp8_weight_quant(w_h: T.handle, q_h: T.handle, s_h: T.handle):
        W = T.match_buffer(w_h, (n, k), "bfloat16")
        Q = T.match_buffer(q_h, (n, k), "bfloat16")
        S = T.match_buffer(s_h, (n // QBLOCK, nkb), "float32")
        T.device_entry()
        cta = T.cta_id([(n // QBLOCK) * nkb])
        tx = T.thread_id([THREADS])
        red = T.alloc_buffer((8,), "float32", scope="shared")
        raw = T.alloc_buffer((64,), "bfloat16", scope="local")
        vals = T.alloc_buffer((64,), "float32", scope="local")
        pair = T.alloc_buffer((1,), "uint16", scope="local")
        tmp = T.alloc_buffer((2,), "float32", scope="local")
        bn: T.let = cta // nkb
        bk: T.let = cta % nkb
        row: T.let = bn * QBLOCK + tx // 2
        col: T.let = bk * QBLOCK + (tx % 2) * 64
        for c in T.unroll(8):
            for j in T.vectorized(8):
                raw[c * 8 + j] = W[row, col + c * 8 + j]
        amax: T.f32 = T.float32(0.0)
        for j in T.unroll(64):
            vals[j] = T.float32(raw[j])
            amax = T.max(amax, T.abs(vals[j]))
        for i in T.unroll(5):
            amax = T.max(amax, _shfl_xor(amax, T.shift_right(16, i)))
        if tx % 32 == 0:
            red[tx // 32] = amax
        T.cuda.cta_sync()
        for i in T.unroll(8):
            amax = T.max(amax, red[i])
        T.ptx["div.rn.f32"](tmp[0], amax, T.float32(FP8_MAX))
        tmp[0] = T.max(tmp[0], T.float32(MIN_SCALE))
        for j in T.unroll(64):
            T.ptx["div.rn.f32"](tmp[1], vals[j], tmp[0])
            vals[j] = T.min(T.max(tmp[1], T.float32(-FP8_MAX)), T.float32(FP8_MAX))
        for j in T.unroll(32):
            T.ptx["cvt.rn.satfinite.e4m3x2.f32"](pair[0], vals[2 * j], vals[2 * j + 1])
            raw[2 * j] = T.bfloat16(e4m3_to_f32(T.Cast("int32", T.shift_right(pair[0], T.uint16(8)))))
            raw[2 * j + 1] = T.bfloat16(e4m3_to_f32(T.Cast("int32", T.bitwise_and(pair[0], T.uint16(255)))))
        for c in T.unroll(8):
            for j in T.vectorized(8):
                Q[row, col + c * 8 + j] = raw[c * 8 + j]
        if tx == 0:
            S[bn, bk] = tmp[0]

    return _named(mkb_fp8_weight_quant, name)


def _gemm_kernel(m, n, k, name, out_dtype):
    """C[m, n] = sum_kb (sum_{k in kb} A[m, k] B[n, k]) * SA[m, kb] * SB[n // 128, kb] on the tensor cores,
    rounded once to ``out_dtype`` (bfloat16, or float32: unrounded); A and B arrive as 32-bit words of
    bf16 pairs (k even, k + 1); m and n are multiples of 128."""
    kw = k // 2
    k_tiles = kw // BKW
    tiles_n = n // BN
    nkb = k // QBLOCK
    per_block = QBLOCK // (2 * BKW)

    @T.prim_func
    def mkb_fp8_block_gemm(a_h: T.handle, b_h: T.handle, sa_h: T.handle, sb_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (m, kw), "int32")
        B = T.match_buffer(b_h, (n, kw), "int32")
        SA = T.match_buffer(sa_h, (m, nkb), "float32")
        SB = T.match_buffer(sb_h, (n // QBLOCK, nkb), "float32")
        C = T.match_buffer(c_h, (m, n), out_dtype)
        T.device_entry()
        cta = T.cta_id([(m // BM) * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((2, BM, PADW), "int32", scope="shared")
        b_s = T.alloc_buffer((2, BN, PADW), "int32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        part = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "uint32", scope="local")
        bfr = T.alloc_buffer((16,), "uint32", scope="local")
        ra = T.alloc_buffer((8,), "int32", scope="local")
        rb = T.alloc_buffer((8,), "int32", scope="local")
        sc = T.alloc_buffer((4,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        bn: T.let = cta % tiles_n
        col0: T.let = bn * BN
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
            part[i] = T.float32(0.0)
        for j in T.vectorized(4):
            ra[j] = A[row0 + lrow, lw + j]
        for j in T.vectorized(4):
            ra[4 + j] = A[row0 + lrow, lw + 4 + j]
        for j in T.vectorized(4):
            rb[j] = B[col0 + lrow, lw + j]
        for j in T.vectorized(4):
            rb[4 + j] = B[col0 + lrow, lw + 4 + j]
        for j in T.vectorized(4):
            a_s[0, lrow, lw + j] = ra[j]
        for j in T.vectorized(4):
            a_s[0, lrow, lw + 4 + j] = ra[4 + j]
        for j in T.vectorized(4):
            b_s[0, lrow, lw + j] = rb[j]
        for j in T.vectorized(4):
            b_s[0, lrow, lw + 4 + j] = rb[4 + j]
        T.cuda.cta_sync()
        for kt in range(k_tiles):
            st: T.let = kt % 2
            if kt + 1 < k_tiles:  # the next slice's loads fly while this one is multiplied
                for j in T.vectorized(4):
                    ra[j] = A[row0 + lrow, (kt + 1) * BKW + lw + j]
                for j in T.vectorized(4):
                    ra[4 + j] = A[row0 + lrow, (kt + 1) * BKW + lw + 4 + j]
                for j in T.vectorized(4):
                    rb[j] = B[col0 + lrow, (kt + 1) * BKW + lw + j]
                for j in T.vectorized(4):
                    rb[4 + j] = B[col0 + lrow, (kt + 1) * BKW + lw + 4 + j]
            for ks in T.unroll(2):
                # fragments: a(mi) = rows g / g + 8 x words t / t + 4 of the warp's 16-row tile mi; b(ni) = row g
                for mi in T.unroll(2):
                    for h in T.unroll(2):
                        for q in T.unroll(2):
                            af[mi * 4 + q * 2 + h] = T.reinterpret(
                                "uint32", a_s[st, wm + mi * 16 + h * 8 + g, ks * 8 + q * 4 + t])
                for ni in T.unroll(8):
                    for q in T.unroll(2):
                        bfr[ni * 2 + q] = T.reinterpret("uint32", b_s[st, wn + ni * 8 + g, ks * 8 + q * 4 + t])
                for mi in T.unroll(2):
                    for ni in T.unroll(8):
                        T.ptx[MMA](part[mi * 32 + ni * 4], part[mi * 32 + ni * 4 + 1], part[mi * 32 + ni * 4 + 2],
                                   part[mi * 32 + ni * 4 + 3], af[mi * 4], af[mi * 4 + 1], af[mi * 4 + 2],
                                   af[mi * 4 + 3], bfr[ni * 2], bfr[ni * 2 + 1], part[mi * 32 + ni * 4],
                                   part[mi * 32 + ni * 4 + 1], part[mi * 32 + ni * 4 + 2], part[mi * 32 + ni * 4 + 3])
            if kt % per_block == per_block - 1:  # end of a 128-wide K block: scale the raw sums and fold them in
                for mi in T.unroll(2):
                    for h in T.unroll(2):
                        sc[mi * 2 + h] = SA[row0 + wm + mi * 16 + h * 8 + g, kt // per_block] * SB[bn, kt // per_block]
                for mi in T.unroll(2):
                    for ni in T.unroll(8):
                        for r in T.unroll(4):
                            acc[mi * 32 + ni * 4 + r] = acc[mi * 32 + ni * 4 + r] + part[mi * 32 + ni * 4 + r] * sc[
                                mi * 2 + r // 2]
                            part[mi * 32 + ni * 4 + r] = T.float32(0.0)
            if kt + 1 < k_tiles:  # the other stage was last read before the previous barrier
                for j in T.vectorized(4):
                    a_s[1 - st, lrow, lw + j] = ra[j]
                for j in T.vectorized(4):
                    a_s[1 - st, lrow, lw + 4 + j] = ra[4 + j]
                for j in T.vectorized(4):
                    b_s[1 - st, lrow, lw + j] = rb[j]
                for j in T.vectorized(4):
                    b_s[1 - st, lrow, lw + 4 + j] = rb[4 + j]
            T.cuda.cta_sync()
        for mi in T.unroll(2):
            for ni in T.unroll(8):
                for r in T.unroll(4):  # accumulator r: row g + 8 (r // 2), column 2t + r % 2
                    col: T.let = col0 + wn + ni * 8 + t * 2 + r % 2
                    C[row0 + wm + mi * 16 + (r // 2) * 8 + g, col] = T.Cast(out_dtype, acc[mi * 32 + ni * 4 + r])

    return _named(mkb_fp8_block_gemm, name)


def _rms_requant_kernel(rows, padded, width, kv_lora):
    """RMSNorm of the fp32 COMP[r, :kv_lora] in fp32 (no bf16 rounding before the quantiser, as the
    float64 anchor), re-quantised per 1 x 128 block into Q / S; KPE[r] = bf16(COMP[r, kv_lora : kv_lora
    + 64]). Padding rows quantise to zeros."""
    threads = kv_lora // 4
    nwarps = kv_lora // QBLOCK
    nkb = kv_lora // QBLOCK
    copy_steps = (ROPE_DIM + threads - 1) // threads

    @T.prim_func
    def mkb_rms_requant(comp_h: T.handle, w_h: T.handle, eps: T.float32, q_h: T.handle, s_h: T.handle,
                        kpe_h: T.handle):
        COMP = T.match_buffer(comp_h, (padded, width), "float32")
        WN = T.match_buffer(w_h, (kv_lora,), "bfloat16")
        Q = T.match_buffer(q_h, (padded, kv_lora), "bfloat16")
        S = T.match_buffer(s_h, (padded, nkb), "float32")
        KPE = T.match_buffer(kpe_h, (rows, ROPE_DIM), "bfloat16")
        T.device_entry()
        row = T.cta_id([padded])
        tx = T.thread_id([threads])
        red = T.alloc_buffer((4,), "float32", scope="shared")
        vals = T.alloc_buffer((4,), "float32", scope="local")
        wr = T.alloc_buffer((4,), "bfloat16", scope="local")
        normed = T.alloc_buffer((4,), "bfloat16", scope="local")
        pair = T.alloc_buffer((1,), "uint16", scope="local")
        tmp = T.alloc_buffer((4,), "float32", scope="local")
        lane: T.let = tx % 32
        for j in T.vectorized(4):
            vals[j] = COMP[row, tx * 4 + j]
        for j in T.vectorized(4):
            wr[j] = WN[tx * 4 + j]
        sq: T.f32 = T.float32(0.0)
        for j in T.unroll(4):
            sq = sq + vals[j] * vals[j]
        for i in T.unroll(5):
            sq = sq + _shfl_xor(sq, T.shift_right(16, i))
        if lane == 0:
            red[tx // 32] = sq
        T.cuda.cta_sync()
        total: T.f32 = red[0]
        for i in T.unroll(1, nwarps):
            total = total + red[i]
        T.ptx["div.rn.f32"](tmp[0], total, T.float32(kv_lora))
        tmp[0] = tmp[0] + eps
        T.ptx["sqrt.rn.f32"](tmp[1], tmp[0])
        T.ptx["div.rn.f32"](tmp[2], T.float32(1.0), tmp[1])
        amax: T.f32 = T.float32(0.0)
        for j in T.unroll(4):
            vals[j] = vals[j] * tmp[2] * T.float32(wr[j])  # (x * r) * w in fp32
            amax = T.max(amax, T.abs(vals[j]))
        for i in T.unroll(5):
            amax = T.max(amax, _shfl_xor(amax, T.shift_right(16, i)))
        T.ptx["div.rn.f32"](tmp[0], amax, T.float32(FP8_MAX))
        tmp[0] = T.max(tmp[0], T.float32(MIN_SCALE))
        for j in T.unroll(4):
            T.ptx["div.rn.f32"](tmp[1], vals[j], tmp[0])
            vals[j] = T.min(T.max(tmp[1], T.float32(-FP8_MAX)), T.float32(FP8_MAX))
        for j in T.unroll(2):
            T.ptx["cvt.rn.satfinite.e4m3x2.f32"](pair[0], vals[2 * j], vals[2 * j + 1])
            normed[2 * j] = T.bfloat16(e4m3_to_f32(T.Cast("int32", T.shift_right(pair[0], T.uint16(8)))))
            normed[2 * j + 1] = T.bfloat16(e4m3_to_f32(T.Cast("int32", T.bitwise_and(pair[0], T.uint16(255)))))
        for j in T.vectorized(4):
            Q[row, tx * 4 + j] = normed[j]
        if lane == 0:
            S[row, tx // 32] = tmp[0]
        if row < rows:
            for it in T.serial(copy_steps):
                c: T.let = it * threads + tx
                if c < ROPE_DIM:
                    KPE[row, c] = T.bfloat16(COMP[row, kv_lora + c])

    return mkb_rms_requant


def _make(kind, shape):
    if kind == "act":
        return _act_quant_kernel(*shape)
    if kind in ("wa", "wb"):
        return _weight_quant_kernel(*shape, "mkb_kv_a_weight_quant" if kind == "wa" else "mkb_kv_b_weight_quant")
    if kind in ("ga", "gb"):
        # kv_a's sums stay fp32 for the RMSNorm (k_pe is rounded there); kv_b's are the bf16 output
        return _gemm_kernel(*shape, *(("mkb_kv_a_gemm", "float32") if kind == "ga" else ("mkb_kv_b_gemm", "bfloat16")))
    return _rms_requant_kernel(*shape)


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


def _quant_weight(kind, w):
    n, k = w.shape
    q = torch.empty(n, k, dtype=torch.bfloat16, device=w.device)
    s = torch.empty(n // QBLOCK, k // QBLOCK, dtype=torch.float32, device=w.device)
    _kernel_fn(kind, (n, k))(w.contiguous(), q, s)
    return q, s


def _gemm(kind, qa, sa, qw, sw):
    m, k = qa.shape
    n = qw.shape[0]
    c = torch.empty(m, n, dtype=torch.float32 if kind == "ga" else torch.bfloat16, device=qa.device)
    _kernel_fn(kind, (m, n, k))(qa.view(torch.int32), qw.view(torch.int32), sa, sw, c)
    return c


def solve(hidden_states, kv_a_proj_weight, kv_a_layernorm_weight, kv_b_proj_weight, rms_norm_eps):
    batch, seq, hidden = hidden_states.shape
    kv_lora = kv_a_layernorm_weight.shape[0]
    a_rows = kv_a_proj_weight.shape[0]
    b_rows = kv_b_proj_weight.shape[0]
    rows = batch * seq
    dev = hidden_states.device
    if rows == 0:
        return (torch.empty(batch, seq, b_rows // HEAD_PAIR, HEAD_PAIR, dtype=torch.bfloat16, device=dev),
                torch.empty(batch, seq, 1, ROPE_DIM, dtype=torch.bfloat16, device=dev))
    padded = (rows + BM - 1) // BM * BM

    qa = torch.empty(padded, hidden, dtype=torch.bfloat16, device=dev)
    sa = torch.empty(padded, hidden // QBLOCK, dtype=torch.float32, device=dev)
    _kernel_fn("act", (rows, padded, hidden))(hidden_states.reshape(rows, hidden).contiguous(), qa, sa)
    qwa, swa = _quant_weight("wa", kv_a_proj_weight)
    comp = _gemm("ga", qa, sa, qwa, swa)

    qn = torch.empty(padded, kv_lora, dtype=torch.bfloat16, device=dev)
    sn = torch.empty(padded, kv_lora // QBLOCK, dtype=torch.float32, device=dev)
    k_pe = torch.empty(rows, ROPE_DIM, dtype=torch.bfloat16, device=dev)
    _kernel_fn("rms", (rows, padded, a_rows, kv_lora))(comp, kv_a_layernorm_weight.contiguous(),
                                                       float(rms_norm_eps), qn, sn, k_pe)
    qwb, swb = _quant_weight("wb", kv_b_proj_weight)
    kv = _gemm("gb", qn, sn, qwb, swb)
    if padded != rows:
        kv = kv[:rows].contiguous()
    return kv.view(batch, seq, b_rows // HEAD_PAIR, HEAD_PAIR), k_pe.view(batch, seq, 1, ROPE_DIM)


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


def kernel_sources(arch="sm_90a", batch=WORKLOAD["batch"], seq=WORKLOAD["seq"], hidden=WORKLOAD["hidden"],
                   kv_lora=WORKLOAD["kv_lora"], heads=WORKLOAD["heads"]):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    rows = batch * seq
    padded = (rows + BM - 1) // BM * BM
    a_rows = kv_lora + 2 * ROPE_DIM
    b_rows = heads * HEAD_PAIR
    sources = {}
    for kind, shape in (("act", (rows, padded, hidden)), ("wa", (a_rows, hidden)), ("ga", (padded, a_rows, hidden)),
                        ("rms", (rows, padded, a_rows, kv_lora)), ("wb", (b_rows, kv_lora)),
                        ("gb", (padded, b_rows, kv_lora))):
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
