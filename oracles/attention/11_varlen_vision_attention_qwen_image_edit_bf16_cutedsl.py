"""CuTe DSL oracle for problem 11: variable-length vision self-attention with rotate-half RoPE
(Qwen-Image-Edit vision encoder, 16 heads of dim 72), bf16.

Four launches of three DSL kernels.

1. ``bias_gemm_kernel`` (qkv projection, then again for the output projection): C = A W^T + bias on
   the tensor cores (warp-level ``mma.sync`` m16n8k16, bf16 operands, fp32 accumulation). Every
   operand value is bf16, so each product is exact and only the summation order differs from the
   reference's fp32 GEMMs. A CTA computes a 128 x 128 tile with 4 warps (2 x 2, each 64 x 64); K
   advances in slices of 32 through a two-stage shared-memory ring filled by 16-byte ``cp.async``
   copies (swizzled rows, so that ``ldmatrix`` reads them without bank conflicts). Epilogue: the
   fp32 sum plus the bias (one fp32 add, as the reference), rounded to bf16 once.
2. ``rope_pack_kernel``: one CTA per token. For q and k, x * cos + rotate_half(x) * sin in fp32
   (each product of two bf16 values is exact) rounded to bf16 once, as the reference; v is copied.
   The values go to a head-major scratch [3, heads, tokens, 128] whose columns past head_dim are
   zero, so that the attention kernel reads whole 16-byte rows and its Q K^T over 128 columns adds
   only exact zeros.
3. ``varlen_attention_kernel``: per image (cu_seqlens), per head, tiles of 64 query rows (16 per
   warp of 4); the grid is (an upper bound on the row tiles, heads) and each CTA finds its image and
   row tile by a scan of the sequence offsets (CTAs past the last tile do nothing). Keys come in
   blocks of 64 through swizzled shared memory by 16-byte ``cp.async``; rows past the image's end
   are clamped to its last row and masked (-inf) in the softmax. S = Q K^T and P V run as
   ``mma.sync`` m16n8k16 from ``ldmatrix`` (V through ``ldmatrix.trans``). The softmax reproduces
   the reference's rounding of the probabilities to bf16 with two passes over the keys: pass 1
   computes each row's maximum m and sum l = sum exp2(s - m) online in fp32 (base 2, s = S * scale
   * log2(e); row maxima and sums reduced over the 4 lanes sharing a row by butterfly shuffles);
   pass 2 recomputes S and forms p = bf16(exp2(s - m) * (1 / l)) (IEEE reciprocal), the
   reference's bf16 probabilities up to the fp32 rounding of exp and of the sum, and accumulates
   P V in fp32 with a single bf16 MMA (exact products, as the reference's PV). The output rows are
   rounded to bf16 once and stored through shared memory with 16-byte stores into the [tokens,
   heads * head_dim] operand of the output projection.
Shapes that are not GEMM tile multiples (the small workload) use zero-padded scratch operands; the
graded shapes need none.
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(images=28, tokens=7168, min_len=85, max_len=680, heads=16, head_dim=72)
_BM, _BN, _BK = 128, 128, 32  # GEMM tile
_GEMM_THREADS = 128  # 2 x 2 warps
_DP = 128  # padded head dim of the attention scratch
_AM = 64  # query rows per attention CTA: 4 warps x 16
_AN = 64  # keys per block
_THREADS = 128
_COMPILED = {}


def _smem_rows(smem, rows):
    """A two-stage (rows, 32) bf16 ring. The pointer swizzle acts on byte addresses: bits 7-8 (row / 2)
    are xor-ed into bits 4-5 (the 16-byte chunk of the 64-byte row), so a cp.async vector stays whole
    and the 8 rows an ldmatrix reads land in different banks."""
    row_atom = cute.make_layout((8, _BK), stride=(_BK, 1))
    return smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (rows, _BK, 2), (0, 1, 2)), 1024,
                                swizzle=cute.make_swizzle(2, 4, 3))


def _g2s_copy():
    """global -> shared: 32 rows x 4 threads, 8 bf16 (16 bytes) per thread and copy."""
    return cute.make_tiled_copy_tv(
        cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                            cutlass.BFloat16, num_bits_per_copy=128),
        cute.make_layout((_GEMM_THREADS // (_BK // 8), _BK // 8), stride=(_BK // 8, 1)),
        cute.make_layout((1, 8)))


def _tiled_mma():
    return cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((2, 2, 1)), permutation_mnk=(32, 32, 16))


def _ldmatrix():
    return cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16)


@cute.kernel
def bias_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mC[m, n] = bf16(sum_k mA[m, k] * mB[n, k] + bias[n]); k_tiles slices of 32."""
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    gA = cute.local_tile(mA, (_BM, _BK), (bm, None))  # (BM, BK, k tiles)
    gB = cute.local_tile(mB, (_BN, _BK), (bn, None))  # (BN, BK, k tiles)
    gC = cute.local_tile(mC, (_BM, _BN), (bm, bn))  # (BM, BN)

    smem = cutlass.memory.SmemAllocator()
    sA = _smem_rows(smem, _BM)
    sB = _smem_rows(smem, _BN)

    g2s = _g2s_copy()
    thr_g2s = g2s.get_slice(tidx)
    tAgA = thr_g2s.partition_S(gA)
    tAsA = thr_g2s.partition_D(sA)
    tBgB = thr_g2s.partition_S(gB)
    tBsB = thr_g2s.partition_D(sB)

    tiled_mma = _tiled_mma()
    thr_mma = tiled_mma.get_slice(tidx)
    tCsA = thr_mma.partition_A(sA)
    tCsB = thr_mma.partition_B(sB)
    tCgC = thr_mma.partition_C(gC)
    tCrA = tiled_mma.make_fragment_A(tCsA[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(tCsB[None, None, None, 0])
    acc = tiled_mma.make_fragment_C(tCgC)
    acc.fill(0.0)

    s2r_A = cute.make_tiled_copy_A(_ldmatrix(), tiled_mma)
    s2r_B = cute.make_tiled_copy_B(_ldmatrix(), tiled_mma)
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

    tCcC = thr_mma.partition_C(cute.make_identity_tensor((_BM, _BN)))  # (m, n) of every accumulator
    out = cute.make_fragment_like(acc, cutlass.BFloat16)
    for i in cutlass.range_constexpr(cute.size(acc)):
        out[i] = (acc[i] + mBias[bn * _BN + tCcC[i][1]].to(cutlass.Float32)).to(cutlass.BFloat16)
    cute.autovec_copy(out, tCgC)


@cute.jit
def bias_gemm(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr,
              stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    bias_gemm_kernel(mA, mB, mBias, mC, k // _BK).launch(
        grid=[m // _BM, n // _BN, 1], block=[_GEMM_THREADS, 1, 1], stream=stream)


@cute.kernel
def rope_pack_kernel(qkv: cute.Tensor, cos: cute.Tensor, sin: cute.Tensor, packed: cute.Tensor,
                     heads: cutlass.Constexpr, head_dim: cutlass.Constexpr, steps: cutlass.Constexpr):
    """packed[s, h, t, d] = rope(qkv[t, s, h, :])[d] for q, k (s = 0, 1), qkv[t, 2, h, d] for v, 0 past head_dim."""
    tidx, _, _ = cute.arch.thread_idx()
    t, _, _ = cute.arch.block_idx()
    half = head_dim // 2
    total = 3 * heads * _DP
    for i in range(steps):
        e = tidx + i * _THREADS
        if e < total:
            s = e // (heads * _DP)
            rem = e - s * (heads * _DP)
            h = rem // _DP
            d = rem - h * _DP
            val = cutlass.Float32(0.0)
            if d < head_dim:
                base = s * (heads * head_dim) + h * head_dim
                x = qkv[t, base + d].to(cutlass.Float32)
                if s < 2:
                    lower = d < half
                    part = qkv[t, base + cutlass.select_(lower, d + half, d - half)].to(cutlass.Float32)
                    part = cutlass.Float32(cutlass.select_(lower, -part, part))
                    x = x * cos[t, h, d].to(cutlass.Float32) + part * sin[t, h, d].to(cutlass.Float32)
                val = x
            packed[s, h, t, d] = val.to(cutlass.BFloat16)


@cute.jit
def rope_pack(qkv: cute.Tensor, cos: cute.Tensor, sin: cute.Tensor, packed: cute.Tensor, stream: cuda.CUstream):
    tokens = cute.size(qkv, mode=[0])
    heads = cute.size(cos, mode=[1])
    head_dim = cute.size(cos, mode=[2])
    steps = (3 * heads * _DP + _THREADS - 1) // _THREADS
    rope_pack_kernel(qkv, cos, sin, packed, heads, head_dim, steps).launch(
        grid=[tokens, 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _quad_max(x):
    x = cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=2, mask=-1, mask_and_clamp=31))
    return cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=1, mask=-1, mask_and_clamp=31))


def _quad_sum(x):
    x = x + cute.arch.shuffle_sync_bfly(x, offset=2, mask=-1, mask_and_clamp=31)
    return x + cute.arch.shuffle_sync_bfly(x, offset=1, mask=-1, mask_and_clamp=31)


def _mn_view(t):
    """An MMA accumulator fragment ((2, 2), MMA_M, MMA_N) viewed as (rows, columns) of the thread."""
    lay = cute.make_layout(t.layout.shape)
    mn = cute.make_layout(((lay.shape[0][1], lay.shape[1]), (lay.shape[0][0], lay.shape[2])),
                          stride=((lay.stride[0][1], lay.stride[1]), (lay.stride[0][0], lay.stride[2])))
    return cute.make_tensor(t.iterator, cute.composition(t.layout, mn))


def _as_a_operand(t):
    """A bf16 copy of an S accumulator ((2, 2), MMA_M, MMA_N) as the A operand of P V:
    ((2, 2, 2), MMA_M, MMA_N / 2) (two n8 accumulator tiles form one k16 A tile)."""
    div = cute.logical_divide(t.layout, (None, None, 2))
    lay = cute.make_layout(((div.shape[0], div.shape[2][0]), div.shape[1], div.shape[2][1]),
                           stride=((div.stride[0], div.stride[2][0]), div.stride[1], div.stride[2][1]))
    return cute.make_tensor(t.iterator, lay)


def _load_rows(g2s, dst, packed, which, head, beg, length, row0, rows_per_pass, my_row, my_chunk):
    """cp.async of the 64 rows from row0 of packed[which, head, beg:beg + length] (rows past the end
    clamped to the last row) into dst (a g2s partition)."""
    for m in range(cute.size(dst, mode=[1])):
        j = cutlass.min(row0 + m * rows_per_pass + my_row, length - 1)
        for kk in range(cute.size(dst, mode=[2])):
            src = cute.local_tile(packed[which, head, beg + j, None], (8,), (kk * 8 + my_chunk,))
            cute.copy(g2s, src, dst[None, m, kk])


@cute.kernel
def varlen_attention_kernel(packed: cute.Tensor, indptr: cute.Tensor, out: cute.Tensor, scale_log2: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    tile, head, _ = cute.arch.block_idx()
    head_dim = cute.size(out, mode=[2])
    batch = cute.size(indptr) - 1
    cols = 8  # threads per 64-column slab of a row in the copies
    rows_per_pass = _THREADS // cols

    # which image and row tile this CTA serves
    seq = cutlass.Int32(-1)
    r0 = cutlass.Int32(0)
    first = cutlass.Int32(0)
    for b in range(batch):
        n_tiles = (indptr[b + 1] - indptr[b] + _AM - 1) // _AM
        hit = (tile >= first) & (tile < first + n_tiles)
        seq = cutlass.Int32(cutlass.select_(hit, b, seq))
        r0 = cutlass.Int32(cutlass.select_(hit, (tile - first) * _AM, r0))
        first = first + n_tiles

    if seq >= 0:
        beg = indptr[seq]
        length = indptr[seq + 1] - beg
        n_blocks = (length + _AN - 1) // _AN

        smem = cutlass.memory.SmemAllocator()
        atom = cute.make_layout((8, 64), stride=(64, 1))
        # the pointer swizzle acts on byte addresses: bits 7-9 (row % 8) are xor-ed into bits 4-6 (the 16-byte
        # chunk of a 128-byte row), so cp.async vectors and ldmatrix rows stay whole (M = 3 would split them)
        swizzle = cute.make_swizzle(3, 4, 3)
        sQ = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_AM, _DP), (0, 1)), 1024,
                                  swizzle=swizzle)
        sK = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_AN, _DP), (0, 1)), 1024,
                                  swizzle=swizzle)
        sV = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_AN, _DP), (0, 1)), 1024,
                                  swizzle=swizzle)
        sVt = cute.composition(sV, cute.make_layout((_DP, _AN), stride=(_AN, 1)))  # (d, key)

        g2s = cute.make_tiled_copy_tv(
            cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                                cutlass.BFloat16, num_bits_per_copy=128),
            cute.make_layout((rows_per_pass, cols), stride=(cols, 1)), cute.make_layout((1, 8)))
        thr_g2s = g2s.get_slice(tidx)
        tQsQ = thr_g2s.partition_D(sQ)  # ((8, 1), AM / 16, DP / 64)
        tKsK = thr_g2s.partition_D(sK)
        tVsV = thr_g2s.partition_D(sV)
        my_row = tidx // cols
        my_chunk = tidx % cols

        # Q rows of the tile and the first key block
        _load_rows(g2s, tQsQ, packed, 0, head, beg, length, r0, rows_per_pass, my_row, my_chunk)
        _load_rows(g2s, tKsK, packed, 1, head, beg, length, 0, rows_per_pass, my_row, my_chunk)
        cute.arch.cp_async_commit_group()

        tiled_mma = cute.make_tiled_mma(
            cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
            cute.make_layout((_THREADS // 32, 1, 1)), permutation_mnk=(_AM, 16, 16))
        thr_mma = tiled_mma.get_slice(tidx)
        tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))
        tSrK = thr_mma.make_fragment_B(thr_mma.partition_B(sK))
        tOrVt = thr_mma.make_fragment_B(thr_mma.partition_B(sVt))
        acc_o = cute.make_rmem_tensor(thr_mma.partition_shape_C((_AM, _DP)), cutlass.Float32)
        acc_o.fill(0.0)

        s2r_q = cute.make_tiled_copy_A(
            cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
        s2r_k = cute.make_tiled_copy_B(
            cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
        s2r_v = cute.make_tiled_copy_B(
            cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(True, 4), cutlass.BFloat16), tiled_mma)
        thr_s2r_q = s2r_q.get_slice(tidx)
        thr_s2r_k = s2r_k.get_slice(tidx)
        thr_s2r_v = s2r_v.get_slice(tidx)
        tXsQ = thr_s2r_q.partition_S(sQ)
        tXrQ = thr_s2r_q.retile(tSrQ)
        tXsK = thr_s2r_k.partition_S(sK)
        tXrK = thr_s2r_k.retile(tSrK)
        tXsV = thr_s2r_v.partition_S(sVt)
        tXrV = thr_s2r_v.retile(tOrVt)

        # coordinates (row in tile, key in block) of each S accumulator element
        tScS = _mn_view(thr_mma.partition_C(cute.make_identity_tensor((_AM, _AN))))
        acc_s_shape = thr_mma.partition_shape_C((_AM, _AN))
        n_rows = cute.size(tScS, mode=[0])  # rows per thread (2)
        n_cols = cute.size(tScS, mode=[1])
        row_max = cute.make_rmem_tensor((n_rows,), cutlass.Float32)
        row_sum = cute.make_rmem_tensor((n_rows,), cutlass.Float32)
        row_max.fill(-cutlass.Float32.inf)
        row_sum.fill(0.0)

        # pass 1: row maxima and sums of exp2(s - m)
        for nb in range(n_blocks):
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()  # K(nb) (and Q) landed
            acc_s = cute.make_rmem_tensor(acc_s_shape, cutlass.Float32)
            acc_s.fill(0.0)
            for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                cute.copy(s2r_q, tXsQ[None, None, kb], tXrQ[None, None, kb])
                cute.copy(s2r_k, tXsK[None, None, kb], tXrK[None, None, kb])
                cute.gemm(tiled_mma, acc_s, tSrQ[None, None, kb], tSrK[None, None, kb], acc_s)
            cute.arch.sync_threads()  # every warp is done with K(nb)
            if nb + 1 < n_blocks:
                _load_rows(g2s, tKsK, packed, 1, head, beg, length, (nb + 1) * _AN, rows_per_pass, my_row, my_chunk)
                cute.arch.cp_async_commit_group()

            s_mn = _mn_view(acc_s)
            for i in cutlass.range_constexpr(n_rows):
                for c in cutlass.range_constexpr(n_cols):
                    key = nb * _AN + tScS[0, c][1]
                    s_mn[i, c] = cutlass.Float32(cutlass.select_(key < length, s_mn[i, c] * scale_log2,
                                                                 -cutlass.Float32.inf))
                m_blk = s_mn[i, 0]
                for c in cutlass.range_constexpr(1, n_cols):
                    m_blk = cute.arch.fmax(m_blk, s_mn[i, c])
                m_new = cute.arch.fmax(row_max[i], _quad_max(m_blk))
                alpha = cute.math.exp2(row_max[i] - m_new, fastmath=True)
                p_sum = cutlass.Float32(0.0)
                for c in cutlass.range_constexpr(n_cols):
                    p_sum = p_sum + cute.math.exp2(s_mn[i, c] - m_new, fastmath=True)
                row_sum[i] = row_sum[i] * alpha + p_sum
                row_max[i] = m_new
        inv_sum = cute.make_rmem_tensor((n_rows,), cutlass.Float32)
        for i in cutlass.range_constexpr(n_rows):
            inv_sum[i] = cutlass.Float32(1.0) / _quad_sum(row_sum[i])

        # pass 2: p = bf16(exp2(s - m) / l), O += P V
        _load_rows(g2s, tKsK, packed, 1, head, beg, length, 0, rows_per_pass, my_row, my_chunk)
        _load_rows(g2s, tVsV, packed, 2, head, beg, length, 0, rows_per_pass, my_row, my_chunk)
        cute.arch.cp_async_commit_group()
        for nb in range(n_blocks):
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()  # K(nb), V(nb) landed
            acc_s = cute.make_rmem_tensor(acc_s_shape, cutlass.Float32)
            acc_s.fill(0.0)
            for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                cute.copy(s2r_q, tXsQ[None, None, kb], tXrQ[None, None, kb])
                cute.copy(s2r_k, tXsK[None, None, kb], tXrK[None, None, kb])
                cute.gemm(tiled_mma, acc_s, tSrQ[None, None, kb], tSrK[None, None, kb], acc_s)
            s_mn = _mn_view(acc_s)
            for i in cutlass.range_constexpr(n_rows):
                for c in cutlass.range_constexpr(n_cols):
                    key = nb * _AN + tScS[0, c][1]
                    s = cutlass.Float32(cutlass.select_(key < length, s_mn[i, c] * scale_log2, -cutlass.Float32.inf))
                    s_mn[i, c] = cute.math.exp2(s - row_max[i], fastmath=True) * inv_sum[i]
            p_b = cute.make_fragment_like(acc_s, cutlass.BFloat16)
            p_b.store(acc_s.load().to(cutlass.BFloat16))
            a_p = _as_a_operand(p_b)
            for kb in cutlass.range_constexpr(cute.size(a_p, mode=[2])):
                cute.copy(s2r_v, tXsV[None, None, kb], tXrV[None, None, kb])
                cute.gemm(tiled_mma, acc_o, a_p[None, None, kb], tOrVt[None, None, kb], acc_o)
            cute.arch.sync_threads()  # every warp is done with K(nb), V(nb)
            if nb + 1 < n_blocks:
                _load_rows(g2s, tKsK, packed, 1, head, beg, length, (nb + 1) * _AN, rows_per_pass, my_row, my_chunk)
                _load_rows(g2s, tVsV, packed, 2, head, beg, length, (nb + 1) * _AN, rows_per_pass, my_row, my_chunk)
                cute.arch.cp_async_commit_group()

        # epilogue: bf16 O staged through shared memory (sQ) for 16-byte stores of the head_dim columns
        r_o = cute.make_fragment_like(acc_o, cutlass.BFloat16)
        r_o.store(acc_o.load().to(cutlass.BFloat16))
        r2s = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16), tiled_mma)
        thr_r2s = r2s.get_slice(tidx)
        cute.copy(r2s, thr_r2s.retile(r_o), thr_r2s.partition_D(sQ))  # every warp finished with sQ above
        cute.arch.sync_threads()
        for m in cutlass.range_constexpr(cute.size(tQsQ, mode=[1])):
            r = r0 + m * rows_per_pass + my_row
            if r < length:
                for kk in cutlass.range_constexpr(cute.size(tQsQ, mode=[2])):
                    chunk = kk * cols + my_chunk
                    if chunk * 8 < head_dim:
                        dst = cute.local_tile(out[beg + r, head, None], (8,), (chunk,))
                        frag = cute.make_rmem_tensor((8,), cutlass.BFloat16)
                        frag.store(tQsQ[None, m, kk].load())
                        cute.autovec_copy(frag, dst)


