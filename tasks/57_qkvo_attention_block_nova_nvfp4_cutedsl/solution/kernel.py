"""CuTe DSL oracle for problem 57: NVFP4 attention block (q/k/v projections, RoPE, causal GQA, o_proj).

The NVFP4 steps follow the reference's fp32 semantics exactly; everything between the projections
and the context's quantiser is kept in fp32 (the float64 anchor has no bf16 roundings there, and
the reference's own bf16 roundings are what its error consists of), so the context's NVFP4 codes
track the anchor's at least as well as the reference's do. Kernels (14 launches):

1. ``nvfp4_amax_kernel``: partial maxima of |x| over the flat activation (hidden in bf16, later
   the fp32 context), 528 CTAs of 256 threads striding over 4-element vectors; warp butterfly max,
   then across the 8 warps in shared memory. A maximum is exact in any order.
2. ``nvfp4_global_scale_kernel``: one warp folds the partial maxima and writes g = amax *
   fl(1 / 2688), which is what eager PyTorch computes on the GPU for ``amax / (448 * 6)`` (a tensor
   divided by a Python number is a multiplication by the rounded reciprocal; likewise ``/ 6.0``).
3. ``nvfp4_act_quant_kernel``: one thread per 16-element block: s = e4m3(fl(amax_block * fl(1/6)) / g)
   (``div.rn.f32``, then the hardware's nearest-even ``cvt.rn.satfinite`` to e4m3), unit = s * g,
   r = x / unit (``div.rn.f32``; unit 1 for a zero scale), |r| rounded to the E2M1 grid by the
   midpoints with ties to the even code; writes code * s as bf16 (exact). Rows past the token
   count (padding to whole 128-row tiles) are zeros. The hidden states are quantised once for all
   three projections (the reference quantises the same tensor three times, identically).
4. ``nvfp4_weight_decode_kernel``: one thread per 16-element weight block decodes the packed E2M1
   codes (low nibble first) and the e4m3 scale from their bit fields and writes code * s as bf16.
5. ``nvfp4_gemm_kernel``: C = (A_q @ W_q^T) * (g_x * g_w) on the tensor cores (warp-level
   ``mma.sync`` m16n8k16, bf16 operands, fp32 accumulation; every product of two decoded values is
   exact in fp32); 128 x 128 tiles of 4 x 2 warps, K slices of 32 in a two-stage ``cp.async``
   ring read by ``ldmatrix``. q, k and v are stored in fp32, the o_proj output in bf16.
6. ``attn_core_kernel``: one CTA of 128 threads per (16-query tile, head, batch row), fp32 SIMT.
   The query tile and, 32 keys at a time, the KV head's keys (h // group) get the rotate-half RoPE
   in fp32 (x * cos + rotate_half(x) * sin) while they are staged in shared memory (rows padded to
   129 words: conflict-free). Scores q . k * fl(128^-0.5) of the causal keys go to a shared score
   tile (thread = query x 4 keys); each warp then normalises 4 rows (lane = keys l, l + 32, ...):
   max, exp2((s - max) * log2 e), warp sums, IEEE division. P @ V: thread = head dim, 16 query
   accumulators, V staged 32 keys at a time; the fp32 context is written as [tokens, heads * 128].
Then steps 1-3 on the context and step 5 with the o_proj weight give the bf16 output.
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

BLOCK = 16
HEAD_DIM = 128
INV_2688 = 0.00037202381645329297  # fl32(1 / 2688)
INV_6 = 0.1666666716337204  # fl32(1 / 6)
SCALE = 0.08838834764831845  # 128 ** -0.5 (rounded to fp32 in the kernel, as in the reference's product)
LOG2E = 1.4426950408889634
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=128, hidden=8192, heads=64, kv_heads=8)
_BM, _BN, _BK = 128, 128, 32
_GEMM_THREADS = 256  # 4 x 2 warps
_THREADS = 256
_AMAX_CTAS = 528
_QT = 16  # queries per attention CTA
_KC = 32  # keys staged per step
_ATT_THREADS = 128
_PAD = HEAD_DIM + 1  # shared row stride (words)
_COMPILED = {}


def _max(a, b):
    return cutlass.Float32(cutlass.select_(a > b, a, b))


def _fsel(cond, a, b):
    return cutlass.Float32(cutlass.select_(cond, a, b))


def _int(cond, a, b):
    return cutlass.Int32(cutlass.select_(cond, a, b))


def _e2m1(code):
    """Signed value of a 4-bit E2M1 code held in an Int32."""
    e = (code >> 1) & 3
    m = code & 1
    twice = _int(e == 0, m, (m + 2) << _int(e == 0, 0, e - 1))
    mag = cutlass.Float32(twice) * 0.5
    return _fsel(code >= 8, -mag, mag)


def _e4m3(byte):
    """Value of an e4m3fn byte held in an Int32 (finite codes only)."""
    e = (byte >> 3) & 15
    m = byte & 7
    mant = _int(e == 0, m, m + 8)
    shift = _int(e == 0, 1, e)
    mag = cutlass.Float32(mant << shift) * (2.0 ** -10)
    return _fsel(byte >= 128, -mag, mag)


@cute.kernel
def nvfp4_amax_kernel(x: cute.Tensor, partial: cute.Tensor):
    """partial[cta] = max |x| over the 4-element vectors this CTA strides over."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    xv = cute.zipped_divide(x, (4,))
    n4 = cute.size(x) // 4
    smem = cutlass.memory.SmemAllocator()
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_THREADS // 32,)), 16)
    vals = cute.make_rmem_tensor((4,), cutlass.Float32)
    amax = cutlass.Float32(0.0)
    for i in range(bidx * _THREADS + tidx, n4, _AMAX_CTAS * _THREADS):
        vals.store(xv[None, i].load().to(cutlass.Float32))
        for j in cutlass.range_constexpr(4):
            amax = _max(amax, _max(vals[j], -vals[j]))
    amax = cute.arch.warp_reduction(amax, _max)
    if tidx % 32 == 0:
        red[tidx // 32] = amax
    cute.arch.sync_threads()
    if tidx == 0:
        total = red[0]
        for j in cutlass.range_constexpr(1, _THREADS // 32):
            total = _max(total, red[j])
        partial[bidx] = total


@cute.kernel
def nvfp4_global_scale_kernel(partial: cute.Tensor, gbuf: cute.Tensor):
    """gbuf[0] = max(partial) * fl(1/2688): one warp."""
    tidx, _, _ = cute.arch.thread_idx()
    amax = cutlass.Float32(0.0)
    for i in range(tidx, _AMAX_CTAS, 32):
        amax = _max(amax, partial[i])
    amax = cute.arch.warp_reduction(amax, _max)
    if tidx == 0:
        gbuf[0] = amax * INV_2688


@cute.kernel
def nvfp4_act_quant_kernel(x: cute.Tensor, gbuf: cute.Tensor, q: cute.Tensor):
    """q[r, 16b : 16b + 16] = code * s (bf16) of x's block (r, b); zeros for rows r >= rows of x."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    rows = cute.size(x, mode=[0])
    padded = cute.size(q, mode=[0])
    blocks = cute.size(q, mode=[1]) // BLOCK
    i = bidx * _THREADS + tidx
    if i < padded * blocks:
        r = i // blocks
        blk = i - r * blocks
        vals = cute.make_rmem_tensor((BLOCK,), cutlass.Float32)
        vals.fill(0.0)
        if r < rows:
            vals.store(cute.zipped_divide(x[r, None], (BLOCK,))[None, blk].load().to(cutlass.Float32))
            g = gbuf[0]
            amax = cutlass.Float32(0.0)
            for j in cutlass.range_constexpr(BLOCK):
                amax = _max(amax, _max(vals[j], -vals[j]))
            sv = cute.make_rmem_tensor((2,), cutlass.Float32)
            sv[0] = (amax * INV_6) / g
            sv[1] = cutlass.Float32(0.0)
            s8 = cute.make_rmem_tensor((2,), cutlass.Float8E4M3FN)
            s8.store(sv.load().to(cutlass.Float8E4M3FN))
            sv.store(s8.load().to(cutlass.Float32))
            s = sv[0]
            unit = s * g
            den = _fsel(unit > 0.0, unit, 1.0)
            for j in cutlass.range_constexpr(BLOCK):
                rv = vals[j] / den
                a = _max(rv, -rv)
                v = cutlass.Float32(0.0)
                v = _fsel(a > 0.25, 0.5, v)
                v = _fsel(a >= 0.75, 1.0, v)
                v = _fsel(a > 1.25, 1.5, v)
                v = _fsel(a >= 1.75, 2.0, v)
                v = _fsel(a > 2.5, 3.0, v)
                v = _fsel(a >= 3.5, 4.0, v)
                v = _fsel(a > 5.0, 6.0, v)
                vals[j] = _fsel(rv < 0.0, -v, v) * s
        cute.zipped_divide(q[r, None], (BLOCK,))[None, blk].store(vals.load().to(cutlass.BFloat16))


@cute.kernel
def nvfp4_weight_decode_kernel(packed: cute.Tensor, scale: cute.Tensor, q: cute.Tensor):
    """q[r, 16b : 16b + 16] = code * s (bf16) of the weight's block (r, b); zeros for padding rows."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    rows = cute.size(scale, mode=[0])
    padded = cute.size(q, mode=[0])
    blocks = cute.size(scale, mode=[1])
    i = bidx * _THREADS + tidx
    if i < padded * blocks:
        r = i // blocks
        blk = i - r * blocks
        vals = cute.make_rmem_tensor((BLOCK,), cutlass.Float32)
        vals.fill(0.0)
        if r < rows:
            sc = _e4m3(cutlass.Int32(scale[r, blk]))
            codes = cute.make_rmem_tensor((BLOCK // 2,), cutlass.Uint8)
            codes.store(cute.zipped_divide(packed[r, None], (BLOCK // 2,))[None, blk].load())
            for j in cutlass.range_constexpr(BLOCK // 2):
                byte = cutlass.Int32(codes[j])
                vals[2 * j] = _e2m1(byte & 15) * sc
                vals[2 * j + 1] = _e2m1(byte >> 4) * sc
        cute.zipped_divide(q[r, None], (BLOCK,))[None, blk].store(vals.load().to(cutlass.BFloat16))


@cute.kernel
def nvfp4_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, gbuf: cute.Tensor, w_scale: cutlass.Float32,
                      mC: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mC[m, n] = (sum_k mA[m, k] mB[n, k]) * (gbuf[0] * w_scale), fp32 sums, stored in mC's dtype."""
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    gA = cute.local_tile(mA, (_BM, _BK), (bm, None))  # (BM, BK, k tiles)
    gB = cute.local_tile(mB, (_BN, _BK), (bn, None))  # (BN, BK, k tiles)
    gC = cute.local_tile(mC, (_BM, _BN), (bm, bn))  # (BM, BN)

    # two stages of K-contiguous rows of 32 bf16 (64 bytes). The pointer swizzle acts on byte addresses:
    # bits 7-8 (row / 2) are xor-ed into bits 4-5 (the 16-byte chunk of the row), so a cp.async vector
    # stays whole and the 8 rows an ldmatrix reads land in different banks
    swizzle = cute.make_swizzle(2, 4, 3)
    row_atom = cute.make_layout((8, _BK), stride=(_BK, 1))
    smem = cutlass.memory.SmemAllocator()
    sA = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BM, _BK, 2), (0, 1, 2)), 16,
                              swizzle=swizzle)
    sB = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BN, _BK, 2), (0, 1, 2)), 16,
                              swizzle=swizzle)

    # global -> shared: 64 rows x 4 threads, 8 bf16 (16 bytes) per thread and copy
    g2s = cute.make_tiled_copy_tv(
        cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                            cutlass.BFloat16, num_bits_per_copy=128),
        cute.make_layout((_GEMM_THREADS // (_BK // 8), _BK // 8), stride=(_BK // 8, 1)),
        cute.make_layout((1, 8)))
    thr_g2s = g2s.get_slice(tidx)
    tAgA = thr_g2s.partition_S(gA)
    tAsA = thr_g2s.partition_D(sA)
    tBgB = thr_g2s.partition_S(gB)
    tBsB = thr_g2s.partition_D(sB)

    tiled_mma = cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((4, 2, 1)), permutation_mnk=(64, 32, 16))
    thr_mma = tiled_mma.get_slice(tidx)
    tCsA = thr_mma.partition_A(sA)
    tCsB = thr_mma.partition_B(sB)
    tCgC = thr_mma.partition_C(gC)
    tCrA = tiled_mma.make_fragment_A(tCsA[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(tCsB[None, None, None, 0])
    acc = tiled_mma.make_fragment_C(tCgC)
    acc.fill(0.0)

    s2r_A = cute.make_tiled_copy_A(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    s2r_B = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    thr_s2r_A = s2r_A.get_slice(tidx)
    thr_s2r_B = s2r_B.get_slice(tidx)
    tXsA = thr_s2r_A.partition_S(sA)
    tXrA = thr_s2r_A.retile(tCrA)
    tXsB = thr_s2r_B.partition_S(sB)
    tXrB = thr_s2r_B.retile(tCrB)
    k_blocks = cute.size(tCrA, mode=[2])

    cute.copy(g2s, tAgA[None, None, None, 0], tAsA[None, None, None, 0])
    cute.copy(g2s, tBgB[None, None, None, 0], tBsB[None, None, None, 0])
    cute.arch.cp_async_commit_group()
    for kt in range(k_tiles):
        if kt + 1 < k_tiles:  # prefetch the next slice into the other stage
            nxt = (kt + 1) % 2
            cute.copy(g2s, tAgA[None, None, None, kt + 1], tAsA[None, None, None, nxt])
            cute.copy(g2s, tBgB[None, None, None, kt + 1], tBsB[None, None, None, nxt])
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(1)  # this slice's group has landed
        cute.arch.sync_threads()
        stage = kt % 2
        for kb in cutlass.range_constexpr(k_blocks):
            cute.copy(s2r_A, tXsA[None, None, kb, stage], tXrA[None, None, kb])
            cute.copy(s2r_B, tXsB[None, None, kb, stage], tXrB[None, None, kb])
            cute.gemm(tiled_mma, acc, tCrA[None, None, kb], tCrB[None, None, kb], acc)
        cute.arch.sync_threads()  # the stage is refilled by the next iteration's prefetch

    gs = gbuf[0] * w_scale
    for i in cutlass.range_constexpr(cute.size(acc)):
        acc[i] = acc[i] * gs
    r_c = cute.make_fragment_like(acc, mC.element_type)
    r_c.store(acc.load().to(mC.element_type))
    cute.autovec_copy(r_c, tCgC)


@cute.kernel
def attn_core_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, cos: cute.Tensor, sin: cute.Tensor,
                     ctx: cute.Tensor, seq: cutlass.Constexpr, group: cutlass.Constexpr):
    """ctx[b*seq + i, h*128 + d] = softmax_j<=i(q_i . k_j * scale) @ v (fp32), with RoPE on q and k."""
    tidx, _, _ = cute.arch.thread_idx()
    qt, h, b = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    spad = (seq + _KC - 1) // _KC * _KC
    smem = cutlass.memory.SmemAllocator()
    q_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_QT, HEAD_DIM), stride=(_PAD, 1)), 16)
    kv_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_KC, HEAD_DIM), stride=(_PAD, 1)), 16)
    s_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_QT, spad), stride=(spad, 1)), 16)
    kh = h // group
    row0 = b * seq
    q0 = qt * _QT
    half = HEAD_DIM // 2

    # the query tile with RoPE (rows past the sequence are zeros)
    for i in cutlass.range_constexpr(_QT * HEAD_DIM // _ATT_THREADS):
        r = i * (_ATT_THREADS // HEAD_DIM) + tidx // HEAD_DIM
        d = tidx % HEAD_DIM
        val = cutlass.Float32(0.0)
        if q0 + r < seq:
            t = row0 + q0 + r
            x = q[t, h * HEAD_DIM + d]
            xo = q[t, h * HEAD_DIM + (d + half) % HEAD_DIM]
            rot = cutlass.Float32(cutlass.select_(d < half, -xo, xo))
            val = x * cos[t, d].to(cutlass.Float32) + rot * sin[t, d].to(cutlass.Float32)
        q_s[r, d] = val
    n_keys = cutlass.min(q0 + _QT, seq)

    # scores of the causal keys, 32 keys at a time: thread = query qi x keys kg, kg + 8, kg + 16, kg + 24
    qi = tidx // 8
    kg = tidx % 8
    for kc in range(0, n_keys, _KC):
        cute.arch.sync_threads()
        for i in cutlass.range_constexpr(_KC * HEAD_DIM // _ATT_THREADS):
            j = i * (_ATT_THREADS // HEAD_DIM) + tidx // HEAD_DIM
            d = tidx % HEAD_DIM
            val = cutlass.Float32(0.0)
            if kc + j < seq:
                t = row0 + kc + j
                x = k[t, kh * HEAD_DIM + d]
                xo = k[t, kh * HEAD_DIM + (d + half) % HEAD_DIM]
                rot = cutlass.Float32(cutlass.select_(d < half, -xo, xo))
                val = x * cos[t, d].to(cutlass.Float32) + rot * sin[t, d].to(cutlass.Float32)
            kv_s[j, d] = val
        cute.arch.sync_threads()
        for u in cutlass.range_constexpr(_KC // 8):
            j = kg + 8 * u
            dot = cutlass.Float32(0.0)
            for d in cutlass.range_constexpr(HEAD_DIM):
                dot = dot + q_s[qi, d] * kv_s[j, d]
            s_s[qi, kc + j] = dot * cutlass.Float32(SCALE)
    cute.arch.sync_threads()

    # softmax of each query row over keys j <= i: warp w owns rows 4w .. 4w + 3
    for rr in cutlass.range_constexpr(_QT // (_ATT_THREADS // 32)):
        r = warp * (_QT // (_ATT_THREADS // 32)) + rr
        i_pos = q0 + r
        m = cutlass.Float32(-math.inf)
        for c in cutlass.range_constexpr(spad // 32):
            j = c * 32 + lane
            ok = (j <= i_pos) & (i_pos < seq)
            m = cutlass.Float32(cutlass.select_(ok & (s_s[r, j] > m), s_s[r, j], m))
        for off in (16, 8, 4, 2, 1):
            other = cute.arch.shuffle_sync_bfly(m, offset=off, mask=-1, mask_and_clamp=31)
            m = cutlass.Float32(cutlass.select_(other > m, other, m))
        total = cutlass.Float32(0.0)
        for c in cutlass.range_constexpr(spad // 32):
            j = c * 32 + lane
            ok = (j <= i_pos) & (i_pos < seq)
            e = cutlass.Float32(cutlass.select_(ok, cute.math.exp2((s_s[r, j] - m) * LOG2E), 0.0))
            s_s[r, j] = e
            total = total + e
        total = cute.arch.warp_reduction_sum(total)
        inv_ok = total > 0.0
        den = cutlass.Float32(cutlass.select_(inv_ok, total, 1.0))
        for c in cutlass.range_constexpr(spad // 32):
            j = c * 32 + lane
            s_s[r, j] = s_s[r, j] / den

    # P @ V: thread = head dim d, one accumulator per query of the tile
    d = tidx
    acc = cute.make_rmem_tensor((_QT,), cutlass.Float32)
    acc.fill(0.0)
    for kc in range(0, n_keys, _KC):
        cute.arch.sync_threads()
        for j in cutlass.range_constexpr(_KC):
            val = cutlass.Float32(0.0)
            if kc + j < seq:
                val = v[row0 + kc + j, kh * HEAD_DIM + d]
            kv_s[j, d] = val
        cute.arch.sync_threads()
        for j in cutlass.range_constexpr(_KC):
            vv = kv_s[j, d]
            for r in cutlass.range_constexpr(_QT):
                acc[r] = acc[r] + s_s[r, kc + j] * vv
    for r in cutlass.range_constexpr(_QT):
        if q0 + r < seq:
            ctx[row0 + q0 + r, h * HEAD_DIM + d] = acc[r]


@cute.jit
def amax(x: cute.Tensor, partial: cute.Tensor, stream: cuda.CUstream):
    nvfp4_amax_kernel(x, partial).launch(grid=[_AMAX_CTAS, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def global_scale(partial: cute.Tensor, gbuf: cute.Tensor, stream: cuda.CUstream):
    nvfp4_global_scale_kernel(partial, gbuf).launch(grid=[1, 1, 1], block=[32, 1, 1], stream=stream)


@cute.jit
def act_quant(x: cute.Tensor, gbuf: cute.Tensor, q: cute.Tensor, stream: cuda.CUstream):
    n = cute.size(q, mode=[0]) * (cute.size(q, mode=[1]) // BLOCK)
    nvfp4_act_quant_kernel(x, gbuf, q).launch(
        grid=[(n + _THREADS - 1) // _THREADS, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def weight_decode(packed: cute.Tensor, scale: cute.Tensor, q: cute.Tensor, stream: cuda.CUstream):
    n = cute.size(q, mode=[0]) * (cute.size(q, mode=[1]) // BLOCK)
    nvfp4_weight_decode_kernel(packed, scale, q).launch(
        grid=[(n + _THREADS - 1) // _THREADS, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def gemm(mA: cute.Tensor, mB: cute.Tensor, gbuf: cute.Tensor, w_scale: cutlass.Float32, mC: cute.Tensor,
         k: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    nvfp4_gemm_kernel(mA, mB, gbuf, w_scale, mC, k // _BK).launch(
        grid=[m // _BM, n // _BN, 1], block=[_GEMM_THREADS, 1, 1], stream=stream)


@cute.jit
def attn_core(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, cos: cute.Tensor, sin: cute.Tensor, ctx: cute.Tensor,
              batch: cutlass.Constexpr, seq: cutlass.Constexpr, heads: cutlass.Constexpr, group: cutlass.Constexpr,
              stream: cuda.CUstream):
    spad = (seq + _KC - 1) // _KC * _KC
    smem_bytes = (2 * _QT * _PAD + _KC * _PAD + _QT * spad) * 4 + 64
    attn_core_kernel(q, k, v, cos, sin, ctx, seq, group).launch(
        grid=[(seq + _QT - 1) // _QT, heads, batch], block=[_ATT_THREADS, 1, 1], smem=smem_bytes, stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _row_major(dtype, shape, align=16):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=align)


def _compile(kind, shape, arch=None, ptx_dir=None):
    """Compile one launcher for static shapes; ``shape`` is the kind's key tuple."""
    bf16, f32, u8 = cutlass.BFloat16, cutlass.Float32, cutlass.Uint8
    opts = _options(arch, ptx_dir)
    if kind == "amax":
        n, is_bf16 = shape
        return cute.compile(amax, _row_major(bf16 if is_bf16 else f32, (n,)), _row_major(f32, (_AMAX_CTAS,)),
                            make_fake_stream(), options=opts)
    if kind == "gscale":
        return cute.compile(global_scale, _row_major(f32, (_AMAX_CTAS,)), _row_major(f32, (1,), 4),
                            make_fake_stream(), options=opts)
    if kind == "act":
        rows, padded, k, is_bf16 = shape
        return cute.compile(act_quant, _row_major(bf16 if is_bf16 else f32, (rows, k)), _row_major(f32, (1,), 4),
                            _row_major(bf16, (padded, k)), make_fake_stream(), options=opts)
    if kind == "weight":
        rows, padded, k = shape
        return cute.compile(weight_decode, _row_major(u8, (rows, k // 2), 8), _row_major(u8, (rows, k // BLOCK), 1),
                            _row_major(bf16, (padded, k)), make_fake_stream(), options=opts)
    if kind == "attn":
        batch, seq, heads, kv_heads, mp = shape
        tokens = batch * seq
        return cute.compile(attn_core, _row_major(f32, (mp, heads * HEAD_DIM)),
                            _row_major(f32, (mp, kv_heads * HEAD_DIM)), _row_major(f32, (mp, kv_heads * HEAD_DIM)),
                            _row_major(bf16, (tokens, HEAD_DIM)), _row_major(bf16, (tokens, HEAD_DIM)),
                            _row_major(f32, (tokens, heads * HEAD_DIM)), batch, seq, heads, heads // kv_heads,
                            make_fake_stream(), options=opts)
    m, n, k, out_bf16 = shape
    return cute.compile(gemm, _row_major(bf16, (m, k)), _row_major(bf16, (n, k)), _row_major(f32, (1,), 4), 1.0,
                        _row_major(bf16 if out_bf16 else f32, (m, n)), k, make_fake_stream(), options=opts)


def _fn(kind, shape):
    key = (kind, shape)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(kind, shape)
    return _COMPILED[key]


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _plan(batch, seq, hidden, heads, kv_heads):
    """(kind, shape) of every launch, in order."""
    m = batch * seq
    mp = _up(m, _BM)
    nq, nkv = heads * HEAD_DIM, kv_heads * HEAD_DIM
    return [("amax", (m * hidden, True)), ("gscale", ()), ("act", (m, mp, hidden, True)),
            ("weight", (nq, _up(nq, _BN), hidden)), ("weight", (nkv, _up(nkv, _BN), hidden)),
            ("weight", (hidden, _up(hidden, _BN), nq)),
            ("gemm", (mp, _up(nq, _BN), hidden, False)), ("gemm", (mp, _up(nkv, _BN), hidden, False)),
            ("attn", (batch, seq, heads, kv_heads, mp)), ("amax", (m * nq, False)),
            ("act", (m, mp, nq, False)), ("gemm", (mp, _up(hidden, _BN), nq, True))]


def solve(hidden_states, cos, sin, q_weight_fp4, q_scale, q_global_decode_scale, k_weight_fp4, k_scale,
          k_global_decode_scale, v_weight_fp4, v_scale, v_global_decode_scale, o_weight_fp4, o_scale,
          o_global_decode_scale):
    batch, seq, hidden = hidden_states.shape
    heads = q_weight_fp4.shape[0] // HEAD_DIM
    kv_heads = k_weight_fp4.shape[0] // HEAD_DIM
    nq, nkv = heads * HEAD_DIM, kv_heads * HEAD_DIM
    m = batch * seq
    dev = hidden_states.device
    assert hidden % _BK == 0 and nq % _BK == 0 and heads % kv_heads == 0
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    mp = _up(m, _BM)
    f32 = torch.float32

    def weight(packed, scale, rows, k):
        qw = torch.empty(_up(rows, _BN), k, dtype=torch.bfloat16, device=dev)
        _fn("weight", (rows, _up(rows, _BN), k))(packed.contiguous(), scale.contiguous().view(torch.uint8), qw,
                                                 stream)
        return qw

    def project(qa, qw, gbuf, g_w, k, out_bf16):
        out = torch.empty(mp, qw.shape[0], dtype=torch.bfloat16 if out_bf16 else f32, device=dev)
        _fn("gemm", (mp, qw.shape[0], k, out_bf16))(qa, qw, gbuf, float(g_w), out, stream)
        return out

    def quantise(x, k, is_bf16):
        partial = torch.empty(_AMAX_CTAS, dtype=f32, device=dev)
        gbuf = torch.empty(1, dtype=f32, device=dev)
        _fn("amax", (m * k, is_bf16))(x.view(m * k), partial, stream)
        _fn("gscale", ())(partial, gbuf, stream)
        qa = torch.empty(mp, k, dtype=torch.bfloat16, device=dev)
        _fn("act", (m, mp, k, is_bf16))(x, gbuf, qa, stream)
        return qa, gbuf

    x = hidden_states.contiguous().view(m, hidden)
    qa, gx = quantise(x, hidden, True)
    q = project(qa, weight(q_weight_fp4, q_scale, nq, hidden), gx, q_global_decode_scale, hidden, False)
    k = project(qa, weight(k_weight_fp4, k_scale, nkv, hidden), gx, k_global_decode_scale, hidden, False)
    v = project(qa, weight(v_weight_fp4, v_scale, nkv, hidden), gx, v_global_decode_scale, hidden, False)
    ctx = torch.empty(m, nq, dtype=f32, device=dev)
    _fn("attn", (batch, seq, heads, kv_heads, mp))(q, k, v, cos.contiguous().view(m, HEAD_DIM),
                                                     sin.contiguous().view(m, HEAD_DIM), ctx, stream)
    qc, gc = quantise(ctx, nq, False)
    out = project(qc, weight(o_weight_fp4, o_scale, hidden, nq), gc, o_global_decode_scale, nq, True)
    return out[:m, :hidden].reshape(batch, seq, hidden)


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names."""
    names = []
    for kind, shape in dict.fromkeys(_plan(**WORKLOAD)):
        names += list(_compile(kind, shape, arch, ptx_dir).kernel_info)
    return names
