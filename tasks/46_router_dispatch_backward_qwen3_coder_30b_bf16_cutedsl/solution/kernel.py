"""CuTe DSL oracle for problem 46: backward of the MoE router (softmax -> top-k -> renormalise ->
linear), bf16 I/O.

DSL kernels do all the math; torch only allocates.

- ``router_bwd_kernel``, one warp per token. Lane j < k owns selection slot j: chosen = P[t, e_j],
  the renormalisation backward d_unnorm = dW_j / S - (sum_j (dW_j chosen_j) / S) / S (the sum by a
  warp butterfly) plus the expert-mask gradient grad_expert_mask[e_j, j, t]. Lane l owns experts
  l, l + 32, ...: dP = grad_router_logits[t, e], to which the k slot values are added where e = e_j
  (broadcast by shuffles; experts are distinct, so each gets at most one add, as scatter_add).
  Softmax backward dL = P (dP - sum_e dP P) (warp butterfly sum), rounded to bf16 and stored [T, E].
- ``tc_hidden_kernel`` (whole tiles: tokens and experts multiples of 64, hidden of 128):
  grad_hidden = bf16(dL W_gate) on the tensor cores: a CTA (8 warps, 4 x 2) owns 64 token rows x
  128 columns; K (= E) in steps of 32 through a two-stage shared-memory ring filled by 16-byte
  ``cp.async``; dL read by ``ldmatrix``, the N-major W_gate by ``ldmatrix.trans``; warp-level
  ``mma.sync`` m16n8k16 with bf16 operands and fp32 accumulation (exact products, fp32 sums).
- ``tc_gate_kernel``: grad_gate = dL^T X, split over K (tokens) in chunks of 2048: a CTA owns 64
  experts x 128 columns of one chunk; both operands are token-major, so dL (the transposed A) and X
  are staged with experts / columns contiguous and read by ``ldmatrix.trans``; the fp32 partial
  sums are stored per chunk.
- ``reduce_gate_kernel``: sums the partials in chunk order and rounds to bf16.
- ``gemm_hidden_kernel`` / ``gemm_gate_kernel`` (other shapes): the same products on SIMT: bf16
  operands read as 32-bit words and widened exactly to fp32 into shared memory (K-major tiles, rows
  padded by one word), 256 threads each with a 4 x 8 fp32 accumulator updated by FMAs.
``_TENSOR_CORES = False`` routes every shape through the SIMT kernels.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=65536, hidden=2048, experts=128, top_k=8)
BM, BN, BK = 64, 128, 32  # rows per tile, columns per CTA, K step
KCHUNK = 2048  # tokens per split-K chunk of grad_gate
TBM, TBN, TBK = 64, 128, 32  # tensor-core tiles: rows, columns, K step
_THREADS = 256
_ROUTE_WARPS = 4
_COMPILED = {}
_TENSOR_CORES = True  # False: the SIMT kernels for every shape


def _lo(word):
    """The bf16 in the low half of an Int32 word, as fp32 (exact)."""
    return (word << 16).bitcast(cutlass.Float32)


def _hi(word):
    """The bf16 in the high half of an Int32 word, as fp32 (exact)."""
    return (word & -65536).bitcast(cutlass.Float32)


def _smem_tiles():
    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, BM), stride=(BM + 1, 1)), byte_alignment=16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, BN), stride=(BN + 1, 1)), byte_alignment=16)
    return a_s, b_s


@cute.jit
def _load_b(b_s: cute.Tensor, b_words: cute.Tensor, k0: cutlass.Int32, k_end: cutlass.Int32, n0: cutlass.Int32,
            tidx: cutlass.Int32):
    """b_s[k, c] = B[k0 + k, n0 + c] for B [K, N] stored as words along N (zero past k_end or N)."""
    nwords = cute.size(b_words, mode=[1])
    for q in cutlass.range_constexpr(BN * BK // 2 // _THREADS):
        i = tidx + q * _THREADS
        kk = i // (BN // 2)
        w = i - kk * (BN // 2)
        b_s[kk, 2 * w] = cutlass.Float32(0.0)
        b_s[kk, 2 * w + 1] = cutlass.Float32(0.0)
        if k0 + kk < k_end and n0 // 2 + w < nwords:
            word = b_words[k0 + kk, n0 // 2 + w]
            b_s[kk, 2 * w] = _lo(word)
            b_s[kk, 2 * w + 1] = _hi(word)


@cute.jit
def _mac(acc: cute.Tensor, a_s: cute.Tensor, b_s: cute.Tensor, ty: cutlass.Int32, tx: cutlass.Int32):
    """acc[i, j] += sum_k a_s[k, ty + 16 i] * b_s[k, tx + 16 j] over the K step."""
    for k in cutlass.range_constexpr(BK):
        av = []
        for ii in cutlass.range_constexpr(4):
            av.append(a_s[k, ty + 16 * ii])
        for jj in cutlass.range_constexpr(8):
            bv = b_s[k, tx + 16 * jj]
            for ii in cutlass.range_constexpr(4):
                acc[ii, jj] = acc[ii, jj] + av[ii] * bv


@cute.kernel
def router_bwd_kernel(probs: cute.Tensor, sel: cute.Tensor, wsum: cute.Tensor, d_w: cute.Tensor, d_mask: cute.Tensor,
                      d_logit_in: cute.Tensor, d_logits: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    tokens = cute.size(probs, mode=[0])
    experts = cute.size(probs, mode=[1])
    top_k = cute.size(sel, mode=[1])  # static: the slot loop below unrolls
    per_lane = (experts + 31) // 32
    token = bidx * _ROUTE_WARPS + tidx // 32
    row = cutlass.select_(token < tokens, token, tokens - 1)  # the whole warp stays in step

    has = lane < top_k
    slot = cutlass.select_(has, lane, 0)
    e_sel = cutlass.Int32(sel[row, slot])
    chosen = probs[row, e_sel]
    dw = d_w[row, slot].to(cutlass.Float32)
    total = wsum[row, 0]
    term = cutlass.Float32(cutlass.select_(has, (dw * chosen) / total, 0.0))
    for o in (16, 8, 4, 2, 1):
        term = term + cute.arch.shuffle_sync_bfly(term, offset=o)
    val = (dw / total - term / total) + d_mask[e_sel, slot, row].to(cutlass.Float32)

    p = []
    dp = []
    for jj in cutlass.range_constexpr(per_lane):
        e = lane + 32 * jj
        ec = cutlass.select_(e < experts, e, experts - 1)
        p.append(cutlass.Float32(cutlass.select_(e < experts, probs[row, ec], 0.0)))
        dp.append(cutlass.Float32(cutlass.select_(e < experts, d_logit_in[row, ec].to(cutlass.Float32), 0.0)))
    for j in cutlass.range_constexpr(top_k):
        ej = cute.arch.shuffle_sync(e_sel, j)
        vj = cute.arch.shuffle_sync(val, j)
        for jj in cutlass.range_constexpr(per_lane):
            dp[jj] = cutlass.Float32(cutlass.select_(ej == lane + 32 * jj, dp[jj] + vj, dp[jj]))
    dot = cutlass.Float32(0.0)
    for jj in cutlass.range_constexpr(per_lane):
        dot = dot + dp[jj] * p[jj]
    for o in (16, 8, 4, 2, 1):
        dot = dot + cute.arch.shuffle_sync_bfly(dot, offset=o)
    if token < tokens:
        for jj in cutlass.range_constexpr(per_lane):
            e = lane + 32 * jj
            if e < experts:
                d_logits[token, e] = (p[jj] * (dp[jj] - dot)).to(cutlass.BFloat16)


@cute.kernel
def gemm_hidden_kernel(a_words: cute.Tensor, b_words: cute.Tensor, out: cute.Tensor):
    """out[m, n] = bf16(sum_k A[m, k] B[k, n]), A [M, K] and B [K, N] as bf16 words."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, mb, _ = cute.arch.block_idx()
    rows = cute.size(a_words, mode=[0])
    kwords = cute.size(a_words, mode=[1])
    kdim = cute.size(b_words, mode=[0])
    n_out = cute.size(out, mode=[1])
    a_s, b_s = _smem_tiles()
    m0 = mb * BM
    n0 = nb * BN
    ty = tidx // 16
    tx = tidx - ty * 16
    acc = cute.make_rmem_tensor((4, 8), cutlass.Float32)
    acc.fill(0.0)
    for k0 in range(0, kdim, BK):
        for q in cutlass.range_constexpr(BM * BK // 2 // _THREADS):
            i = tidx + q * _THREADS
            r = i // (BK // 2)
            w = i - r * (BK // 2)
            a_s[2 * w, r] = cutlass.Float32(0.0)
            a_s[2 * w + 1, r] = cutlass.Float32(0.0)
            if m0 + r < rows and k0 // 2 + w < kwords:
                word = a_words[m0 + r, k0 // 2 + w]
                a_s[2 * w, r] = _lo(word)
                a_s[2 * w + 1, r] = _hi(word)
        _load_b(b_s, b_words, k0, kdim, n0, tidx)
        cute.arch.sync_threads()
        _mac(acc, a_s, b_s, ty, tx)
        cute.arch.sync_threads()
    for ii in cutlass.range_constexpr(4):
        m = m0 + ty + 16 * ii
        if m < rows:
            for jj in cutlass.range_constexpr(8):
                if n0 + tx + 16 * jj < n_out:
                    out[m, n0 + tx + 16 * jj] = acc[ii, jj].to(cutlass.BFloat16)


@cute.kernel
def gemm_gate_kernel(at_words: cute.Tensor, b_words: cute.Tensor, part: cute.Tensor):
    """part[s, m, n] = sum over k in chunk s of A[k, m] B[k, n], A [K, M] and B [K, N] as bf16 words."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, mb, s = cute.arch.block_idx()
    kdim = cute.size(at_words, mode=[0])
    mwords = cute.size(at_words, mode=[1])
    m_out = cute.size(part, mode=[1])
    n_out = cute.size(part, mode=[2])
    a_s, b_s = _smem_tiles()
    m0 = mb * BM
    n0 = nb * BN
    k_begin = s * KCHUNK
    k_end = cutlass.select_(k_begin + KCHUNK < kdim, k_begin + KCHUNK, kdim)
    ty = tidx // 16
    tx = tidx - ty * 16
    acc = cute.make_rmem_tensor((4, 8), cutlass.Float32)
    acc.fill(0.0)
    for k0 in range(k_begin, k_end, BK):
        for q in cutlass.range_constexpr(BM * BK // 2 // _THREADS):
            i = tidx + q * _THREADS
            kk = i // (BM // 2)
            w = i - kk * (BM // 2)  # word w holds rows m0 + 2w, m0 + 2w + 1
            a_s[kk, 2 * w] = cutlass.Float32(0.0)
            a_s[kk, 2 * w + 1] = cutlass.Float32(0.0)
            if k0 + kk < k_end and m0 // 2 + w < mwords:
                word = at_words[k0 + kk, m0 // 2 + w]
                a_s[kk, 2 * w] = _lo(word)
                a_s[kk, 2 * w + 1] = _hi(word)
        _load_b(b_s, b_words, k0, k_end, n0, tidx)
        cute.arch.sync_threads()
        _mac(acc, a_s, b_s, ty, tx)
        cute.arch.sync_threads()
    for ii in cutlass.range_constexpr(4):
        m = m0 + ty + 16 * ii
        if m < m_out:
            for jj in cutlass.range_constexpr(8):
                if n0 + tx + 16 * jj < n_out:
                    part[s, m, n0 + tx + 16 * jj] = acc[ii, jj]


def _mma_parts():
    """The 8-warp (4 x 2) bf16 mma.sync tiling of a 64 x 128 tile and its shared-to-register copies."""
    tiled_mma = cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((4, 2, 1)), permutation_mnk=(64, 32, 16))
    ldsm = cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16)
    ldsm_t = cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(True, 4), cutlass.BFloat16)
    return tiled_mma, ldsm, ldsm_t


def _g2s(rows, cols):
    """16-byte cp.async copies of a (rows, cols) bf16 tile, 8 contiguous values per thread and pass."""
    atom = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                               cutlass.BFloat16, num_bits_per_copy=128)
    return cute.make_tiled_copy_tv(atom, cute.make_layout((_THREADS // (cols // 8), cols // 8), stride=(cols // 8, 1)),
                                   cute.make_layout((1, 8)))


def _smem_nmajor(smem, rows, cols):
    """Two stages of a (rows, cols) bf16 tile, cols contiguous (64-wide atoms; a byte-address swizzle
    of whole 16-byte chunks, M = 4)."""
    atom = cute.make_layout((8, 64), stride=(64, 1))
    return smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (rows, cols, 2), (0, 1, 2)), 1024,
                                swizzle=cute.make_swizzle(3, 4, 3))


@cute.kernel
def tc_hidden_kernel(a: cute.Tensor, b: cute.Tensor, out: cute.Tensor):
    """out = bf16(A B) on the tensor cores, A [M, K] K-major (dL), B [K, N] N-major (W_gate)."""
    tidx, _, _ = cute.arch.thread_idx()
    mb, nb, _ = cute.arch.block_idx()
    k_tiles = cute.size(a, mode=[1]) // TBK
    smem = cutlass.memory.SmemAllocator()
    a_atom = cute.make_layout((8, TBK), stride=(TBK, 1))
    sA = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(a_atom, (TBM, TBK, 2), (0, 1, 2)), 1024,
                              swizzle=cute.make_swizzle(2, 4, 3))
    sB = _smem_nmajor(smem, TBK, TBN)
    sBt = cute.composition(sB, cute.make_layout((TBN, TBK, 2), stride=(TBK, 1, TBN * TBK)))  # (n, k, stage)
    g2s_a = _g2s(TBM, TBK)
    g2s_b = _g2s(TBK, TBN)
    tAgA = g2s_a.get_slice(tidx).partition_S(cute.local_tile(a, (TBM, TBK), (mb, None)))
    tAsA = g2s_a.get_slice(tidx).partition_D(sA)
    tBgB = g2s_b.get_slice(tidx).partition_S(cute.local_tile(b, (TBK, TBN), (None, nb)))
    tBsB = g2s_b.get_slice(tidx).partition_D(sB)
    tiled_mma, ldsm, ldsm_t = _mma_parts()
    thr_mma = tiled_mma.get_slice(tidx)
    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA)[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sBt)[None, None, None, 0])
    acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((TBM, TBN)), cutlass.Float32)
    acc.fill(0.0)
    cp_a = cute.make_tiled_copy_A(ldsm, tiled_mma)
    cp_b = cute.make_tiled_copy_B(ldsm_t, tiled_mma)
    tXsA = cp_a.get_slice(tidx).partition_S(sA)
    tXrA = cp_a.get_slice(tidx).retile(tCrA)
    tXsB = cp_b.get_slice(tidx).partition_S(sBt)
    tXrB = cp_b.get_slice(tidx).retile(tCrB)

    cute.copy(g2s_a, tAgA[None, None, None, 0], tAsA[None, None, None, 0])
    cute.copy(g2s_b, tBgB[None, None, None, 0], tBsB[None, None, None, 0])
    cute.arch.cp_async_commit_group()
    for kt in range(k_tiles):
        if kt + 1 < k_tiles:  # prefetch the next K tile into the other stage
            cute.copy(g2s_a, tAgA[None, None, None, kt + 1], tAsA[None, None, None, (kt + 1) % 2])
            cute.copy(g2s_b, tBgB[None, None, None, kt + 1], tBsB[None, None, None, (kt + 1) % 2])
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(1)
        cute.arch.sync_threads()
        for kk in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.copy(cp_a, tXsA[None, None, kk, kt % 2], tXrA[None, None, kk])
            cute.copy(cp_b, tXsB[None, None, kk, kt % 2], tXrB[None, None, kk])
            cute.gemm(tiled_mma, acc, tCrA[None, None, kk], tCrB[None, None, kk], acc)
        cute.arch.sync_threads()
    tCcC = thr_mma.partition_C(cute.make_identity_tensor((TBM, TBN)))
    for i in cutlass.range_constexpr(cute.size(acc)):
        out[mb * TBM + tCcC[i][0], nb * TBN + tCcC[i][1]] = acc[i].to(cutlass.BFloat16)


@cute.kernel
def tc_gate_kernel(at: cute.Tensor, b: cute.Tensor, part: cute.Tensor):
    """part[s] = A B over K chunk s on the tensor cores, A given transposed [K, M] (dL), B [K, N] (X)."""
    tidx, _, _ = cute.arch.thread_idx()
    mb, nb, s = cute.arch.block_idx()
    k_tiles = cute.size(at, mode=[0]) // TBK
    kt0 = s * (KCHUNK // TBK)
    kt1 = cutlass.min(kt0 + KCHUNK // TBK, k_tiles)
    smem = cutlass.memory.SmemAllocator()
    sA = _smem_nmajor(smem, TBK, TBM)  # (k, m, stage), m contiguous
    sB = _smem_nmajor(smem, TBK, TBN)
    sAt = cute.composition(sA, cute.make_layout((TBM, TBK, 2), stride=(TBK, 1, TBM * TBK)))  # (m, k, stage)
    sBt = cute.composition(sB, cute.make_layout((TBN, TBK, 2), stride=(TBK, 1, TBN * TBK)))  # (n, k, stage)
    g2s_a = _g2s(TBK, TBM)
    g2s_b = _g2s(TBK, TBN)
    tAgA = g2s_a.get_slice(tidx).partition_S(cute.local_tile(at, (TBK, TBM), (None, mb)))
    tAsA = g2s_a.get_slice(tidx).partition_D(sA)
    tBgB = g2s_b.get_slice(tidx).partition_S(cute.local_tile(b, (TBK, TBN), (None, nb)))
    tBsB = g2s_b.get_slice(tidx).partition_D(sB)
    tiled_mma, _, ldsm_t = _mma_parts()
    thr_mma = tiled_mma.get_slice(tidx)
    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sAt)[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sBt)[None, None, None, 0])
    acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((TBM, TBN)), cutlass.Float32)
    acc.fill(0.0)
    cp_a = cute.make_tiled_copy_A(ldsm_t, tiled_mma)
    cp_b = cute.make_tiled_copy_B(ldsm_t, tiled_mma)
    tXsA = cp_a.get_slice(tidx).partition_S(sAt)
    tXrA = cp_a.get_slice(tidx).retile(tCrA)
    tXsB = cp_b.get_slice(tidx).partition_S(sBt)
    tXrB = cp_b.get_slice(tidx).retile(tCrB)

    cute.copy(g2s_a, tAgA[None, None, None, kt0], tAsA[None, None, None, 0])
    cute.copy(g2s_b, tBgB[None, None, None, kt0], tBsB[None, None, None, 0])
    cute.arch.cp_async_commit_group()
    for kt in range(kt0, kt1):
        if kt + 1 < kt1:  # prefetch the next K tile into the other stage
            cute.copy(g2s_a, tAgA[None, None, None, kt + 1], tAsA[None, None, None, (kt + 1 - kt0) % 2])
            cute.copy(g2s_b, tBgB[None, None, None, kt + 1], tBsB[None, None, None, (kt + 1 - kt0) % 2])
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(1)
        cute.arch.sync_threads()
        for kk in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.copy(cp_a, tXsA[None, None, kk, (kt - kt0) % 2], tXrA[None, None, kk])
            cute.copy(cp_b, tXsB[None, None, kk, (kt - kt0) % 2], tXrB[None, None, kk])
            cute.gemm(tiled_mma, acc, tCrA[None, None, kk], tCrB[None, None, kk], acc)
        cute.arch.sync_threads()
    tCcC = thr_mma.partition_C(cute.make_identity_tensor((TBM, TBN)))
    for i in cutlass.range_constexpr(cute.size(acc)):
        part[s, mb * TBM + tCcC[i][0], nb * TBN + tCcC[i][1]] = acc[i]


@cute.kernel
def reduce_gate_kernel(part: cute.Tensor, out: cute.Tensor):
    """out[m, n] = bf16(sum_s part[s, m, n]), s ascending."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, m, _ = cute.arch.block_idx()
    chunks = cute.size(part, mode=[0])
    n_out = cute.size(out, mode=[1])
    n = nb * _THREADS + tidx
    if n < n_out:
        total = cutlass.Float32(0.0)
        for s in range(chunks):
            total = total + part[s, m, n]
        out[m, n] = total.to(cutlass.BFloat16)


@cute.jit
def router_bwd(probs: cute.Tensor, sel: cute.Tensor, wsum: cute.Tensor, d_w: cute.Tensor, d_mask: cute.Tensor,
               d_logit_in: cute.Tensor, d_logits: cute.Tensor, stream: cuda.CUstream):
    tokens = cute.size(probs, mode=[0])
    router_bwd_kernel(probs, sel, wsum, d_w, d_mask, d_logit_in, d_logits).launch(
        grid=[(tokens + _ROUTE_WARPS - 1) // _ROUTE_WARPS, 1, 1], block=[_ROUTE_WARPS * 32, 1, 1], stream=stream)


@cute.jit
def gemm_hidden(a_words: cute.Tensor, b_words: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
    gemm_hidden_kernel(a_words, b_words, out).launch(
        grid=[(cute.size(out, mode=[1]) + BN - 1) // BN, (cute.size(out, mode=[0]) + BM - 1) // BM, 1],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def gemm_gate(at_words: cute.Tensor, b_words: cute.Tensor, part: cute.Tensor, stream: cuda.CUstream):
    gemm_gate_kernel(at_words, b_words, part).launch(
        grid=[(cute.size(part, mode=[2]) + BN - 1) // BN, (cute.size(part, mode=[1]) + BM - 1) // BM,
              cute.size(part, mode=[0])],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def tc_hidden(a: cute.Tensor, b: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
    tc_hidden_kernel(a, b, out).launch(
        grid=[cute.size(out, mode=[0]) // TBM, cute.size(out, mode=[1]) // TBN, 1], block=[_THREADS, 1, 1],
        stream=stream)


@cute.jit
def tc_gate(at: cute.Tensor, b: cute.Tensor, part: cute.Tensor, stream: cuda.CUstream):
    tc_gate_kernel(at, b, part).launch(
        grid=[cute.size(part, mode=[1]) // TBM, cute.size(part, mode=[2]) // TBN, cute.size(part, mode=[0])],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def reduce_gate(part: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
    reduce_gate_kernel(part, out).launch(
        grid=[(cute.size(out, mode=[1]) + _THREADS - 1) // _THREADS, cute.size(out, mode=[0]), 1],
        block=[_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(dtype, shape):
    order = tuple(range(len(shape) - 1, -1, -1))
    return make_fake_compact_tensor(dtype, shape, stride_order=order, assumed_align=4)


def _fake16(dtype, shape):
    order = tuple(range(len(shape) - 1, -1, -1))
    return make_fake_compact_tensor(dtype, shape, stride_order=order, assumed_align=16)


def _use_tensor_cores(tokens, hidden, experts):
    """The tensor-core kernels need whole tiles: tokens of 64 (and 32-token K steps), experts of 64 (and 32-wide
    K steps), hidden of 128."""
    return _TENSOR_CORES and tokens % TBM == 0 and experts % TBM == 0 and hidden % TBN == 0


def _chunks(tokens):
    return max(1, (tokens + KCHUNK - 1) // KCHUNK)


def _compile(kind, tokens, hidden, experts, top_k, arch=None, ptx_dir=None):
    bf16, f32, i32 = cutlass.BFloat16, cutlass.Float32, cutlass.Int32
    opts = _options(arch, ptx_dir)
    if kind == "router":
        return cute.compile(router_bwd, _fake(f32, (tokens, experts)), _fake(cutlass.Int64, (tokens, top_k)),
                            _fake(f32, (tokens, 1)), _fake(bf16, (tokens, top_k)),
                            _fake(bf16, (experts, top_k, tokens)), _fake(bf16, (tokens, experts)),
                            _fake(bf16, (tokens, experts)), make_fake_stream(), options=opts)
    if kind == "hidden":
        return cute.compile(gemm_hidden, _fake(i32, (tokens, experts // 2)), _fake(i32, (experts, hidden // 2)),
                            _fake(bf16, (tokens, hidden)), make_fake_stream(), options=opts)
    if kind == "gate":
        return cute.compile(gemm_gate, _fake(i32, (tokens, experts // 2)), _fake(i32, (tokens, hidden // 2)),
                            _fake(f32, (_chunks(tokens), experts, hidden)), make_fake_stream(), options=opts)
    if kind == "tc_hidden":
        return cute.compile(tc_hidden, _fake16(bf16, (tokens, experts)), _fake16(bf16, (experts, hidden)),
                            _fake(bf16, (tokens, hidden)), make_fake_stream(), options=opts)
    if kind == "tc_gate":
        return cute.compile(tc_gate, _fake16(bf16, (tokens, experts)), _fake16(bf16, (tokens, hidden)),
                            _fake(f32, (_chunks(tokens), experts, hidden)), make_fake_stream(), options=opts)
    return cute.compile(reduce_gate, _fake(f32, (_chunks(tokens), experts, hidden)), _fake(bf16, (experts, hidden)),
                        make_fake_stream(), options=opts)


_KINDS = ("router", "tc_hidden", "tc_gate", "reduce", "hidden", "gate")


def _fn(kind, shape):
    key = (kind, shape)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(kind, *shape)
    return _COMPILED[key]


def _words(t):
    """A bf16 tensor's values as int32 words (two consecutive values each, low half first)."""
    return t.contiguous().view(torch.int32)


def solve(hidden_states, gate_weight, routing_probs, selected_experts, routing_weights_sum,
          grad_routing_weights, grad_expert_mask, grad_router_logits):
    tokens, hidden = hidden_states.shape
    experts = gate_weight.shape[0]
    top_k = selected_experts.shape[1]
    device = hidden_states.device
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    bf16 = torch.bfloat16
    shape = (tokens, hidden, experts, top_k)
    d_logits = torch.empty(tokens, experts, dtype=bf16, device=device)
    _fn("router", shape)(routing_probs.contiguous(), selected_experts.contiguous(), routing_weights_sum.contiguous(),
                         grad_routing_weights.contiguous(), grad_expert_mask.contiguous(),
                         grad_router_logits.contiguous(), d_logits, stream)
    grad_hidden = torch.empty(tokens, hidden, dtype=bf16, device=device)
    part = torch.empty(_chunks(tokens), experts, hidden, dtype=torch.float32, device=device)
    if _use_tensor_cores(tokens, hidden, experts):
        _fn("tc_hidden", shape)(d_logits, gate_weight.contiguous(), grad_hidden, stream)
        _fn("tc_gate", shape)(d_logits, hidden_states.contiguous(), part, stream)
    else:
        _fn("hidden", shape)(_words(d_logits), _words(gate_weight), grad_hidden, stream)
        _fn("gate", shape)(_words(d_logits), _words(hidden_states), part, stream)
    grad_gate = torch.empty(experts, hidden, dtype=bf16, device=device)
    _fn("reduce", shape)(part, grad_gate, stream)
    return grad_hidden, grad_gate


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    shape = (w["tokens"], w["hidden"], w["experts"], w["top_k"])
    return [name for kind in _KINDS for name in _compile(kind, *shape, arch, ptx_dir).kernel_info]