@cute.jit
def varlen_attention(packed: cute.Tensor, indptr: cute.Tensor, out: cute.Tensor, scale_log2: cutlass.Float32,
                     n_tiles: cutlass.Constexpr, stream: cuda.CUstream):
    varlen_attention_kernel(packed, indptr, out, scale_log2).launch(
        grid=[n_tiles, cute.size(out, mode=[1]), 1], block=[_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _row_major(shape, dtype=cutlass.BFloat16, align=16):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=align)


def _compile_gemm(m, n, k, arch=None, ptx_dir=None):
    """A [m, k], W [n, k], bias [n], C [m, n]; all tile multiples."""
    a, w, bias, c = _row_major((m, k)), _row_major((n, k)), _row_major((n,)), _row_major((m, n))
    return cute.compile(bias_gemm, a, w, bias, c, k, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_rope(tokens, qkv_cols, heads, head_dim, arch=None, ptx_dir=None):
    qkv = _row_major((tokens, qkv_cols))
    cos, sin = _row_major((tokens, heads, head_dim), align=2), _row_major((tokens, heads, head_dim), align=2)
    packed = _row_major((3, heads, tokens, _DP))
    return cute.compile(rope_pack, qkv, cos, sin, packed, make_fake_stream(), options=_options(arch, ptx_dir))


def _n_tiles(tokens, images):
    """An upper bound on the row tiles of one head: each image wastes less than one tile."""
    return (tokens + _AM - 1) // _AM + images


def _compile_attention(tokens, heads, head_dim, images, arch=None, ptx_dir=None):
    packed = _row_major((3, heads, tokens, _DP))
    indptr = make_fake_compact_tensor(cutlass.Int32, (images + 1,))
    out = _row_major((tokens, heads, head_dim))
    return cute.compile(varlen_attention, packed, indptr, out, 1.0, _n_tiles(tokens, images), make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(w, shape):
    if tuple(w.shape) == tuple(shape):
        return w.contiguous()
    p = torch.zeros(*shape, dtype=torch.bfloat16, device=w.device)
    p[tuple(slice(0, s) for s in w.shape)] = w
    return p


def _gemm(a, w, bias, stream):
    """bf16(a @ w^T + bias) for a tile-padded a [mp, kp]; returns the [mp, np] result (np = n padded)."""
    mp, kp, n_p = a.shape[0], a.shape[1], _up(w.shape[0], _BN)
    c = torch.empty(mp, n_p, dtype=torch.bfloat16, device=a.device)
    key = ("gemm", mp, n_p, kp)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_gemm(*key[1:])
    _COMPILED[key](a, _padded(w, (n_p, kp)), _padded(bias, (n_p,)), c, stream)
    return c


def solve(hidden_states, cu_seqlens, cos, sin, qkv_weight, qkv_bias, proj_weight, proj_bias):
    tokens, hidden = hidden_states.shape
    heads, head_dim = cos.shape[1], cos.shape[2]
    images = cu_seqlens.numel()
    dev = hidden_states.device
    assert heads * head_dim == hidden and head_dim % 8 == 0 and head_dim <= _DP
    out = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=dev)
    if tokens == 0:
        return out
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    mp, kp = _up(tokens, _BM), _up(hidden, _BK)
    qkv = _gemm(_padded(hidden_states, (mp, kp)), qkv_weight, qkv_bias, stream)  # [mp, >= 3 hidden]
    qkv = qkv[:tokens] if qkv.shape[1] == 3 * hidden else qkv[:tokens, :3 * hidden].contiguous()

    packed = torch.empty(3, heads, tokens, _DP, dtype=torch.bfloat16, device=dev)
    key = ("rope", tokens, 3 * hidden, heads, head_dim)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_rope(*key[1:])
    _COMPILED[key](qkv, cos.contiguous(), sin.contiguous(), packed, stream)

    indptr = torch.zeros(images + 1, dtype=torch.int32, device=dev)
    indptr[1:] = cu_seqlens.to(torch.int32)
    attn = torch.empty(tokens, heads, head_dim, dtype=torch.bfloat16, device=dev)  # every element written
    key = ("attention", tokens, heads, head_dim, images)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_attention(*key[1:])
    _COMPILED[key](packed, indptr, attn, float(head_dim ** -0.5 * math.log2(math.e)), stream)

    c = _gemm(_padded(attn.view(tokens, hidden), (mp, kp)), proj_weight, proj_bias, stream)
    if tuple(c.shape) == (tokens, hidden):
        return c
    out.copy_(c[:tokens, :hidden])
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile the four launches' kernels for the fixed workload without a GPU; kernel names."""
    w = WORKLOAD
    tokens, heads, head_dim = w["tokens"], w["heads"], w["head_dim"]
    hidden = heads * head_dim
    names = list(_compile_gemm(tokens, 3 * hidden, hidden, arch, ptx_dir).kernel_info)
    names += list(_compile_rope(tokens, 3 * hidden, heads, head_dim, arch, ptx_dir).kernel_info)
    names += list(_compile_attention(tokens, heads, head_dim, w["images"], arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(tokens, hidden, hidden, arch, ptx_dir).kernel_info)
    return names
