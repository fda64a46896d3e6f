"""CuTe DSL oracle for problem 15: causal absorbed-MLA paged prefill (16 heads, latent 512 + RoPE 64,
page size 1), flash-attention style on the tensor cores.

The whole computation is one DSL kernel. The 16 heads share every cached row, and the latent ckv is
both the key's first 512 dims and the value: the kernel treats the problem as attention with one
KV head, a 576-dim q.k (q = [q_nope | q_pe] against k = [ckv | kpe]) and a 512-dim value. Rows of
work are (query token, head) pairs of one sequence, packed token-major (row r is token r // 16, head
r % 16), so the 16 heads share every K/V tile. A CTA of 4 warps takes 64 such rows (16 per warp) and
one 128-dim slice of the value/output dims (the O accumulators of all 512 dims would not fit in
registers; S is recomputed per slice); the grid is (an upper bound on the number of row tiles, 4
slices) and each CTA finds its sequence and row tile by a scan of qo_indptr (CTAs past the last
tile do nothing; the last tile of each sequence, which sees the most keys, gets the lowest index).
- Q rows (q_nope then q_pe, 576 dims) and, for each block of 64 cached tokens, the K rows (ckv then
  kpe of row kv_indices[kv_indptr[b] + j] for token j) and the V rows (the slice's 128 dims of the
  same ckv rows) are copied to swizzled shared memory by 16-byte ``cp.async`` (160 KB in all); rows
  past the end of the sequence are clamped to its last row (they are never used). The V copy of a
  block overlaps S = Q K^T, the K copy of the next block overlaps the softmax and P V.
- S = Q K^T and O += P V run as warp-level ``mma.sync`` m16n8k16 (bf16 operands from ``ldmatrix``,
  fp32 accumulators): products of bf16 values are exact in fp32, so S is the reference's fp32 logit
  up to summation order. S's 576-wide dot products are summed per 16-wide slab by the MMA (from
  zero) and the 36 slab sums added by fp32 adds: chained through the MMA's accumulator, the lse
  (which carries the row's largest logit) missed the whole-tensor 2-norm allowance by 1.17x on the
  H100 (norm error 9.0e-4 against 7.7e-4). V is read through ``ldmatrix.trans``.
- Softmax in base 2 and fp32: s = S * sm_scale * log2(e); key j is masked (-inf) for a row of query
  i unless j <= i + (L_kv - L_q) (the cached prefix comes first). Online update per row: m_new =
  max(m, rowmax s), alpha = exp2(m - m_new), p = exp2(s - m_new), l = l * alpha + rowsum p, O = O *
  alpha + P V. Row maxima and sums are reduced over the 4 lanes sharing a row by butterfly shuffles.
  The first key block always holds key 0, visible to every row, so m is finite after it.
- P V keeps the fp32 precision of p: p is split into hi = bf16(p) and lo = bf16(p - hi), and both
  bf16 operands go through the MMA (hi + lo carries ~16 significant bits of p).
- Epilogue: output = O * (1 / l) (IEEE reciprocal), rounded to bf16 once and written through shared
  memory (the V tile's buffer: 64 keys x 128 dims, the shape of the 64 x 128 output tile) with
  16-byte stores; lse = m + log2(l), the base-2 log-sum-exp (the reference's lse / ln 2), written by
  the CTAs of the first slice.
Latent or RoPE widths that are not a multiple of 64 (the small test shape's 32 / 8) are zero-padded
to one by glue before the kernel (zero dims add nothing to q.k; the padded output dims are sliced
off), and the value slice is then 64 dims.
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=28, heads=16, rank=512, rope_dim=64, num_pages=989669)
_GRADED_TOKENS = (1954, 2044)  # query and KV tokens of the captured qo/kv_indptr (the graded profile)
_BM = 64  # rows (token, head) per CTA: 4 warps x 16
_BN = 64  # keys per block (== _BM: the V buffer stages the output tile)
_THREADS = 128
_COMPILED = {}


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


def _load_k(g2s, dst, ckv, kpe, kv_indices, kv_beg, kv_len, nb, rows_per_pass, my_row, my_chunk):
    """cp.async of the K rows [ckv | kpe] of block nb (rows past the sequence clamped to its last one)."""
    n_nope = cute.size(ckv, mode=[2]) // 64
    for m in range(cute.size(dst, mode=[1])):
        page = kv_indices[kv_beg + cutlass.min(nb * _BN + m * rows_per_pass + my_row, kv_len - 1)]
        for kk in range(cute.size(dst, mode=[2])):
            if kk < n_nope:  # (plain Python: helpers are traced, not preprocessed)
                src = cute.local_tile(ckv[page, 0, None], (8,), (kk * 8 + my_chunk,))
            else:
                src = cute.local_tile(kpe[page, 0, None], (8,), ((kk - n_nope) * 8 + my_chunk,))
            cute.copy(g2s, src, dst[None, m, kk])


def _load_v(g2s, dst, ckv, kv_indices, kv_beg, kv_len, nb, vs, rows_per_pass, my_row, my_chunk):
    """cp.async of the V rows of block nb: dims vs * width .. of ckv (width = dst's columns)."""
    chunks = cute.size(dst, mode=[2]) * 8  # 16-byte chunks per row of the slice
    for m in range(cute.size(dst, mode=[1])):
        page = kv_indices[kv_beg + cutlass.min(nb * _BN + m * rows_per_pass + my_row, kv_len - 1)]
        for kk in range(cute.size(dst, mode=[2])):
            src = cute.local_tile(ckv[page, 0, None], (8,), (vs * chunks + kk * 8 + my_chunk,))
            cute.copy(g2s, src, dst[None, m, kk])


@cute.kernel
def mla_paged_prefill_kernel(q_nope: cute.Tensor, q_pe: cute.Tensor, ckv: cute.Tensor, kpe: cute.Tensor,
                             qo_indptr: cute.Tensor, kv_indptr: cute.Tensor, kv_indices: cute.Tensor, out: cute.Tensor,
                             lse: cute.Tensor, scale_log2: cutlass.Float32, vo_dim: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    tile, vs, _ = cute.arch.block_idx()  # vs: which vo_dim-wide slice of the value/output dims
    heads = cute.size(q_nope, mode=[1])
    n_nope = cute.size(q_nope, mode=[2]) // 64
    qk_dim = cute.size(q_nope, mode=[2]) + cute.size(q_pe, mode=[2])
    block_n = _BN
    group = heads  # one KV head (the latent cache) for all heads
    kvh = 0
    batch = cute.size(qo_indptr) - 1
    cols = 8  # threads per 64-column slab of a row in the copies
    rows_per_pass = _THREADS // cols

    # which sequence and row tile this CTA serves (the last tile of a sequence first)
    seq = cutlass.Int32(-1)
    r0 = cutlass.Int32(0)
    first = cutlass.Int32(0)
    for b in range(batch):
        q_len = qo_indptr[b + 1] - qo_indptr[b]
        n_tiles = (q_len * group + _BM - 1) // _BM
        hit = (tile >= first) & (tile < first + n_tiles)
        seq = cutlass.Int32(cutlass.select_(hit, b, seq))
        r0 = cutlass.Int32(cutlass.select_(hit, (first + n_tiles - 1 - tile) * _BM, r0))
        first = first + n_tiles

    if seq >= 0:
        q_beg = qo_indptr[seq]
        q_len = qo_indptr[seq + 1] - q_beg
        kv_beg = kv_indptr[seq]
        kv_len = kv_indptr[seq + 1] - kv_beg
        prefix = kv_len - q_len
        rows = q_len * group
        r_last = cutlass.min(r0 + _BM, rows) - 1
        n_blocks = (r_last // group + prefix + block_n) // block_n

        smem = cutlass.memory.SmemAllocator()
        atom = cute.make_layout((8, 64), stride=(64, 1))
        # the pointer swizzle acts on byte addresses: bits 7-9 (row % 8) are xor-ed into bits 4-6 (the 16-byte
        # chunk of a 128-byte row), so cp.async vectors and ldmatrix rows stay whole (M = 3 would split them)
        swizzle = cute.make_swizzle(3, 4, 3)
        sQ = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, qk_dim), (0, 1)), 1024,
                                  swizzle=swizzle)
        sK = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (block_n, qk_dim), (0, 1)), 1024,
                                  swizzle=swizzle)
        sV = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (block_n, vo_dim), (0, 1)), 1024,
                                  swizzle=swizzle)
        sVt = cute.composition(sV, cute.make_layout((vo_dim, block_n), stride=(block_n, 1)))  # (d, key)

        g2s = cute.make_tiled_copy_tv(
            cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                                cutlass.BFloat16, num_bits_per_copy=128),
            cute.make_layout((rows_per_pass, cols), stride=(cols, 1)), cute.make_layout((1, 8)))
        thr_g2s = g2s.get_slice(tidx)
        tQsQ = thr_g2s.partition_D(sQ)  # ((8, 1), BM / 16, qk_dim / 64)
        tKsK = thr_g2s.partition_D(sK)
        tVsV = thr_g2s.partition_D(sV)
        my_row = tidx // cols
        my_chunk = tidx % cols

        # Q rows of the tile (row r: token r // group, head kvh * group + r % group)
        for m in cutlass.range_constexpr(cute.size(tQsQ, mode=[1])):
            r = cutlass.min(r0 + m * rows_per_pass + my_row, rows - 1)
            tok = q_beg + r // group
            head = kvh * group + r % group
            for kk in cutlass.range_constexpr(cute.size(tQsQ, mode=[2])):
                if cutlass.const_expr(kk < n_nope):
                    src = cute.local_tile(q_nope[tok, head, None], (8,), (kk * cols + my_chunk,))
                else:
                    src = cute.local_tile(q_pe[tok, head, None], (8,), ((kk - n_nope) * cols + my_chunk,))
                cute.copy(g2s, src, tQsQ[None, m, kk])

        tiled_mma = cute.make_tiled_mma(
            cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
            cute.make_layout((_THREADS // 32, 1, 1)), permutation_mnk=(_BM, 16, 16))
        thr_mma = tiled_mma.get_slice(tidx)
        tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))
        tSrK = thr_mma.make_fragment_B(thr_mma.partition_B(sK))
        tOrVt = thr_mma.make_fragment_B(thr_mma.partition_B(sVt))
        acc_o = cute.make_rmem_tensor(thr_mma.partition_shape_C((_BM, vo_dim)), cutlass.Float32)
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
        tScS = _mn_view(thr_mma.partition_C(cute.make_identity_tensor((_BM, block_n))))
        acc_s_shape = thr_mma.partition_shape_C((_BM, block_n))
        n_rows = cute.size(tScS, mode=[0])  # rows per thread (2)
        row_max = cute.make_rmem_tensor((n_rows,), cutlass.Float32)
        row_sum = cute.make_rmem_tensor((n_rows,), cutlass.Float32)
        row_max.fill(-cutlass.Float32.inf)
        row_sum.fill(0.0)
        # the last key each of the thread's rows may see, relative to the sequence's first key
        row_lim = cute.make_rmem_tensor((n_rows,), cutlass.Int32)
        for i in cutlass.range_constexpr(n_rows):
            row_lim[i] = (r0 + tScS[i, 0][0]) // group + prefix

        _load_k(g2s, tKsK, ckv, kpe, kv_indices, kv_beg, kv_len, 0, rows_per_pass, my_row, my_chunk)
        cute.arch.cp_async_commit_group()

        for nb in range(n_blocks):
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()  # K(nb) (and Q) landed; every warp is done with V(nb - 1)
            _load_v(g2s, tVsV, ckv, kv_indices, kv_beg, kv_len, nb, vs, rows_per_pass, my_row, my_chunk)
            cute.arch.cp_async_commit_group()

            acc_s = cute.make_rmem_tensor(acc_s_shape, cutlass.Float32)
            part_s = cute.make_rmem_tensor(acc_s_shape, cutlass.Float32)
            acc_s.fill(0.0)
            for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                cute.copy(s2r_q, tXsQ[None, None, kb], tXrQ[None, None, kb])
                cute.copy(s2r_k, tXsK[None, None, kb], tXrK[None, None, kb])
                part_s.fill(0.0)  # each 16-wide K slab from zero, the slabs added with IEEE fp32 adds
                cute.gemm(tiled_mma, part_s, tSrQ[None, None, kb], tSrK[None, None, kb], part_s)
                for i in cutlass.range_constexpr(cute.size(acc_s)):
                    acc_s[i] = acc_s[i] + part_s[i]

            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()  # V(nb) landed; every warp is done with K(nb)
            if nb + 1 < n_blocks:
                _load_k(g2s, tKsK, ckv, kpe, kv_indices, kv_beg, kv_len, nb + 1, rows_per_pass, my_row, my_chunk)
                cute.arch.cp_async_commit_group()

            s_mn = _mn_view(acc_s)
            o_mn = _mn_view(acc_o)
            for i in cutlass.range_constexpr(n_rows):
                for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
                    key = nb * block_n + tScS[0, c][1]
                    s_mn[i, c] = cutlass.Float32(cutlass.select_(key <= row_lim[i], s_mn[i, c] * scale_log2,
                                                                 -cutlass.Float32.inf))
                m_blk = s_mn[i, 0]
                for c in cutlass.range_constexpr(1, cute.size(s_mn, mode=[1])):
                    m_blk = cute.arch.fmax(m_blk, s_mn[i, c])
                m_new = cute.arch.fmax(row_max[i], _quad_max(m_blk))
                alpha = cute.math.exp2(row_max[i] - m_new, fastmath=True)
                p_sum = cutlass.Float32(0.0)
                for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
                    p = cute.math.exp2(s_mn[i, c] - m_new, fastmath=True)
                    s_mn[i, c] = p
                    p_sum = p_sum + p
                row_sum[i] = row_sum[i] * alpha + p_sum
                row_max[i] = m_new
                for c in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                    o_mn[i, c] = o_mn[i, c] * alpha

            p_hi = cute.make_fragment_like(acc_s, cutlass.BFloat16)
            p_hi.store(acc_s.load().to(cutlass.BFloat16))
            p_lo = cute.make_fragment_like(acc_s, cutlass.BFloat16)
            p_lo.store((acc_s.load() - p_hi.load().to(cutlass.Float32)).to(cutlass.BFloat16))
            a_hi = _as_a_operand(p_hi)
            a_lo = _as_a_operand(p_lo)
            for kb in cutlass.range_constexpr(cute.size(a_hi, mode=[2])):
                cute.copy(s2r_v, tXsV[None, None, kb], tXrV[None, None, kb])
                cute.gemm(tiled_mma, acc_o, a_hi[None, None, kb], tOrVt[None, None, kb], acc_o)
                cute.gemm(tiled_mma, acc_o, a_lo[None, None, kb], tOrVt[None, None, kb], acc_o)

        # epilogue: normalise, write lse, stage bf16 O through shared memory (sV) for 16-byte stores
        o_mn = _mn_view(acc_o)
        lane4 = tidx % 4
        for i in cutlass.range_constexpr(n_rows):
            total = _quad_sum(row_sum[i])
            inv = cutlass.Float32(1.0) / total
            for c in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                o_mn[i, c] = o_mn[i, c] * inv
            r = r0 + tScS[i, 0][0]
            if (lane4 == 0) & (r < rows) & (vs == 0):
                lse[q_beg + r // group, kvh * group + r % group] = row_max[i] + cute.math.log2(total)
        r_o = cute.make_fragment_like(acc_o, cutlass.BFloat16)
        r_o.store(acc_o.load().to(cutlass.BFloat16))
        cute.arch.sync_threads()  # every warp is done reading sV
        r2s = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16), tiled_mma)
        thr_r2s = r2s.get_slice(tidx)
        cute.copy(r2s, thr_r2s.retile(r_o), thr_r2s.partition_D(sV))
        cute.arch.sync_threads()
        for m in cutlass.range_constexpr(cute.size(tVsV, mode=[1])):
            r = r0 + m * rows_per_pass + my_row
            if r < rows:
                tok = q_beg + r // group
                head = kvh * group + r % group
                for kk in cutlass.range_constexpr(cute.size(tVsV, mode=[2])):
                    dst = cute.local_tile(out[tok, head, None], (8,), (vs * (vo_dim // 8) + kk * cols + my_chunk,))
                    frag = cute.make_rmem_tensor((8,), cutlass.BFloat16)
                    frag.store(tVsV[None, m, kk].load())
                    cute.autovec_copy(frag, dst)


@cute.jit
def mla_paged_prefill(q_nope: cute.Tensor, q_pe: cute.Tensor, ckv: cute.Tensor, kpe: cute.Tensor,
                      qo_indptr: cute.Tensor, kv_indptr: cute.Tensor, kv_indices: cute.Tensor, out: cute.Tensor,
                      lse: cute.Tensor, scale_log2: cutlass.Float32, n_tiles: cutlass.Constexpr,
                      vo_dim: cutlass.Constexpr, stream: cuda.CUstream):
    mla_paged_prefill_kernel(q_nope, q_pe, ckv, kpe, qo_indptr, kv_indptr, kv_indices, out, lse, scale_log2,
                             vo_dim).launch(
        grid=[n_tiles, cute.size(ckv, mode=[2]) // vo_dim, 1], block=[_THREADS, 1, 1], stream=stream)


def _row_major(dtype, shape):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=16)


def _tiles(total_tokens, heads, batch):
    """An upper bound on the row tiles: each sequence wastes less than one tile."""
    return (total_tokens * heads + _BM - 1) // _BM + batch


def _slice(rank):
    """Value/output dims per CTA: 128, or 64 where the (padded) latent width is no multiple of 128."""
    return 128 if rank % 128 == 0 else 64


def _compile(batch, heads, rank, rope_dim, num_pages, total_tokens, nnz, arch=None, ptx_dir=None):
    assert rank % 64 == 0 and rope_dim % 64 == 0 and _BN == _BM
    q_nope = _row_major(cutlass.BFloat16, (total_tokens, heads, rank))
    q_pe = _row_major(cutlass.BFloat16, (total_tokens, heads, rope_dim))
    ckv = _row_major(cutlass.BFloat16, (num_pages, 1, rank))
    kpe = _row_major(cutlass.BFloat16, (num_pages, 1, rope_dim))
    qo = make_fake_compact_tensor(cutlass.Int32, (batch + 1,))
    kvp = make_fake_compact_tensor(cutlass.Int32, (batch + 1,))
    indices = make_fake_compact_tensor(cutlass.Int32, (nnz,))
    out = _row_major(cutlass.BFloat16, (total_tokens, heads, rank))
    lse = make_fake_compact_tensor(cutlass.Float32, (total_tokens, heads), stride_order=(1, 0))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(mla_paged_prefill, q_nope, q_pe, ckv, kpe, qo, kvp, indices, out, lse, 1.0,
                        _tiles(total_tokens, heads, batch), _slice(rank), make_fake_stream(), options=options)


def _pad64(x):
    """x with its last dim zero-padded to a multiple of 64 (glue for small test shapes; zero dims add
    nothing to q.k, and padded latent dims are sliced off the output)."""
    dim = x.shape[-1]
    if dim % 64 == 0:
        return x.contiguous()
    padded = x.new_zeros(*x.shape[:-1], (dim + 63) // 64 * 64)
    padded[..., :dim] = x
    return padded


def solve(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    rank_out = q_nope.shape[2]
    q_nope, q_pe, ckv_cache, kpe_cache = _pad64(q_nope), _pad64(q_pe), _pad64(ckv_cache), _pad64(kpe_cache)
    total_tokens, heads, rank = q_nope.shape
    num_pages, rope_dim = ckv_cache.shape[0], kpe_cache.shape[2]
    assert ckv_cache.shape[1] == 1 and ckv_cache.shape[2] == rank and q_pe.shape[2] == rope_dim
    batch = qo_indptr.numel() - 1
    out = torch.empty(total_tokens, heads, rank, dtype=torch.bfloat16, device=q_nope.device)
    lse = torch.empty(total_tokens, heads, dtype=torch.float32, device=q_nope.device)
    if total_tokens > 0 and batch > 0:
        indices = kv_indices.to(torch.int32).contiguous()
        key = (batch, heads, rank, rope_dim, num_pages, total_tokens, indices.numel())
        if key not in _COMPILED:
            _COMPILED[key] = _compile(*key)
        _COMPILED[key](q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr.to(torch.int32).contiguous(),
                       kv_indptr.to(torch.int32).contiguous(), indices, out, lse, float(sm_scale) * math.log2(math.e),
                       cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return (out if rank == rank_out else out[..., :rank_out].contiguous()), lse


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["batch"], w["heads"], w["rank"], w["rope_dim"], w["num_pages"], *_GRADED_TOKENS, arch,
                         ptx_dir).kernel_info)
