"""CuTe DSL oracle for problem 09: causal ragged GQA prefill (8 query heads on 1 KV head, dim 256),
flash-attention style on the tensor cores.

The whole computation is one DSL kernel. Rows of work are (query token, head of the KV group) pairs
of one sequence and one KV head, packed token-major (row r is token r // 8, head r % 8), so the
eight query heads that share the KV head share every K/V tile. A CTA of 4 warps takes 64 such rows
(16 per warp); the grid is (an upper bound on the number of row tiles, KV heads) and each CTA finds
its sequence and row tile by a scan of qo_indptr (CTAs past the last tile do nothing; the heaviest
tile of each sequence gets the lowest index).
- Q rows (gathered from q) and, for each block of 16 keys (64 at head dim <= 128: the head-dim-256
  O accumulators take 128 registers per thread), the K and V rows (k/v[kv_indptr[b] + j]
  for key j) are copied to swizzled shared memory by 16-byte ``cp.async``; rows past the end of the
  sequence are clamped to its last row (they are never used). The V copy of a block overlaps
  S = Q K^T, the K copy of the next block overlaps the softmax and P V.
- S = Q K^T and O += P V run as warp-level ``mma.sync`` m16n8k16 (bf16 operands from ``ldmatrix``,
  fp32 accumulators): products of bf16 values are exact in fp32, so S is the reference's fp32 logit
  up to summation order. S's 256-wide dot products are summed per 16-wide slab by the MMA (from
  zero) and the 16 slab sums added by fp32 adds: chained through the MMA's accumulator (which does
  not round each add as IEEE fp32 does), the lse of a row with one visible key (its one logit)
  missed the row allowance on the H100 in a final grade. V is read through ``ldmatrix.trans``.
- Softmax in base 2 and fp32: s = S * sm_scale * log2(e); key j is masked (-inf) for a row of query
  i unless j <= i + (L_kv - L_q) (the cached prefix comes first). Online update per row: m_new =
  max(m, rowmax s), alpha = exp2(m - m_new), p = exp2(s - m_new), l = l * alpha + rowsum p, O = O *
  alpha + P V. Row maxima and sums are reduced over the 4 lanes sharing a row by butterfly shuffles.
  The first key block always holds key 0, visible to every row, so m is finite after it.
- P V keeps the fp32 precision of p: p is split into hi = bf16(p) and lo = bf16(p - hi), and both
  bf16 operands go through the MMA (hi + lo carries ~16 significant bits of p).
- Epilogue: output = O * (1 / l) (IEEE reciprocal), rounded to bf16 once and written through shared
  memory with 16-byte stores; lse = m + log2(l), the base-2 log-sum-exp (the reference's lse / ln 2).
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=63, heads=8, kv_heads=1, head_dim=256)
TOTAL_TOKENS, TOTAL_KV = 3053, 4841  # qo_indptr[-1] and kv_indptr[-1] of the captured profile
_BM = 64  # rows (token, head) per CTA: 4 warps x 16
_THREADS = 128
_COMPILED = {}


def _block_n(head_dim):
    """Keys per block: 64, or 16 at head_dim 256 (register budget of the O accumulators)."""
    return 64 if head_dim <= 128 else 16


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


def _load_kv(g2s, dst, cache, kv_beg, kv_len, kvh, nb, block_n, rows_per_pass, my_row, my_chunk):
    """cp.async of key block nb (rows past the sequence clamped to its last key) into dst (a g2s partition)."""
    for m in range(cute.size(dst, mode=[1])):
        j = cutlass.min(nb * block_n + m * rows_per_pass + my_row, kv_len - 1)
        for kk in range(cute.size(dst, mode=[2])):
            src = cute.local_tile(cache[kv_beg + j, kvh, None], (8,), (kk * 8 + my_chunk,))
            cute.copy(g2s, src, dst[None, m, kk])


@cute.kernel
def gqa_ragged_prefill_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, qo_indptr: cute.Tensor,
                              kv_indptr: cute.Tensor, out: cute.Tensor, lse: cute.Tensor, scale_log2: cutlass.Float32,
                              block_n: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    tile, kvh, _ = cute.arch.block_idx()
    heads = cute.size(q, mode=[1])
    head_dim = cute.size(q, mode=[2])
    group = heads // cute.size(k, mode=[1])
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
        sQ = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, head_dim), (0, 1)), 1024,
                                  swizzle=swizzle)
        sK = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (block_n, head_dim), (0, 1)), 1024,
                                  swizzle=swizzle)
        sV = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (block_n, head_dim), (0, 1)), 1024,
                                  swizzle=swizzle)
        sVt = cute.composition(sV, cute.make_layout((head_dim, block_n), stride=(block_n, 1)))  # (d, key)

        g2s = cute.make_tiled_copy_tv(
            cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                                cutlass.BFloat16, num_bits_per_copy=128),
            cute.make_layout((rows_per_pass, cols), stride=(cols, 1)), cute.make_layout((1, 8)))
        thr_g2s = g2s.get_slice(tidx)
        tQsQ = thr_g2s.partition_D(sQ)  # ((8, 1), BM / 16, head_dim / 64)
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
                src = cute.local_tile(q[tok, head, None], (8,), (kk * cols + my_chunk,))
                cute.copy(g2s, src, tQsQ[None, m, kk])

        tiled_mma = cute.make_tiled_mma(
            cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
            cute.make_layout((_THREADS // 32, 1, 1)), permutation_mnk=(_BM, 16, 16))
        thr_mma = tiled_mma.get_slice(tidx)
        tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))
        tSrK = thr_mma.make_fragment_B(thr_mma.partition_B(sK))
        tOrVt = thr_mma.make_fragment_B(thr_mma.partition_B(sVt))
        acc_o = cute.make_rmem_tensor(thr_mma.partition_shape_C((_BM, head_dim)), cutlass.Float32)
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

        _load_kv(g2s, tKsK, k, kv_beg, kv_len, kvh, 0, block_n, rows_per_pass, my_row, my_chunk)
        cute.arch.cp_async_commit_group()

        for nb in range(n_blocks):
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()  # K(nb) (and Q) landed; every warp is done with V(nb - 1)
            _load_kv(g2s, tVsV, v, kv_beg, kv_len, kvh, nb, block_n, rows_per_pass, my_row, my_chunk)
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
                _load_kv(g2s, tKsK, k, kv_beg, kv_len, kvh, nb + 1, block_n, rows_per_pass, my_row, my_chunk)
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

        # epilogue: normalise, write lse, stage bf16 O through shared memory (sQ) for 16-byte stores
        o_mn = _mn_view(acc_o)
        lane4 = tidx % 4
        for i in cutlass.range_constexpr(n_rows):
            total = _quad_sum(row_sum[i])
            inv = cutlass.Float32(1.0) / total
            for c in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                o_mn[i, c] = o_mn[i, c] * inv
            r = r0 + tScS[i, 0][0]
            if (lane4 == 0) & (r < rows):
                lse[q_beg + r // group, kvh * group + r % group] = row_max[i] + cute.math.log2(total)
        r_o = cute.make_fragment_like(acc_o, cutlass.BFloat16)
        r_o.store(acc_o.load().to(cutlass.BFloat16))
        cute.arch.sync_threads()  # every warp is done reading sQ
        r2s = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16), tiled_mma)
        thr_r2s = r2s.get_slice(tidx)
        cute.copy(r2s, thr_r2s.retile(r_o), thr_r2s.partition_D(sQ))
        cute.arch.sync_threads()
        for m in cutlass.range_constexpr(cute.size(tQsQ, mode=[1])):
            r = r0 + m * rows_per_pass + my_row
            if r < rows:
                tok = q_beg + r // group
                head = kvh * group + r % group
                for kk in cutlass.range_constexpr(cute.size(tQsQ, mode=[2])):
                    dst = cute.local_tile(out[tok, head, None], (8,), (kk * cols + my_chunk,))
                    frag = cute.make_rmem_tensor((8,), cutlass.BFloat16)
                    frag.store(tQsQ[None, m, kk].load())
                    cute.autovec_copy(frag, dst)


@cute.jit
def gqa_ragged_prefill(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, qo_indptr: cute.Tensor, kv_indptr: cute.Tensor,
                       out: cute.Tensor, lse: cute.Tensor, scale_log2: cutlass.Float32, n_tiles: cutlass.Constexpr,
                       stream: cuda.CUstream):
    head_dim = cute.size(q, mode=[2])
    gqa_ragged_prefill_kernel(q, k, v, qo_indptr, kv_indptr, out, lse, scale_log2, _block_n(head_dim)).launch(
        grid=[n_tiles, cute.size(k, mode=[1]), 1], block=[_THREADS, 1, 1], stream=stream)


def _row_major(dtype, shape):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=16)


def _tiles(total_tokens, heads, kv_heads, batch):
    """An upper bound on the row tiles of one KV head: each sequence wastes less than one tile."""
    return (total_tokens * (heads // kv_heads) + _BM - 1) // _BM + batch


def _compile(batch, heads, kv_heads, head_dim, total_tokens, total_kv, arch=None, ptx_dir=None):
    assert head_dim % 64 == 0 and heads % kv_heads == 0
    q = _row_major(cutlass.BFloat16, (total_tokens, heads, head_dim))
    kv = [_row_major(cutlass.BFloat16, (total_kv, kv_heads, head_dim)) for _ in range(2)]
    qo = make_fake_compact_tensor(cutlass.Int32, (batch + 1,))
    kvp = make_fake_compact_tensor(cutlass.Int32, (batch + 1,))
    out = _row_major(cutlass.BFloat16, (total_tokens, heads, head_dim))
    lse = make_fake_compact_tensor(cutlass.Float32, (total_tokens, heads), stride_order=(1, 0))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(gqa_ragged_prefill, q, *kv, qo, kvp, out, lse, 1.0,
                        _tiles(total_tokens, heads, kv_heads, batch), make_fake_stream(), options=options)


def solve(q, k, v, qo_indptr, kv_indptr, sm_scale):
    total_tokens, heads, head_dim = q.shape
    total_kv, kv_heads, _ = k.shape
    batch = qo_indptr.numel() - 1
    out = torch.empty(total_tokens, heads, head_dim, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(total_tokens, heads, dtype=torch.float32, device=q.device)
    if total_tokens == 0 or batch == 0:
        return out, lse
    key = (batch, heads, kv_heads, head_dim, total_tokens, total_kv)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](q.contiguous(), k.contiguous(), v.contiguous(), qo_indptr.to(torch.int32).contiguous(),
                   kv_indptr.to(torch.int32).contiguous(), out, lse, float(sm_scale) * math.log2(math.e),
                   cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out, lse


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["batch"], w["heads"], w["kv_heads"], w["head_dim"], TOTAL_TOKENS, TOTAL_KV, arch,
                         ptx_dir).kernel_info)
